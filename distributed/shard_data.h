// Deterministic inputs for distributed attention, made where they are used:
// each rank fills only its own shard, and the single-process reference fills
// the whole problem, and both see the same values.
//
// Element (tensor, b, head, global row t, column c) is a counter-based hash
// (SplitMix64 over the seed and the indices) mapped to uniform [-1, 1) and
// rounded to the tensor's dtype. A value depends on its global indices only,
// never on which rank holds it or on what else was drawn, so no rank needs
// the whole tensor to produce its part: a problem whose K/V exceeds one
// rank's memory runs with every rank holding 1/N of it.
#ifndef ATTNKIT_DISTRIBUTED_SHARD_DATA_H_
#define ATTNKIT_DISTRIBUTED_SHARD_DATA_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/problem.h"
#include "core/tensor.h"
#include "distributed/ring_attention.h"
#include "distributed/sharding.h"
#include "harness/problem_data.h"

namespace attnkit {
namespace dist {

// The tensors that hold random inputs (part of the hash, so they differ).
enum class InputTensor : uint64_t { kQ = 1, kK = 2, kV = 3, kDO = 4 };

// The value of element (b, head, t, c) of `tensor`, t a global row: uniform
// in [-1, 1) on a 2^-23 grid (exact in f32), before rounding to a dtype.
float InputValue(uint64_t seed, InputTensor tensor, int64_t b, int64_t head, int64_t t, int64_t c);

// Fills a [B, heads, T_local, d] view (any strides, float storage) whose
// local rows are `rank`'s rows of `layout`: local row r.local + i holds
// global row r.begin + i for each RowRange r. InvalidArgument when the view
// is not rank 4 with layout.LocalRows() rows or not float storage.
absl::Status FillShardRows(const TensorView& t, InputTensor tensor, uint64_t seed,
                           const ShardLayout& layout, int rank);
// Fills a whole [B, heads, T, d] view (any strides, float storage): row t is
// global row t.
absl::Status FillFullRows(const TensorView& t, InputTensor tensor, uint64_t seed);

// This rank's tensors of one distributed problem, BHTD and contiguous:
//   q, o:          [B, H, Tq_local, d] in p.dtype (q hashed, o zero)
//   k, v:          [B, G, Tk_local, d] in p.kv_dtype (hashed)
//   lse:           f32 [B, H, Tq_local] when p.return_lse (zero)
//   d_o, dq:       q's shape and dtype (d_o hashed, dq zero), with grads
//   dk, dv:        k's shape and dtype (zero), with grads
class ShardData {
 public:
  // Allocates and fills `rank`'s shard: q rows from q_layout (length
  // p.q_len), k and v rows from kv_layout (length p.kv_len). All rows are
  // filled, also those past a sequence's kv_lengths (the problem's lengths
  // mask them). Checks the problem's shape only (layout BHTD, dense float
  // K/V, no ragged batch, dense mask or bias; grads need return_lse); the
  // per-rank memory budget is the caller's (BytesPerRank), as this is what
  // it bounds. InvalidArgument naming the field otherwise.
  static absl::StatusOr<ShardData> Random(const AttentionProblem& p, const ShardLayout& q_layout,
                                          const ShardLayout& kv_layout, int rank, uint64_t seed,
                                          bool with_grads);

  ShardArgs args() const;
  ShardGrads grads() const;  // empty views without grads

  Tensor q, k, v, o, lse, d_o, dq, dk, dv;
};

// The whole problem for the single-process fp64 reference, filled with the
// same values as the shards: data (ProblemData::Allocate's tensors, in
// p.layout) and, with `with_d_o`, d_o in o's shape and dtype. The reference
// is the oracle and must see everything, so it ignores
// p.memory_budget_bytes. The same shape rules as ShardData::Random, except
// that any layout is allowed.
struct FullData {
  ProblemData data;
  Tensor d_o;
};
absl::StatusOr<FullData> FullProblemData(const AttentionProblem& p, uint64_t seed, bool with_d_o);

}  // namespace dist
}  // namespace attnkit

#endif  // ATTNKIT_DISTRIBUTED_SHARD_DATA_H_
