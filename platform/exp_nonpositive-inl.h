// exp(x) for x <= 0, the argument of every softmax here (a score minus a
// running or row max), shared by the Highway and BLAS backends. Per target:
// included once per Highway target (toggle guard), like the kernels using it.
#if defined(ATTNKIT_CORE_EXP_NONPOSITIVE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_CORE_EXP_NONPOSITIVE_INL_H_
#undef ATTNKIT_CORE_EXP_NONPOSITIVE_INL_H_
#else
#define ATTNKIT_CORE_EXP_NONPOSITIVE_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {

// exp(x) for x <= 0 (a score minus its max): 2^q * e^r with
// q = round(x / ln 2), r = x - q ln 2 (|r| <= ln 2 / 2), e^r = 1 + r +
// r^2 P(r) with P a degree-4 fit of (e^r - 1 - r) / r^2 (relative error of
// e^r under 4e-9 with the f32 coefficients, largest at |r| = ln 2 / 2: a
// fifteenth of f32's half ulp; Highway's degree 5 is 1.1e-9, bought with a
// multiply-add more), and 2^q applied by adding q to
// e^r's exponent field (an integer add, where a multiply by 2^q took an FMA
// slot: results >= e^-87 stay normal, so the add is exact as the multiply
// was). Below -87, where 2^q would leave the normal range, and for -inf or
// NaN the result is 0 (hn::Exp also gives 0 for NaN; it is 0 only below
// -104). q comes from the float rounding of a shifted sum, not a
// float-to-int conversion with overflow fix-ups: about 1.8x hn::Exp's
// speed on AVX2, about the same accuracy (8.3e-8 relative on [-87, 0],
// 8.0e-8 with the degree-5 fit). The exp is most of a softmax, and bound
// by multiply-adds: 9 a value, 11 before (FAST d64 causal bf16 prefill, one
// thread, Zen 5, alternating runs: softmax phase 9.10-9.22 -> 8.34-8.46 ms).
template <class D, class V>
HWY_INLINE V ExpNonPositive(D d, V x) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::Rebind<int32_t, D> di;
  // t = x / ln 2 + 1.5 * 2^23 holds q = round(x / ln 2) in its low mantissa
  // bits (two's complement below the 2^22 bit), so t's bits shifted left by
  // 23 are q times the exponent field's unit, modulo 2^32.
  const V kShift = hn::Set(d, 12582912.0f);
  const V t = hn::MulAdd(x, hn::Set(d, 1.44269504088896341f), kShift);
  const V qf = hn::Sub(t, kShift);
  V r = hn::MulAdd(qf, hn::Set(d, -0.693145751953125f), x);
  r = hn::MulAdd(qf, hn::Set(d, -1.428606765330187045e-6f), r);
  // Horner form of the degree-4 (e^r - 1 - r) / r^2 fit on |r| <= ln 2 / 2.
  V poly = hn::Set(d, 0.001381461275741458f);
  poly = hn::MulAdd(poly, r, hn::Set(d, 0.008368710055947304f));
  poly = hn::MulAdd(poly, r, hn::Set(d, 0.04166838899254799f));
  poly = hn::MulAdd(poly, r, hn::Set(d, 0.1666652113199234f));
  poly = hn::MulAdd(poly, r, hn::Set(d, 0.4999999403953552f));
  const V er = hn::Add(hn::MulAdd(poly, hn::Mul(r, r), r), hn::Set(d, 1.0f));
  const V result =
      hn::BitCast(d, hn::Add(hn::BitCast(di, er), hn::ShiftLeft<23>(hn::BitCast(di, t))));
  return hn::IfThenElseZero(hn::Ge(x, hn::Set(d, -87.0f)), result);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#endif  // toggle guard
