// Host tensors for one backward call (core/backend.h GradArgs), beside a
// problem's ProblemData: dO drawn from a seed, dQ/dK/dV (and dBias) allocated
// in the shapes, layout and dtypes of Q/K/V. Shared by the tests, `check` and
// the benchmarks.
#ifndef ATTNKIT_HARNESS_GRAD_DATA_H_
#define ATTNKIT_HARNESS_GRAD_DATA_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/problem.h"
#include "core/tensor.h"

namespace attnkit {

class GradData {
 public:
  // d_o uniform in [-1, 1] (rounded to the problem's dtype) from `seed`;
  // dq, dk, dv (and dbias when `with_dbias`, which needs additive_bias)
  // zero-filled, and dsinks with sinks. InvalidArgument for a problem without a backward pass
  // (paged, or without return_lse); ResourceExhausted past the budget.
  static absl::StatusOr<GradData> Random(const AttentionProblem& p, uint64_t seed, bool with_dbias);

  GradArgs args() const;

  Tensor d_o, dq, dk, dv, dbias;
  Tensor dsinks;  // f32 [H] with sinks (dL/dsinks)
};

// The bytes GradData::Random allocates for `p` (dO, dQ, dK, dV and, with
// dbias, [B, H, Tq, Tk] f32), with overflow checks.
absl::StatusOr<int64_t> GradBytes(const AttentionProblem& p, bool with_dbias);

}  // namespace attnkit

#endif  // ATTNKIT_HARNESS_GRAD_DATA_H_
