// Host tensors for one attention problem: inputs filled from a seed, outputs
// allocated once. Shared by `attnkit check`, the tests and the benchmarks.
#ifndef ATTNKIT_HARNESS_PROBLEM_DATA_H_
#define ATTNKIT_HARNESS_PROBLEM_DATA_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/problem.h"
#include "core/tensor.h"  // FillUniform

namespace attnkit {

class ProblemData {
 public:
  // Allocates every tensor the problem needs, zero-filled, in p.layout (a
  // ragged batch's packed tensors token-major, a paged pool as
  // core/backend.h shapes it); kv_lengths and cu_seqlens hold the problem's
  // lengths, and the block table gives sequence b pages b * max_pages + j
  // (modulo num_pages).
  static absl::StatusOr<ProblemData> Allocate(const AttentionProblem& p);
  // Allocate, then q, k, v and bias uniform in [-1, 1] and about one in five
  // mask entries blocked, all drawn from `seed`. With p.poison_blocked, the
  // inputs the problem never reads are then set to NaN / +-Inf
  // (harness/poison_blocked.h); with p.nonfinite_inputs, that many random
  // elements of Q, K, V and bias become NaN / +-Inf wherever they fall
  // (PoisonRandomInputs). int8 K/V rows are drawn in f32 and quantized
  // (core/quantize.h). A paged problem's block table places each sequence's
  // pages at shuffled pool positions (with too few pages for all, later
  // sequences share the first pages of sequence 0, a common prefix); unused
  // entries are -1, and every pool row no sequence reads holds NaN (its
  // int8 scale NaN), so a kernel that reads a wrong page cannot pass.
  // ResourceExhausted, before allocating, when the tensors exceed
  // p.memory_budget_bytes.
  static absl::StatusOr<ProblemData> Random(const AttentionProblem& p, uint64_t seed);

  // Views of every tensor; optional ones are empty when the problem lacks them.
  AttentionArgs args() const;

  Tensor q, k, v, o, lse, kv_lengths, blocked_mask, bias;
  Tensor sinks;         // f32 [H], problem.sinks
  Tensor alibi_slopes;  // f32 [H], problem.alibi
  Tensor k_scale, v_scale, block_table, cu_seqlens_q, cu_seqlens_k;
};

}  // namespace attnkit

#endif  // ATTNKIT_HARNESS_PROBLEM_DATA_H_
