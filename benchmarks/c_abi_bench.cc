// What the plugin C ABI costs per call: the same highway backend called
// directly and through the C table (LinkedThroughCAbi: exported with the
// SDK, wrapped back by the host, as every registered backend is), on a tiny
// problem (where the boundary is all there is) and on a GQA decode step.
// Single-threaded, so the difference is the boundary, not the thread pool.
//   bazel run //benchmarks:c_abi_bench
#include <memory>

#include "backends/builtin.h"
#include "backends/highway/highway_backend.h"
#include "benchmark/benchmark.h"
#include "core/problem.h"
#include "harness/problem_data.h"

namespace attnkit {
namespace {

Backend* Direct() {
  static Backend* b = MakeHighwayBackend({1}).release();
  return b;
}

Backend* ThroughCAbi() {
  static Backend* b = LinkedThroughCAbi(MakeHighwayBackend({1})).release();
  return b;
}

void BM_Forward(benchmark::State& state, Backend* (*backend)(), AttentionProblem p) {
  p.name = p.Id();
  auto data = ProblemData::Random(p, 1);
  if (!data.ok()) {
    state.SkipWithError(std::string(data.status().message()).c_str());
    return;
  }
  const AttentionArgs args = data->args();
  Backend* b = backend();
  for (auto _ : state) {
    const absl::Status s = b->Forward(p, args, nullptr);
    if (!s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
  }
}

const AttentionProblem kTiny = BasicProblem(1, 1, 1, 1, 1, 16);
const AttentionProblem kDecode = BasicProblem(1, 8, 2, 1, 512, 64);

BENCHMARK_CAPTURE(BM_Forward, tiny_direct, &Direct, kTiny);
BENCHMARK_CAPTURE(BM_Forward, tiny_c_abi, &ThroughCAbi, kTiny);
BENCHMARK_CAPTURE(BM_Forward, decode_h8_g2_k512_d64_direct, &Direct, kDecode);
BENCHMARK_CAPTURE(BM_Forward, decode_h8_g2_k512_d64_c_abi, &ThroughCAbi, kDecode);

}  // namespace
}  // namespace attnkit

BENCHMARK_MAIN();
