#include "harness/checked_run.h"

#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"
#include "harness/execute.h"
#include "oracle/compare_grad.h"

namespace attnkit {
namespace {

// The two runs of checked_run.h: `fill` pre-fills the outputs, `run` runs the
// backend, `compare` holds its outputs to the oracle.
CheckedRun RunTwice(bool second_run, const std::function<void(float)>& fill,
                    const std::function<absl::Status(RunInfo*)>& run,
                    const std::function<Comparison()>& compare) {
  CheckedRun r;
  fill(std::numeric_limits<float>::quiet_NaN());
  const auto start = std::chrono::steady_clock::now();
  r.run = run(&r.info);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!r.run.ok()) return r;
  r.comparison = compare();
  if (!r.comparison.ok() || !second_run) return r;
  r.sentinel_run = true;
  fill(kUnwrittenSentinel);
  RunInfo again;
  r.run = run(&again);
  if (!r.run.ok()) return r;
  Comparison sentinel = compare();
  if (sentinel.ok()) return r;
  sentinel.first_failure =
      absl::StrFormat("with outputs pre-filled with %g (an element left unwritten keeps it): %s",
                      kUnwrittenSentinel, sentinel.first_failure);
  r.comparison = sentinel;
  return r;
}

bool AnyNonFinite(const std::vector<double>& v) {
  for (double x : v) {
    if (!std::isfinite(x)) return true;
  }
  return false;
}

}  // namespace

bool HasNaNRows(const ReferenceResult& ref) {
  for (double lse : ref.lse) {
    if (std::isnan(lse)) return true;
  }
  return false;
}

bool HasNonFiniteGradients(const ReferenceGradients& ref) {
  return AnyNonFinite(ref.dq) || AnyNonFinite(ref.dk) || AnyNonFinite(ref.dv) ||
         AnyNonFinite(ref.dbias) || AnyNonFinite(ref.dsinks);
}

CheckedRun RunAndCompare(Backend* backend, const AttentionProblem& p, const ProblemData& data,
                         const ReferenceResult& ref) {
  return RunTwice(
      HasNaNRows(ref), [&](float value) { FillOutputs(data, value); },
      [&](RunInfo* info) { return RunOnBackend(backend, p, data, info); },
      [&] { return CompareToReference(p, data.args(), ref); });
}

CheckedRun RunBackwardAndCompare(Backend* backend, const AttentionProblem& p,
                                 const ProblemData& data, const GradData& grads,
                                 const ReferenceGradients& ref) {
  return RunTwice(
      HasNonFiniteGradients(ref), [&](float value) { FillGradients(grads, value); },
      [&](RunInfo* info) { return RunBackwardOnBackend(backend, p, data, grads, info); },
      [&] { return CompareGradients(p, grads.args(), ref); });
}

}  // namespace attnkit
