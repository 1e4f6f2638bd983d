// Arguments to parameters: turns a validated AttentionProblem and its
// AttentionArgs (device pointers) into the FlashParams the kernels consume.
// Plain host code, tested on the CPU.
#ifndef ATTNKIT_BACKENDS_CUDA_PARAMS_H_
#define ATTNKIT_BACKENDS_CUDA_PARAMS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "backends/cuda/flash_params.h"
#include "core/backend.h"
#include "core/problem.h"

namespace attnkit {
namespace cuda {

// The kernels' storage type for t: f32, f16, bf16 or (K/V only) i8;
// InvalidArgument for the others.
absl::StatusOr<ElemType> ElemTypeOf(DType t);

// f16 or bf16 when Q and K/V share that type (tensor cores); f32 otherwise
// (both f32, or mixed types and int8 K/V, converted to f32 on load).
ComputeKind ComputeKindFor(DType q, DType kv);

// Fills every field except the split-K ones (num_splits = 1), for a batch
// that is not ragged (paged and int8 K/V included). Errors are
// InvalidArgument (sizes beyond 32-bit kernel indices or CUDA grid limits,
// Q not in float storage, a ragged problem).
absl::StatusOr<FlashParams> MakeFlashParams(const AttentionProblem& p, const AttentionArgs& a);

// The kernel launches of one problem: a dense batch is one; a ragged batch
// is one per sequence with queries (RaggedSequences, core/ragged.h), in
// batch order, each a batch-1 problem whose pointers are views into the
// packed tensors (pointer arithmetic on the host-side lengths only, so the
// views of device tensors are never read here).
struct FlashLaunch {
  int64_t sequence = 0;  // b in the batch (0 for a dense batch)
  FlashParams params;
};
absl::StatusOr<std::vector<FlashLaunch>> MakeFlashLaunches(const AttentionProblem& p,
                                                           const AttentionArgs& a);

// True when `t` can be read in 16-byte vectors as type `compute`.
bool VectorLoadable(const TensorView& t, ComputeKind compute, int64_t head_dim);

// cuBLAS backend blocking: bytes of scores, probabilities and output
// accumulators one query row costs over all G KV heads, and the query rows
// per block that fit `budget_bytes` (at least 1, at most q_len).
int64_t CublasBytesPerQueryRow(int64_t num_kv_heads, int64_t kv_len, int64_t head_dim,
                               int64_t elem_bytes);
int64_t CublasQueryBlock(int64_t q_len, int64_t bytes_per_row, int64_t budget_bytes);

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_PARAMS_H_
