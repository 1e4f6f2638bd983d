// The block problems of the ring: a rank's query chunk against one key/value
// chunk of the sequence, as an ordinary attention problem a backend runs.
//
// A chunk pair (queries at global rows [q0, q0 + cq), keys at [k0, k0 + ck))
// sees, per sequence b, the part of the global mask (causal, window, either
// alignment, kv_lengths padding) that falls inside it. The block problem
// expresses that part with what every backend has: per-sequence kv_lengths
// (local valid keys; 0 hides the sequence from this block), a top-left
// causal mask when the pair lies on the diagonal, and otherwise a dense
// blocked_mask [B, 1, cq, ck] (broadcast over heads) built from the global
// mask. Block problems use f32 Q and O (partials merge in f32) and the
// problem's K/V dtype.
#ifndef ATTNKIT_DISTRIBUTED_BLOCK_PLAN_H_
#define ATTNKIT_DISTRIBUTED_BLOCK_PLAN_H_

#include <cstdint>
#include <vector>

#include "core/problem.h"
#include "distributed/sharding.h"

namespace attnkit {
namespace dist {

enum class BlockMask {
  kHidden,  // no query of the chunk sees a key of the chunk: skip the pair
  kNone,    // each sequence sees the first kv_lengths[b] keys of the chunk
  kCausal,  // top-left causal within the chunk (and kv_lengths)
  kDense,   // `dense` holds the blocked pairs
};

struct BlockPlan {
  BlockMask mask = BlockMask::kHidden;
  // Local valid keys per sequence (0: the sequence sees nothing here).
  std::vector<int64_t> kv_lengths;
  // kDense only: u8 [B, cq, ck], 1 = blocked.
  std::vector<uint8_t> dense;
};

// Plans the pair (query rows [q0, q0 + cq), key rows [k0, k0 + ck)) of the
// global problem `p`. Without `build_dense`, a kDense plan leaves `dense`
// empty (its kind and kv_lengths are all a caller checking it needs).
BlockPlan PlanBlock(const AttentionProblem& p, int64_t q0, int64_t cq, int64_t k0, int64_t ck,
                    bool build_dense = true);

// The block problem of a plan: B, H, G, d, scale, softcap and K/V dtype of
// `p`; Tq = cq, Tk = ck; f32 Q/O; BHTD; return_lse; kv_lengths only when
// some sequence sees fewer than ck keys; the memory budget of `p`.
AttentionProblem BlockProblem(const AttentionProblem& p, const BlockPlan& plan, int64_t cq,
                              int64_t ck);

// Ring steps needed: 1 + the largest s at which some rank r has a visible
// pair against the block of rank (r - s) mod N. The same on every rank.
int RingSteps(const AttentionProblem& p, const ShardLayout& q_layout, const ShardLayout& kv_layout);

}  // namespace dist
}  // namespace attnkit

#endif  // ATTNKIT_DISTRIBUTED_BLOCK_PLAN_H_
