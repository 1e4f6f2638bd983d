// Arguments to parameters: turns a validated AttentionProblem and its
// AttentionArgs (device pointers) into the FlashParams the kernels consume.
// Plain host code, tested on the CPU.
#ifndef ATTNKIT_BACKENDS_CUDA_PARAMS_H_
#define ATTNKIT_BACKENDS_CUDA_PARAMS_H_

#include "absl/status/statusor.h"
#include "backends/cuda/flash_params.h"
#include "core/backend.h"
#include "core/problem.h"

namespace attnkit {
namespace cuda {

// InvalidArgument for a non-float storage type.
absl::StatusOr<ElemType> ElemTypeOf(DType t);

// f16 or bf16 when Q and K/V share that type (tensor cores); f32 otherwise
// (both f32, or mixed types, converted to f32 on load).
ComputeKind ComputeKindFor(DType q, DType kv);

// Fills every field except the split-K ones (num_splits = 1). Errors are
// InvalidArgument (sizes beyond 32-bit kernel indices, non-float storage).
absl::StatusOr<FlashParams> MakeFlashParams(const AttentionProblem& p, const AttentionArgs& a);

// True when `t` can be read in 16-byte vectors as type `compute`.
bool VectorLoadable(const TensorView& t, ComputeKind compute, int64_t head_dim);

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_PARAMS_H_
