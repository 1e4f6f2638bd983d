// Backends the suites run besides the registered ones, on a reduced grid:
//  - the highway backend once more per Highway target this CPU supports
//    besides the dispatched one, registered as "highway-AVX2",
//    "highway-SSE4", ... (under an ATTNKIT_HWY_TARGET cap, the targets below
//    the cap), each calling its target's kernels through the dispatch table
//    directly;
//  - "blas-scalar": the block-GEMM backend on plain loops with every product
//    type (backends/blas/scalar_engine.h), so that its int8 and 16-bit
//    product paths, which oneDNN takes only on CPUs with VNNI or
//    AVX512_BF16, are checked on every CPU.
#ifndef ATTNKIT_TESTS_HIGHWAY_TARGET_BACKENDS_H_
#define ATTNKIT_TESTS_HIGHWAY_TARGET_BACKENDS_H_

#include <cstddef>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace attnkit {
namespace testing_env {

// Registers them in GlobalRegistry() on the first call (a failure to
// register is a test failure) and returns their names.
const std::set<std::string>& ReducedGridBackends();

// (backend name, grid index) for a suite over a grid of `grid_size` cases:
// every registered backend (BackendNames) on every case, the backends above
// on every kReducedStride-th, which still meets every
// variant, shape and dtype pair of the grids at a third of the run time.
constexpr size_t kReducedStride = 3;
std::vector<std::tuple<std::string, size_t>> BackendGridCases(size_t grid_size);

}  // namespace testing_env
}  // namespace attnkit

#endif  // ATTNKIT_TESTS_HIGHWAY_TARGET_BACKENDS_H_
