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
// q = round(x / ln 2), r = x - q ln 2 (|r| <= ln 2 / 2, ln 2 in two parts),
// e^r = 1 + r P(r) with P a degree-4 fit of (e^r - 1) / r (relative error
// of e^r 9.3e-8 in exact arithmetic), and 2^q applied by adding q to e^r's
// exponent field (an integer add, where a multiply by 2^q took an FMA slot:
// results >= e^-87 stay normal, so the add is exact as the multiply was).
// Below -87, where 2^q would leave the normal range, and for -inf or NaN
// the result is 0 (hn::Exp also gives 0 for NaN; it is 0 only below -104).
// q comes from the float rounding of a shifted sum, not a float-to-int
// conversion with overflow fix-ups: about 1.8x hn::Exp's speed on AVX2.
// Relative error over every float in [-1, 0] and a sample of [-87, -1]:
// 1.6e-7 (2.7 u) with FMAs, 1.8e-7 (3.1 u) on targets without them (SSE4,
// SCALAR: a multiply and an add), within the 8 u the oracle grants exp
// (oracle/compare.h) and the 3e-7 TestExpNonPositive checks. The exp is
// most of a softmax, and bound by multiply-adds: 8 a value. The form
// 1 + r + r^2 P(r) with P of degree 4 (8.2e-8) took 9 and an add (d64
// causal prefills, one thread, Zen 5 AVX-512, alternating builds, three
// rounds: softmax phase 4.41-4.50 -> 3.97-4.03 ms in f32, 4.27-4.30 ->
// 3.86-3.88 in bf16 EXACT and 4.31-4.34 -> 3.86-3.91 in FAST); before
// that it had taken 11 (FAST: 9.10-9.22 -> 8.34-8.46 ms).
namespace exp_nonpositive {
// t = x / ln 2 + 1.5 * 2^23 holds q = round(x / ln 2) in its low mantissa
// bits (two's complement below the 2^22 bit), so t's bits shifted left by
// 23 are q times the exponent field's unit, modulo 2^32.
constexpr float kShift = 12582912.0f;
constexpr float kLog2E = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693145751953125f;  // ln 2 in two parts
constexpr float kLn2Lo = 1.428606765330187045e-6f;
// The degree-4 (e^r - 1) / r fit on |r| <= ln 2 / 2, highest power first.
constexpr float kP4 = 0.008290272206068039f, kP3 = 0.04189816117286682f, kP2 = 0.1666763871908188f,
                kP1 = 0.4999914765357971f, kP0 = 0.9999997019767761f;
constexpr float kLowest = -87.0f;  // below it the result is 0
}  // namespace exp_nonpositive

template <class D, class V>
HWY_INLINE V ExpNonPositive(D d, V x) {
  namespace hn = hwy::HWY_NAMESPACE;
  namespace c = exp_nonpositive;
  const hn::Rebind<int32_t, D> di;
  const V shift = hn::Set(d, c::kShift);
  const V t = hn::MulAdd(x, hn::Set(d, c::kLog2E), shift);
  const V qf = hn::Sub(t, shift);
  V r = hn::MulAdd(qf, hn::Set(d, -c::kLn2Hi), x);
  r = hn::MulAdd(qf, hn::Set(d, -c::kLn2Lo), r);
  V poly = hn::MulAdd(hn::Set(d, c::kP4), r, hn::Set(d, c::kP3));  // Horner
  poly = hn::MulAdd(poly, r, hn::Set(d, c::kP2));
  poly = hn::MulAdd(poly, r, hn::Set(d, c::kP1));
  poly = hn::MulAdd(poly, r, hn::Set(d, c::kP0));
  const V er = hn::MulAdd(poly, r, hn::Set(d, 1.0f));
  const V result =
      hn::BitCast(d, hn::Add(hn::BitCast(di, er), hn::ShiftLeft<23>(hn::BitCast(di, t))));
  return hn::IfThenElseZero(hn::Ge(x, hn::Set(d, c::kLowest)), result);
}

// ExpNonPositive of kN vectors in place, one step for all of them before
// the next: the same operations on each (the same results), with kN
// independent chains of multiply-adds side by side in the instruction
// stream, which the out-of-order core overlaps better than kN whole chains
// one after another (see OnlineSoftmaxUpdateWith). ExpNonPositive is not
// this with kN = 1: GCC 12 then needed over 6 MiB of stack (internal
// compiler error, segmentation fault, in the packed decode tiles of
// backends/highway/sdpa.cc, with the default 8 MiB only now and then).
template <int kN, class D, class V>
HWY_INLINE void ExpNonPositiveN(D d, V* HWY_RESTRICT x) {
  namespace hn = hwy::HWY_NAMESPACE;
  namespace c = exp_nonpositive;
  const hn::Rebind<int32_t, D> di;
  const V shift = hn::Set(d, c::kShift);
  V t[kN], r[kN], poly[kN];
  HWY_UNROLL(8)
  for (int i = 0; i < kN; ++i) t[i] = hn::MulAdd(x[i], hn::Set(d, c::kLog2E), shift);
  HWY_UNROLL(8)
  for (int i = 0; i < kN; ++i) {
    const V qf = hn::Sub(t[i], shift);
    r[i] = hn::MulAdd(qf, hn::Set(d, -c::kLn2Hi), x[i]);
    r[i] = hn::MulAdd(qf, hn::Set(d, -c::kLn2Lo), r[i]);
  }
  HWY_UNROLL(8)
  for (int i = 0; i < kN; ++i) poly[i] = hn::MulAdd(hn::Set(d, c::kP4), r[i], hn::Set(d, c::kP3));
  HWY_UNROLL(8)
  for (int i = 0; i < kN; ++i) poly[i] = hn::MulAdd(poly[i], r[i], hn::Set(d, c::kP2));
  HWY_UNROLL(8)
  for (int i = 0; i < kN; ++i) poly[i] = hn::MulAdd(poly[i], r[i], hn::Set(d, c::kP1));
  HWY_UNROLL(8)
  for (int i = 0; i < kN; ++i) poly[i] = hn::MulAdd(poly[i], r[i], hn::Set(d, c::kP0));
  HWY_UNROLL(8)
  for (int i = 0; i < kN; ++i) {
    const V er = hn::MulAdd(poly[i], r[i], hn::Set(d, 1.0f));
    const V result =
        hn::BitCast(d, hn::Add(hn::BitCast(di, er), hn::ShiftLeft<23>(hn::BitCast(di, t[i]))));
    x[i] = hn::IfThenElseZero(hn::Ge(x[i], hn::Set(d, c::kLowest)), result);
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#endif  // toggle guard
