// The backward pass as `check --grad` and `compare --grad` run it: one
// backend's gradients from its own forward outputs, checked against the fp64
// reference gradients (oracle/compare_grad.h).
#ifndef ATTNKIT_HARNESS_GRAD_CHECK_H_
#define ATTNKIT_HARNESS_GRAD_CHECK_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/problem.h"
#include "harness/grad_data.h"
#include "harness/problem_data.h"
#include "oracle/compare.h"
#include "oracle/reference_backward.h"

namespace attnkit {

// A training step's problem: dO (from the problem's seed; dBias asked when
// it has a bias) and the fp64 reference gradients, made once per problem and
// shared by every backend checked.
struct BackwardInputs {
  GradData grads;
  ReferenceGradients ref;
};
absl::StatusOr<BackwardInputs> MakeBackwardInputs(const AttentionProblem& p,
                                                  const ProblemData& data);

struct GradCheck {
  // "pass", "fail" (outside the oracle's bound), "error" (Backward returned
  // one) or "unsupported" (SupportsBackward refused; `detail` says why).
  std::string status;
  std::string detail;
  std::string kernel;
  double seconds = 0;  // the checked call, wall clock (transfers included)
  Comparison comparison;
};

// Backward on `backend` with data.o and data.lse as its forward wrote them
// (run the forward first) and grads.d_o; the gradients are poisoned first,
// so one the backend does not write fails.
GradCheck CheckBackward(Backend* backend, const AttentionProblem& p, const ProblemData& data,
                        const BackwardInputs& backward);

}  // namespace attnkit

#endif  // ATTNKIT_HARNESS_GRAD_CHECK_H_
