// Per-target Highway implementations of grad_row_ops.h. Included once per
// target by grad_row_ops.cc through hwy/foreach_target.h.
#if defined(ATTNKIT_BACKENDS_BLAS_GRAD_ROW_OPS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_BACKENDS_BLAS_GRAD_ROW_OPS_INL_H_
#undef ATTNKIT_BACKENDS_BLAS_GRAD_ROW_OPS_INL_H_
#else
#define ATTNKIT_BACKENDS_BLAS_GRAD_ROW_OPS_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace blas {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The tail of a row (n % lanes elements) runs in scalar code with the same
// operations in the same order.
void SoftmaxGradRowT(const float* HWY_RESTRICT p, float* HWY_RESTRICT dp, int64_t n, float row_d) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto vd = hn::Set(df, row_d);
  const auto zero = hn::Zero(df);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto vp = hn::LoadU(df, p + j);
    const auto ds = hn::Mul(vp, hn::Sub(hn::LoadU(df, dp + j), vd));
    hn::StoreU(hn::IfThenElseZero(hn::Ne(vp, zero), ds), df, dp + j);
  }
  for (; j < n; ++j) dp[j] = p[j] == 0.0f ? 0.0f : p[j] * (dp[j] - row_d);
}

void SoftcapGradRowT(float* HWY_RESTRICT ds, const float* HWY_RESTRICT capped, int64_t n,
                     float cap) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const float inv = 1.0f / cap;
  const auto vinv = hn::Set(df, inv);
  const auto one = hn::Set(df, 1.0f);
  const auto minus_one = hn::Set(df, -1.0f);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto t = hn::Min(hn::Max(hn::Mul(hn::LoadU(df, capped + j), vinv), minus_one), one);
    const auto dtanh = hn::Sub(one, hn::Mul(t, t));
    hn::StoreU(hn::Mul(hn::LoadU(df, ds + j), dtanh), df, ds + j);
  }
  for (; j < n; ++j) {
    float t = capped[j] * inv;
    t = t < -1.0f ? -1.0f : (t > 1.0f ? 1.0f : t);
    ds[j] *= 1.0f - t * t;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace blas
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#endif  // ATTNKIT_BACKENDS_BLAS_GRAD_ROW_OPS_INL_H_
