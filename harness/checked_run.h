// One backend run held to the oracle, with proof that the backend wrote what
// it was checked on: the step `attnkit check`, the conformance suites, the
// property tests and the fuzzers share.
//
// Outputs are poisoned with NaN before a run, so an element a backend never
// writes fails the oracle, except where the oracle itself wants NaN: a row
// that reads a NaN or Inf input (oracle/compare.h), or a gradient element
// that reaches one (oracle/compare_grad.h). There an unwritten row keeps its
// poison and passes. So a problem whose reference has such elements runs a
// second time with the outputs pre-filled with kUnwrittenSentinel, finite,
// and both runs must pass. Every other problem runs once, which is enough:
// all its expected values are finite, and a fully blocked row must be
// exactly 0 (o, and dq) with an LSE of -inf, which the NaN poison fails.
#ifndef ATTNKIT_HARNESS_CHECKED_RUN_H_
#define ATTNKIT_HARNESS_CHECKED_RUN_H_

#include "absl/status/status.h"
#include "core/backend.h"
#include "core/problem.h"
#include "harness/grad_data.h"
#include "harness/problem_data.h"
#include "oracle/compare.h"
#include "oracle/reference.h"
#include "oracle/reference_backward.h"

namespace attnkit {

// The finite fill of the second run: far outside any output of inputs in
// [-1, 1] and no 0 or -inf, so a row left holding it fails the NaN rule and
// the fully blocked row's rule alike. (16-bit outputs store it rounded:
// 1234 in f16, 1232 in bf16.)
inline constexpr float kUnwrittenSentinel = 1234.5f;

// True when the oracle wants NaN somewhere: a row of `ref` reads a NaN or
// Inf (its lse is NaN), or a gradient element of `ref` is not finite.
bool HasNaNRows(const ReferenceResult& ref);
bool HasNonFiniteGradients(const ReferenceGradients& ref);

struct CheckedRun {
  absl::Status run;           // the backend's error; `comparison` is empty then
  Comparison comparison;      // the first failing run's, else the first run's
  RunInfo info;               // the first run's
  double seconds = 0;         // the first run, wall clock (transfers included)
  bool sentinel_run = false;  // a second run, from kUnwrittenSentinel, was made
  bool ok() const { return run.ok() && comparison.ok(); }
};

// RunOnBackend from NaN-poisoned outputs, compared with `ref`; again from
// the sentinel when HasNaNRows(ref). data.o and data.lse hold the last run's
// outputs.
CheckedRun RunAndCompare(Backend* backend, const AttentionProblem& p, const ProblemData& data,
                         const ReferenceResult& ref);

// RunBackwardOnBackend (data.o and data.lse as the forward wrote them, and
// grads.d_o) from NaN-poisoned gradients, compared with `ref`
// (CompareGradients); again from the sentinel when HasNonFiniteGradients(ref).
CheckedRun RunBackwardAndCompare(Backend* backend, const AttentionProblem& p,
                                 const ProblemData& data, const GradData& grads,
                                 const ReferenceGradients& ref);

}  // namespace attnkit

#endif  // ATTNKIT_HARNESS_CHECKED_RUN_H_
