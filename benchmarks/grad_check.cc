#include "benchmarks/grad_check.h"

#include <chrono>

#include "core/compare_grad.h"
#include "core/execute.h"

namespace attnkit {

GradCheck CheckBackward(Backend* backend, const AttentionProblem& p, const ProblemData& data,
                        const GradData& grads, const ReferenceGradients& ref) {
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
  r.comparison = CompareGradients(p, grads.args(), ref);
  r.status = r.comparison.ok() ? "pass" : "fail";
  r.detail = r.comparison.first_failure;
  return r;
}

}  // namespace attnkit
