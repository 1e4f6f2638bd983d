#include "harness/grad_check.h"

#include "core/status_macros.h"
#include "harness/checked_run.h"

namespace attnkit {

absl::StatusOr<BackwardInputs> MakeBackwardInputs(const AttentionProblem& p,
                                                  const ProblemData& data) {
  BackwardInputs in;
  ATTNKIT_ASSIGN_OR_RETURN(in.grads, GradData::Random(p, p.seed, p.additive_bias));
  in.ref = ComputeReferenceBackward(p, data.args(), in.grads.d_o.view());
  return in;
}

GradCheck CheckBackward(Backend* backend, const AttentionProblem& p, const ProblemData& data,
                        const BackwardInputs& backward) {
  const GradData& grads = backward.grads;
  GradCheck r;
  const absl::Status supported = backend->SupportsBackward(p);
  if (!supported.ok()) {
    r.status = "unsupported";
    r.detail = std::string(supported.message());
    return r;
  }
  // Twice where a gradient must come out NaN (harness/checked_run.h).
  const CheckedRun run = RunBackwardAndCompare(backend, p, data, grads, backward.ref);
  r.seconds = run.seconds;
  r.kernel = run.info.kernel;
  if (!run.run.ok()) {
    r.status = run.run.code() == absl::StatusCode::kUnimplemented ? "unsupported" : "error";
    r.detail = std::string(run.run.message());
    return r;
  }
  r.comparison = run.comparison;
  r.status = r.comparison.ok() ? "pass" : "fail";
  r.detail = r.comparison.first_failure;
  return r;
}

}  // namespace attnkit
