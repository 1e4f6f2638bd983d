// Comparing a backend's gradients (GradArgs) with the fp64 reference of
// oracle/reference_backward.h: the oracle of the backward conformance suite,
// the planted-bug test, the fuzzer and `check --grad`. The bound is derived
// from the problem and the reference's magnitudes, never from the backend.
#ifndef ATTNKIT_ORACLE_COMPARE_GRAD_H_
#define ATTNKIT_ORACLE_COMPARE_GRAD_H_

#include "core/backend.h"
#include "core/problem.h"
#include "oracle/compare.h"
#include "oracle/reference_backward.h"

namespace attnkit {

// Compares grads.dq, dk, dv (and dbias when given) with `ref`, element by
// element, against a bound of the form
//   c(n, d) u |term magnitudes| + half an ulp of the gradient's dtype
// (compare_grad.cc gives its derivation). Comparison::first_failure names the
// tensor and index ("dk[0,1,7,3] = ..."). A NaN or Inf where the reference is
// finite fails at once; rows with no visible key must give exactly 0 in dq.
Comparison CompareGradients(const AttentionProblem& p, const GradArgs& grads,
                            const ReferenceGradients& ref);

}  // namespace attnkit

#endif  // ATTNKIT_ORACLE_COMPARE_GRAD_H_
