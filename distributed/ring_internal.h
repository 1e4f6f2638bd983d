// Internals of distributed/ring_attention.cc shared by its strategy files: the ring
// forward and backward passes, Ulysses, and the f32 staging of rows.
#ifndef ATTNKIT_DISTRIBUTED_RING_INTERNAL_H_
#define ATTNKIT_DISTRIBUTED_RING_INTERNAL_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "core/backend.h"
#include "core/problem.h"
#include "core/tensor.h"
#include "distributed/block_plan.h"
#include "distributed/comm.h"
#include "distributed/ring_attention.h"
#include "distributed/sharding.h"

namespace attnkit {
namespace dist {

// Message tags; MPI keeps the order of messages with one (source, tag).
enum Tag : int { kTagK = 11, kTagV = 12, kTagDkv = 13, kTagDkvHome = 14 };

// Buffers a DistributedAttention keeps between calls: first-touching fresh
// pages costs about 11 us per 4 KiB here, which a repeated call should not
// pay again. Slot i is reused while large enough; contents are not kept.
class Workspace {
 public:
  // `elements` floats (or bytes, for Bytes) at slot `slot`; zero-filled when
  // `zero`.
  absl::StatusOr<float*> Floats(int slot, int64_t elements, bool zero);
  absl::StatusOr<void*> Bytes(int slot, int64_t bytes);

 private:
  std::vector<AlignedBuffer> slots_;
};

struct RingContext {
  Communicator* comm;
  Backend* backend;
  const AttentionProblem* p;
  ShardLayout q_layout, kv_layout;
  int steps;  // RingSteps
  DistStats* stats;
  Workspace* workspace;
};

absl::Status RingForward(const RingContext& ctx, const ShardArgs& shard);
absl::Status RingBackward(const RingContext& ctx, const ShardArgs& shard, const ShardGrads& grads);
absl::Status UlyssesBackward(Communicator* comm, Backend* backend, const AttentionProblem& p,
                             const ShardArgs& shard, const ShardGrads& grads, DistStats* stats,
                             Workspace* workspace);
absl::Status UlyssesForward(Communicator* comm, Backend* backend, const AttentionProblem& p,
                            const ShardArgs& shard, DistStats* stats, Workspace* workspace);

// Rows [row0, row0 + rows) of `src` ([B, H, T, d] or [B, H, T], any float
// dtype) as f32 into the contiguous `dst` ([B, H, rows(, d)]).
void RowsToF32(const TensorView& src, int64_t row0, int64_t rows, float* dst);
// The reverse: contiguous f32 rows into `dst`'s rows, rounded to its dtype.
void RowsFromF32(const float* src, int64_t row0, int64_t rows, const TensorView& dst);

// A [B, X, rows, d] view of rows [row0, row0 + rows) of the contiguous
// [B, X, T, d] buffer at `data` (dtype `t`).
TensorView RowView(void* data, DType t, int64_t b, int64_t x, int64_t total_rows, int64_t row0,
                   int64_t rows, int64_t d);

// Sets args->kv_lengths (from `lens`, B int32 the caller owns, filled from
// plan.kv_lengths) and args->blocked_mask (plan.dense broadcast over heads)
// as block problem `sp` needs them.
void SetBlockMask(const AttentionProblem& sp, const BlockPlan& plan, int32_t* lens,
                  AttentionArgs* args);

// One ring step's K/V traffic: this rank's current block (K at cur_k, V at
// cur_v, kv_bytes each) to `next`, the next block from `prev` into next_kv
// (K, then V).
absl::Status PassKvBlock(Communicator& comm, const void* cur_k, const void* cur_v, char* next_kv,
                         int64_t kv_bytes, int next, int prev,
                         std::vector<Communicator::Request>* requests);

// Merges a block's partial output into the accumulator, row by row, through
// the log-sum-exp (as split-K decode does): acc_o/part_o [rows, d], lse
// [rows]; a part row with lse -inf saw no key and is skipped.
void MergePartial(float* acc_o, float* acc_lse, const float* part_o, const float* part_lse,
                  int64_t rows, int64_t d);

// The problem one Ulysses rank runs: p's whole sequence for H/N query heads
// and their K/V heads (G/N of them, or the one they share when N % G == 0),
// in p's dtypes. UlyssesSupports(p, ranks) must hold.
AttentionProblem HeadSliceProblem(const AttentionProblem& p, int ranks);

// Appends a posted request to `requests`, or returns the error posting it.
absl::Status Post(absl::StatusOr<Communicator::Request> request,
                  std::vector<Communicator::Request>* requests);

// Runs `compute` on a worker thread while this thread completes `transfers`
// (posted at `posted`, NowSeconds()). MPI moves a large message only inside
// MPI calls, so the wait's polling is what lets the transfer progress behind
// the compute. Adds to `stats`: compute_s (the compute's duration),
// transfer_s (posting to completion) and wait_s (completion after the
// compute ended: the exposed part). A compute error wins over a wait error.
absl::Status ComputeWhileTransferring(Communicator& comm,
                                      std::vector<Communicator::Request>& transfers, double posted,
                                      absl::string_view what,
                                      const std::function<absl::Status()>& compute,
                                      DistStats* stats);

// Seconds since an arbitrary start (steady clock).
double NowSeconds();

}  // namespace dist
}  // namespace attnkit

#endif  // ATTNKIT_DISTRIBUTED_RING_INTERNAL_H_
