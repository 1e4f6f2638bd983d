// Distributed (context-parallel) attention: one attention problem whose
// sequence is split over the ranks of an MPI communicator, computed exactly.
//
// Every rank passes the same global problem and its own shard:
//   q, o:  [B, H, Tq_local, d] in problem.dtype, Tq_local = Tq / N
//   k, v:  [B, G, Tk_local, d] in problem.kv_dtype, Tk_local = Tk / N
//   lse:   f32 [B, H, Tq_local] when problem.return_lse (needed by Backward)
// in BHTD order (contiguous views). Which global rows a rank holds is
// ShardFor(...).Ranges(rank): zigzag for causal self-attention under the
// ring, contiguous otherwise. kv_lengths (padding) are the problem's global
// per-sequence lengths, the same on every rank.
//
// Ring (distributed/strategy.h): at step s a rank holds the K/V block of rank
// r - s; it sends that block on to r + 1 and receives the next one from
// r - 1 with non-blocking transfers while it computes its queries against
// the block, on any backend, then merges the block's output into an f32
// accumulator through the log-sum-exp (as split-K decode does). Blocks its
// queries cannot see are skipped; the ring stops after the last step any
// rank needs (a sliding window ends it early). Partial results are f32:
// Q is widened to f32 for the block calls, O rounds once at the end.
// Backward runs the ring again: dK/dV accumulators (f32) travel with their
// K/V block, dQ accumulates locally, and after the last step each dK/dV
// goes home to its owner.
//
// Results do not depend on timing: blocks merge in step order, so two runs
// give the same bytes.
#ifndef ATTNKIT_DISTRIBUTED_RING_ATTENTION_H_
#define ATTNKIT_DISTRIBUTED_RING_ATTENTION_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/problem.h"
#include "distributed/comm.h"
#include "distributed/sharding.h"
#include "distributed/strategy.h"

namespace attnkit {
namespace dist {

// This rank's shard of a distributed problem (see the file comment).
struct ShardArgs {
  TensorView q, k, v, o, lse;
};
// Its gradients: d_o in (o's shape), dq (q's), dk and dv (k's) out.
struct ShardGrads {
  TensorView d_o, dq, dk, dv;
};

// What one call did on this rank.
struct DistStats {
  Strategy strategy = Strategy::kRing;
  int steps = 0;  // ring steps run (N, fewer under a window)
  int64_t blocks_computed = 0;
  int64_t blocks_skipped = 0;  // (query chunk, key chunk) pairs hidden by the mask
  double compute_s = 0.0;      // inside backend calls and merges
  // Ring transfers run behind the compute of the same step: transfer_s adds
  // up each step's transfers from posting to completion, wait_s the part of
  // them that finished after the step's compute (time blocked on the
  // network, waits for a slower peer included). Ulysses: its all-to-alls,
  // all exposed.
  double transfer_s = 0.0;
  double wait_s = 0.0;
  double total_s = 0.0;
  int64_t bytes_sent = 0;
  // Share of transfer time hidden behind compute: 1 - wait_s / transfer_s
  // (0 when nothing was sent).
  double overlap = 0.0;
};

// The shard layouts of a problem under a strategy (kRing or kUlysses):
// queries over Tq, keys/values over Tk.
absl::StatusOr<ShardLayout> QueryShard(const AttentionProblem& p, int ranks, Strategy s);
absl::StatusOr<ShardLayout> KvShard(const AttentionProblem& p, int ranks, Strategy s);

// OK when the distributed strategy can run `p` on `ranks` ranks with
// `backend` (refusals name the field: layout must be BHTD; no paged, ragged,
// int8 K/V, dense mask or bias; lengths divisible by the sharding; the
// backend's own Supports of the block problems), InvalidArgument or
// Unimplemented otherwise. `backward` adds SupportsBackward.
absl::Status DistSupports(const AttentionProblem& p, int ranks, Strategy s, Backend& backend,
                          bool backward);

// OK when Ulysses can split p's heads over `ranks`: H % N == 0, and G % N
// == 0 (each rank takes G/N K/V heads) or N % G == 0 (each rank's query
// heads share one K/V head); InvalidArgument naming the counts otherwise.
absl::Status UlyssesSupports(const AttentionProblem& p, int ranks);

// Bytes one rank allocates for `p` under `s` (its shards plus buffers): what
// p.memory_budget_bytes bounds per rank.
absl::StatusOr<int64_t> BytesPerRank(const AttentionProblem& p, int ranks, Strategy s,
                                     bool backward);

class Workspace;  // distributed/ring_internal.h

class DistributedAttention {
 public:
  // `comm` and `backend` must outlive this object. `link` is the measured
  // link (for `auto` and the overlap figure); `flops_per_s` the backend's
  // measured rate (for `auto`).
  DistributedAttention(Communicator* comm, Backend* backend, LinkModel link = {},
                       double flops_per_s = 0.0)
      : comm_(comm), backend_(backend), link_(link), flops_per_s_(flops_per_s) {}

  // The strategy `s` resolves to for `p` (kAuto: the cost model's choice).
  // Its inputs (the link, the rate) must be the same on every rank: use
  // Communicator::MeasureLink (broadcast) and an agreed rate. Forward and
  // Backward also take rank 0's choice, so ranks can never diverge there.
  Strategy Resolve(const AttentionProblem& p, Strategy s) const;

  // The checks made before anything is allocated: DistSupports and the
  // per-rank memory budget (BytesPerRank against p.memory_budget_bytes),
  // agreed over every rank (a collective). A caller that allocates its
  // shards itself calls it first, with the resolved strategy.
  absl::Status Admit(const AttentionProblem& p, Strategy s, bool backward);

  // Admits, then checks the shard's views,
  // and agrees with every rank: a refusal on any rank is returned on all.
  // Then computes this rank's O (and lse) from its shard.
  absl::Status Forward(const AttentionProblem& p, Strategy s, const ShardArgs& shard);
  // The gradients of this rank's shard; `shard` holds the forward's q, k,
  // v, o and lse (p.return_lse). Ulysses runs the head slice's backward in
  // f32 and sums the partial dK/dV of a K/V head shared by several ranks.
  absl::Status Backward(const AttentionProblem& p, Strategy s, const ShardArgs& shard,
                        const ShardGrads& grads);

  const DistStats& stats() const { return stats_; }

 private:
  Workspace* Ws();

  Communicator* comm_;
  Backend* backend_;
  LinkModel link_;
  double flops_per_s_;
  DistStats stats_;
  std::shared_ptr<Workspace> workspace_;  // buffers kept between calls
};

}  // namespace dist
}  // namespace attnkit

#endif  // ATTNKIT_DISTRIBUTED_RING_ATTENTION_H_
