// Vectorised per-row steps of the backward pass (backward.cc) between its
// GEMMs: the softmax gradient dS = P (dP - D) and the soft-cap chain rule.
// (FAST's rounding of P and dX to bf16 is with the other narrowings, in
// row_ops.h.)
// Plain C++ interface; the Highway code lives in grad_row_ops-inl.h and is
// dispatched in grad_row_ops.cc.
#ifndef ATTNKIT_BACKENDS_BLAS_GRAD_ROW_OPS_H_
#define ATTNKIT_BACKENDS_BLAS_GRAD_ROW_OPS_H_

#include <cstdint>

namespace attnkit {
namespace blas {

// dp[j] = p[j] (dp[j] - row_d) over [0, n), and exactly 0 where p[j] == 0 (a
// blocked pair), whatever dp[j] holds there (a NaN from a V row no query of
// the row sees must not leak through 0 * NaN).
void SoftmaxGradRow(const float* p, float* dp, int64_t n, float row_d);

// dcap[j] = d(cap tanh(x / cap)) / dx at x = raw[j], the score before
// capping, over [0, n): sech^2(x / cap) as 4 e / (1 + e)^2 with
// e = exp(-2 |x| / cap). Not 1 - tanh^2 from the capped score, which
// cancels once tanh rounds to within a few ulps of +-1 (issue 33); this
// errs by a few ulps for every x. raw -inf (a blocked pair) gives 0, NaN
// stays NaN. cap > 0.
void SoftcapDerivativeRow(const float* raw, float* dcap, int64_t n, float cap);

// ds[j] *= dcap[j] over [0, n): the soft-cap's chain rule.
void SoftcapGradRow(float* ds, const float* dcap, int64_t n);

}  // namespace blas
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_BLAS_GRAD_ROW_OPS_H_
