#include "harness/grad_check.h"

#include <chrono>

#include "core/status_macros.h"
#include "harness/execute.h"
#include "oracle/compare_grad.h"

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
  PoisonGradients(grads);
  RunInfo info;
  const auto start = std::chrono::steady_clock::now();
  const absl::Status run = RunBackwardOnBackend(backend, p, data, grads, &info);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.kernel = info.kernel;
  if (!run.ok()) {
    r.status = run.code() == absl::StatusCode::kUnimplemented ? "unsupported" : "error";
    r.detail = std::string(run.message());
    return r;
  }
  r.comparison = CompareGradients(p, grads.args(), backward.ref);
  r.status = r.comparison.ok() ? "pass" : "fail";
  r.detail = r.comparison.first_failure;
  return r;
}

}  // namespace attnkit
