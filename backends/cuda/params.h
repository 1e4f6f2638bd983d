// Arguments to parameters: turns a validated AttentionProblem and its
// AttentionArgs (device pointers) into the FlashParams the kernels consume.
// Plain host code, tested on the CPU.
#ifndef ATTNKIT_BACKENDS_CUDA_PARAMS_H_
#define ATTNKIT_BACKENDS_CUDA_PARAMS_H_

#include <string>
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

// The tiles' type. EXACT: f16 or bf16 when Q and K/V share that type (Q.K
// on tensor cores); f32 otherwise (both f32, or mixed types and int8 K/V,
// converted exactly to f32 on load). FAST with f16 or bf16 K/V: K/V's type
// whatever Q's (Q is rounded to it on load, as FAST permits).
ComputeKind ComputeKindFor(DType q, DType kv, ComputeMode mode);

// The element type P is multiplied in for P.V: the 16-bit compute type when
// f.round_p (FAST), else f32.
ElemType ProbabilityType(const FlashParams& f);

// "f32", "f16", "bf16", "i8".
const char* ElemTypeName(ElemType t);

// What the kernels round, for the run info (a report says which mode ran):
// "p=f32" when P stays f32 (EXACT, or FAST with nothing to round), "p=bf16"
// or "p=f16" when FAST rounds P; preceded by "q->bf16 " (or f16) when FAST
// rounds a Q stored in another type.
std::string ComputeTag(const FlashParams& f);

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

// The cuBLAS backend's GEMM operand types: Q and K in `qk` for S = Q K^T
// (f.compute: Q and K converted to it when stored otherwise), P and V in
// `pv` for O = P V: ProbabilityType(f), so f32 under EXACT (V widened
// exactly, an f32 GEMM) and the 16-bit compute type under FAST.
struct CublasTypes {
  ElemType qk = ElemType::kF32;
  ElemType pv = ElemType::kF32;
};
CublasTypes CublasTypesFor(const FlashParams& f);

// cuBLAS backend blocking: bytes of scores, probabilities (elem_bytes each,
// CublasTypes::pv) and output accumulators one query row costs over all G
// KV heads, and the query rows per block that fit `budget_bytes` (at least
// 1, at most q_len).
int64_t CublasBytesPerQueryRow(int64_t num_kv_heads, int64_t kv_len, int64_t head_dim,
                               int64_t elem_bytes);
int64_t CublasQueryBlock(int64_t q_len, int64_t bytes_per_row, int64_t budget_bytes);

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_PARAMS_H_
