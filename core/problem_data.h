// Host tensors for one attention problem: inputs filled from a seed, outputs
// allocated once. Shared by `attnkit check`, the tests and the benchmarks.
#ifndef ATTNKIT_CORE_PROBLEM_DATA_H_
#define ATTNKIT_CORE_PROBLEM_DATA_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/problem.h"
#include "core/tensor.h"

namespace attnkit {

class ProblemData {
 public:
  // Allocates every tensor the problem needs, zero-filled, in p.layout; the
  // kv_lengths tensor holds p.kv_lengths.
  static absl::StatusOr<ProblemData> Allocate(const AttentionProblem& p);
  // Allocate, then q, k, v and bias uniform in [-1, 1] and about one in five
  // mask entries blocked, all drawn from `seed`. With p.poison_blocked, the
  // inputs the problem never reads are then set to NaN / +-Inf
  // (core/poison_blocked.h); with p.nonfinite_inputs, that many random
  // elements of Q, K, V and bias become NaN / +-Inf wherever they fall
  // (PoisonRandomInputs). ResourceExhausted, before allocating, when the
  // tensors exceed p.memory_budget_bytes.
  static absl::StatusOr<ProblemData> Random(const AttentionProblem& p, uint64_t seed);

  // Views of every tensor; optional ones are empty when the problem lacks them.
  AttentionArgs args() const;

  Tensor q, k, v, o, lse, kv_lengths, blocked_mask, bias;
};

// Fills a float-storage tensor with uniform values in [lo, hi], rounded to
// its dtype, drawing from a generator seeded with `seed`.
void FillUniform(const TensorView& t, uint64_t seed, float lo, float hi);

}  // namespace attnkit

#endif  // ATTNKIT_CORE_PROBLEM_DATA_H_
