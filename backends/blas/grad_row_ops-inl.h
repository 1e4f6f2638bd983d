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
#include "platform/exp_nonpositive-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace blas {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using attnkit::HWY_NAMESPACE::ExpNonPositive;

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
    // Zero where P is 0 (dP may be NaN there), NaN where P is (a NaN row):
    // Ne(NaN, 0) is false (an ordered compare), Eq(NaN, 0) too.
    hn::StoreU(hn::IfThenZeroElse(hn::Eq(vp, zero), ds), df, dp + j);
  }
  for (; j < n; ++j) dp[j] = p[j] == 0.0f ? 0.0f : p[j] * (dp[j] - row_d);
}

// sech^2(raw / cap) per lane; see SoftcapDerivativeRow.
template <class D, class V>
HWY_INLINE V SoftcapDerivative(D d, V raw, V inv_cap) {
  const V u = hn::Mul(raw, inv_cap);
  const V e = ExpNonPositive(d, hn::Mul(hn::Set(d, -2.0f), hn::Abs(u)));
  const V one_plus_e = hn::Add(hn::Set(d, 1.0f), e);
  const V sech2 = hn::Div(hn::Mul(hn::Set(d, 4.0f), e), hn::Mul(one_plus_e, one_plus_e));
  return hn::IfThenElse(hn::IsNaN(u), u, sech2);
}

void SoftcapDerivativeRowT(const float* HWY_RESTRICT raw, float* HWY_RESTRICT dcap, int64_t n,
                           float cap) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto inv = hn::Set(df, 1.0f / cap);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    hn::StoreU(SoftcapDerivative(df, hn::LoadU(df, raw + j), inv), df, dcap + j);
  }
  if (j < n) {  // the tail through one padded vector: the same operations
    HWY_ALIGN float tail[hn::MaxLanes(df)] = {};
    for (int64_t t = 0; t < n - j; ++t) tail[t] = raw[j + t];
    hn::Store(SoftcapDerivative(df, hn::Load(df, tail), inv), df, tail);
    for (int64_t t = 0; t < n - j; ++t) dcap[j + t] = tail[t];
  }
}

void SoftcapGradRowT(float* HWY_RESTRICT ds, const float* HWY_RESTRICT dcap, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    hn::StoreU(hn::Mul(hn::LoadU(df, ds + j), hn::LoadU(df, dcap + j)), df, ds + j);
  }
  for (; j < n; ++j) ds[j] *= dcap[j];
}

}  // namespace HWY_NAMESPACE
}  // namespace blas
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#endif  // ATTNKIT_BACKENDS_BLAS_GRAD_ROW_OPS_INL_H_
