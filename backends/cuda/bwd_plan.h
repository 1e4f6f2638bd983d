// Host planning of the "cuda" backward pass (bwd_params.h): arguments to
// BwdParams, the head-dim bucket and tiles, the dQ chunks and the workspace
// layout. Plain host code, tested on the CPU (bwd_plan_test.cc).
#ifndef ATTNKIT_BACKENDS_CUDA_BWD_PLAN_H_
#define ATTNKIT_BACKENDS_CUDA_BWD_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "backends/cuda/bwd_params.h"
#include "core/backend.h"
#include "core/problem.h"

namespace attnkit {
namespace cuda {

// BwdParams for a problem and tensors that passed ValidateGradArgs, with the
// plan's fields (tiles, key blocks) filled by PlanBackward and the workspace
// pointers left null. InvalidArgument for what the backward pass does not
// take (paged, ragged or int8 K/V, no lse) or what MakeFlashParams refuses.
absl::StatusOr<BwdParams> MakeBwdParams(const AttentionProblem& p, const AttentionArgs& a,
                                        const GradArgs& g);

// How one backward call runs. The workspace is, in order and 256-byte
// aligned: D [B, H, Tq]; the dQ partials of one chunk [blocks_per_chunk, B,
// H, Tq, d]; with more than one chunk, the running sum [B, H, Tq, d]. All
// f32. Depends on the shape only (never on the device), so the gradients are
// the same bits on every run.
struct BwdPlan {
  int bucket = 0;  // compiled head dim (BwdHeadDimBucket)
  int block_m = kBwdBlockM;
  int block_n = 0;
  int smem_bytes = 0;
  int64_t key_blocks = 0;  // ceil(Tk / block_n): the main kernel's blocks per (KV head, batch)
  int64_t row_tiles = 0;   // ceil(Tq * group / block_m): the steps a key block may take
  int64_t blocks_per_chunk = 0;
  int64_t num_chunks = 0;
  size_t slice_bytes = 0;                                      // one [B, H, Tq, d] f32 slice
  size_t dsum_offset = 0, partial_offset = 0, acc_offset = 0;  // acc only with num_chunks > 1
  size_t workspace_bytes = 0;
};

// The plan for `params` (from MakeBwdParams) under a budget for the dQ
// partials and accumulator: every key block in one chunk when their partials
// fit; else chunks of as many blocks as fit beside the accumulator (at least
// one), the blocks spread evenly over the chunks. Unimplemented for a head
// dim no bucket covers; InvalidArgument when a size overflows.
absl::StatusOr<BwdPlan> PlanBackward(const BwdParams& params, size_t budget_bytes);

// Copies the plan's tile fields into `params` and points its workspace
// fields into `workspace` (at least plan.workspace_bytes, device memory).
void ApplyBwdPlan(const BwdPlan& plan, void* workspace, BwdParams* params);

// The key blocks of chunk `chunk`: [begin, end).
struct ChunkSpan {
  int64_t begin, end;
};
ChunkSpan ChunkOf(const BwdPlan& plan, int64_t chunk);

// "flash-bwd-f32 d128 m32n64 kblocks=7 chunks=1": what ran, for RunInfo.
std::string BwdKernelName(const BwdPlan& plan);

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_BWD_PLAN_H_
