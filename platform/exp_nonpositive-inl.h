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
// q = round(x / ln 2), r = x - q ln 2, e^r by Highway's float polynomial.
// Below -87, where 2^q would leave the normal range, and for -inf or NaN the
// result is 0 (hn::Exp also gives 0 for NaN; it is 0 only below -104).
// q comes from the float rounding of a shifted sum, not a float-to-int
// conversion with overflow fix-ups: about 1.8x hn::Exp's speed on AVX2, same
// accuracy (8e-8 relative on [-87, 0]). The exp is most of a softmax.
template <class D, class V>
HWY_INLINE V ExpNonPositive(D d, V x) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::Rebind<int32_t, D> di;
  // t = x / ln 2 + 1.5 * 2^23 + 127 holds round(x / ln 2) + 127 in its low
  // mantissa bits, ready to shift into an exponent field.
  const V kShift = hn::Set(d, 12583039.0f);
  const V t = hn::MulAdd(x, hn::Set(d, 1.44269504088896341f), kShift);
  const V qf = hn::Sub(t, kShift);
  V r = hn::MulAdd(qf, hn::Set(d, -0.693145751953125f), x);
  r = hn::MulAdd(qf, hn::Set(d, -1.428606765330187045e-6f), r);
  // Horner form of Highway's degree-5 (e^r - 1 - r) / r^2 polynomial.
  V poly = hn::Set(d, 0.000198527617612853646278381f);
  poly = hn::MulAdd(poly, r, hn::Set(d, 0.00139304355252534151077271f));
  poly = hn::MulAdd(poly, r, hn::Set(d, 0.00833336077630519866943359f));
  poly = hn::MulAdd(poly, r, hn::Set(d, 0.0416664853692054748535156f));
  poly = hn::MulAdd(poly, r, hn::Set(d, 0.166666671633720397949219f));
  poly = hn::MulAdd(poly, r, hn::Set(d, 0.5f));
  const V er = hn::Add(hn::MulAdd(poly, hn::Mul(r, r), r), hn::Set(d, 1.0f));
  const V scale = hn::BitCast(d, hn::ShiftLeft<23>(hn::BitCast(di, t)));
  return hn::IfThenElseZero(hn::Ge(x, hn::Set(d, -87.0f)), hn::Mul(er, scale));
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#endif  // toggle guard
