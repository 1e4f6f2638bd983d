// Vectorised per-row steps of the backward pass (backward.cc) between its
// GEMMs: the softmax gradient dS = P (dP - D) and the soft-cap chain rule.
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

// ds[j] *= 1 - (capped[j] / cap)^2 over [0, n): d(cap tanh(x / cap)) / dx
// from the capped score. capped[j] = -inf (a blocked pair, ds[j] = 0) clamps
// to tanh = -1 and gives 0, not NaN. cap > 0.
void SoftcapGradRow(float* ds, const float* capped, int64_t n, float cap);

}  // namespace blas
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_BLAS_GRAD_ROW_OPS_H_
