// Per-target Highway implementations of row_ops.h. Included once per target
// by row_ops.cc through hwy/foreach_target.h.
#if defined(ATTNKIT_BACKENDS_BLAS_ROW_OPS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_BACKENDS_BLAS_ROW_OPS_INL_H_
#undef ATTNKIT_BACKENDS_BLAS_ROW_OPS_INL_H_
#else
#define ATTNKIT_BACKENDS_BLAS_ROW_OPS_INL_H_
#endif

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/dtype.h"
#include "core/fast_compute.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "platform/exp_nonpositive-inl.h"
#include "platform/widen-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace blas {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using attnkit::HWY_NAMESPACE::ExpNonPositive;
using attnkit::HWY_NAMESPACE::WidenRowToF32;

// Highway 1.0.3 has no LoadN/StoreN: a partial last vector goes through a
// stack copy, so the tail uses the same arithmetic as the body. The copy is
// read and written unaligned: sanitizer fake stacks align frames to 32 bytes
// only, less than one AVX-512 vector.
constexpr size_t kMaxFloatLanes = HWY_MAX_BYTES / sizeof(float);

// Applies fn(vector) -> vector to x[0, n) in place.
template <class Fn>
HWY_INLINE void TransformRow(float* HWY_RESTRICT x, int64_t n, Fn fn) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t j = 0;
  for (; j + N <= n; j += N) hn::StoreU(fn(hn::LoadU(df, x + j)), df, x + j);
  if (j < n) {
    float tail[kMaxFloatLanes] = {};
    const int64_t rest = n - j;
    for (int64_t t = 0; t < rest; ++t) tail[t] = x[j + t];
    hn::StoreU(fn(hn::LoadU(df, tail)), df, tail);
    for (int64_t t = 0; t < rest; ++t) x[j + t] = tail[t];
  }
}

HWY_INLINE void SoftcapRowImpl(float* HWY_RESTRICT s, int64_t n, float cap) {
  const hn::ScalableTag<float> df;
  const auto vcap = hn::Set(df, cap);
  const auto vinv = hn::Set(df, 1.0f / cap);
  const auto neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  TransformRow(s, n, [&](decltype(vcap) x) {
    return hn::IfThenElse(hn::Eq(x, neg_inf), x, hn::Mul(vcap, hn::Tanh(df, hn::Mul(x, vinv))));
  });
}

// max(s[0, n)), and with kFinite whether every entry is finite, in the same
// pass and order (RowMaxFinite's max is RowMax's, NaN entries included).
template <bool kFinite>
HWY_INLINE float RowMaxImpl(const float* HWY_RESTRICT s, int64_t n, bool* all_finite) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto kNegInf = hn::Set(df, -std::numeric_limits<float>::infinity());
  auto m0 = kNegInf, m1 = kNegInf;
  auto ok = hn::Eq(hn::Zero(df), hn::Zero(df));
  int64_t j = 0;
  for (; j + 2 * N <= n; j += 2 * N) {
    const auto x0 = hn::LoadU(df, s + j), x1 = hn::LoadU(df, s + j + N);
    if (kFinite) ok = hn::And(ok, hn::And(hn::IsFinite(x0), hn::IsFinite(x1)));
    m0 = hn::Max(m0, x0);
    m1 = hn::Max(m1, x1);
  }
  m0 = hn::Max(m0, m1);
  float m = hn::GetLane(hn::MaxOfLanes(df, m0));
  bool all = !kFinite || hn::AllTrue(df, ok);
  for (; j < n; ++j) {
    m = s[j] > m ? s[j] : m;
    if (kFinite) all = all && std::isfinite(s[j]);
  }
  if (kFinite) *all_finite = all;
  return m;
}

HWY_INLINE float ExpSubtractSumImpl(float* HWY_RESTRICT s, int64_t n, float max) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto vmax = hn::Set(df, max);
  // ExpNonPositive returns 0 below -87, so -inf - max gives exactly 0.
  auto sum0 = hn::Zero(df), sum1 = hn::Zero(df);
  int64_t j = 0;
  for (; j + 2 * N <= n; j += 2 * N) {
    const auto e0 = ExpNonPositive(df, hn::Sub(hn::LoadU(df, s + j), vmax));
    const auto e1 = ExpNonPositive(df, hn::Sub(hn::LoadU(df, s + j + N), vmax));
    hn::StoreU(e0, df, s + j);
    hn::StoreU(e1, df, s + j + N);
    sum0 = hn::Add(sum0, e0);
    sum1 = hn::Add(sum1, e1);
  }
  for (; j + N <= n; j += N) {
    const auto e = ExpNonPositive(df, hn::Sub(hn::LoadU(df, s + j), vmax));
    hn::StoreU(e, df, s + j);
    sum0 = hn::Add(sum0, e);
  }
  if (j < n) {
    // Unused tail lanes hold -inf, so they add exp(-inf) = 0 to the sum.
    float tail[kMaxFloatLanes];
    const int64_t rest = n - j;
    for (int64_t t = 0; t < N; ++t) {
      tail[t] = t < rest ? s[j + t] : -std::numeric_limits<float>::infinity();
    }
    const auto e = ExpNonPositive(df, hn::Sub(hn::LoadU(df, tail), vmax));
    hn::StoreU(e, df, tail);
    for (int64_t t = 0; t < rest; ++t) s[j + t] = tail[t];
    sum0 = hn::Add(sum0, e);
  }
  return hn::GetLane(hn::SumOfLanes(df, hn::Add(sum0, sum1)));
}

HWY_INLINE void ScaleRowImpl(float* HWY_RESTRICT x, int64_t n, float f) {
  const hn::ScalableTag<float> df;
  const auto vf = hn::Set(df, f);
  TransformRow(x, n, [&](decltype(vf) v) { return hn::Mul(v, vf); });
}

HWY_INLINE void AddAlibiRowImpl(float* HWY_RESTRICT x, int64_t n, float slope, float diag) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto neg = hn::Set(df, -slope);
  auto dist = hn::Sub(hn::Set(df, diag), hn::Iota(df, 0.0f));  // diag - j, exact below 2^24
  const auto step = hn::Set(df, static_cast<float>(N));
  int64_t j = 0;
  for (; j + N <= n; j += N, dist = hn::Sub(dist, step)) {
    hn::StoreU(hn::MulAdd(neg, hn::Abs(dist), hn::LoadU(df, x + j)), df, x + j);
  }
  for (; j < n; ++j) x[j] += -slope * std::fabs(diag - static_cast<float>(j));
}

HWY_INLINE bool AllFiniteImpl(const float* HWY_RESTRICT x, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto ok = hn::Eq(hn::Zero(df), hn::Zero(df));
  int64_t j = 0;
  for (; j + N <= n; j += N) ok = hn::And(ok, hn::IsFinite(hn::LoadU(df, x + j)));
  bool all = hn::AllTrue(df, ok);
  for (; j < n; ++j) all = all && std::isfinite(x[j]);
  return all;
}

// Whether no 16-bit value of x[0, n) has every bit of `exponent` set (a
// bf16 or f16 NaN or Inf).
HWY_INLINE bool AllFinite16Impl(const uint16_t* HWY_RESTRICT x, int64_t n, uint16_t exponent) {
  const hn::ScalableTag<uint16_t> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto e = hn::Set(d, exponent);
  auto hit = hn::Zero(d);
  int64_t j = 0;
  for (; j + N <= n; j += N)
    hit = hn::Or(hit, hn::VecFromMask(d, hn::Eq(hn::And(hn::LoadU(d, x + j), e), e)));
  bool all = hn::AllTrue(d, hn::Eq(hit, hn::Zero(d)));
  for (; j < n; ++j) all = all && (x[j] & exponent) != exponent;
  return all;
}

HWY_INLINE void DequantizeRowImpl(const int8_t* HWY_RESTRICT src, int64_t n, float scale,
                                  float* HWY_RESTRICT dst) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<int32_t, decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto vscale = hn::Set(df, scale);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto x = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, src + j)));  // exact
    hn::StoreU(hn::Mul(x, vscale), df, dst + j);
  }
  for (; j < n; ++j) dst[j] = static_cast<float>(src[j]) * scale;
}

HWY_INLINE void ScaleIntRowImpl(const int32_t* sums, int64_t n, float row_factor,
                                const float* HWY_RESTRICT col_factors, float* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto vrow = hn::Set(df, row_factor);
  int64_t j = 0;
  for (; j + N <= n; j += N) {  // load before store: out may be sums
    const auto x = hn::ConvertTo(df, hn::LoadU(di, sums + j));
    hn::StoreU(hn::Mul(hn::Mul(x, vrow), hn::LoadU(df, col_factors + j)), df, out + j);
  }
  for (; j < n; ++j) out[j] = static_cast<float>(sums[j]) * row_factor * col_factors[j];
}

// One block of row_ops.h QuantizeWeightsRowU8: n <= kFastWeightBlock
// weights. A partial last vector goes through a zero-padded stack copy and
// takes the body's arithmetic. Returns the back scale, or -1 (refused).
HWY_INLINE float QuantizeWeightsBlockU8(const float* HWY_RESTRICT p,
                                        const float* HWY_RESTRICT v_scale, int64_t n,
                                        uint8_t* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(df)> d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t body = n / N * N;
  float tail_p[kMaxFloatLanes] = {}, tail_s[kMaxFloatLanes] = {};
  for (int64_t t = body; t < n; ++t) {
    tail_p[t - body] = p[t];
    tail_s[t - body] = v_scale[t];
  }
  auto weights = [&](int64_t j) {  // w = p * v_scale at j, zero past n
    return j < body ? hn::Mul(hn::LoadU(df, p + j), hn::LoadU(df, v_scale + j))
                    : hn::Mul(hn::LoadU(df, tail_p), hn::LoadU(df, tail_s));
  };
  const auto zero = hn::Zero(df);
  const auto inf = hn::Set(df, std::numeric_limits<float>::infinity());
  auto mx = zero, bad = zero;  // bad: all bits set where a weight is NaN, Inf or < 0
  for (int64_t j = 0; j < n; j += N) {
    const auto x = weights(j);
    // !(x >= 0): NaN or negative (Highway's comparisons are ordered).
    bad = hn::Or(bad, hn::Or(hn::VecFromMask(df, hn::Not(hn::Ge(x, zero))),
                             hn::VecFromMask(df, hn::Eq(x, inf))));
    mx = hn::Max(mx, x);
  }
  if (!hn::AllTrue(di, hn::Eq(hn::BitCast(di, bad), hn::Zero(di)))) return -1.0f;
  const float m = hn::GetLane(hn::MaxOfLanes(df, mx));
  if (m != 0.0f && m < 1e-30f) return -1.0f;
  const float back = m / static_cast<float>(kFastWeightSteps);
  const auto inv = hn::Set(df, m == 0.0f ? 0.0f : 1.0f / back);  // all zeros stay 0
  // NearestInt rounds to nearest even; Highway 1.0.3's SCALAR target adds
  // 0.5 in f32 first, so a value a hair below a half can round up: an error
  // of half a step plus 2^-25 of one, inside the oracle's 1.01 slack.
  for (int64_t j = 0; j < n; j += N) {
    const auto q = hn::DemoteTo(d8, hn::NearestInt(hn::Mul(weights(j), inv)));
    if (j < body) {
      hn::StoreU(q, d8, out + j);
    } else {
      uint8_t tail[kMaxFloatLanes];
      hn::StoreU(q, d8, tail);
      for (int64_t t = 0; t < n - j; ++t) out[j + t] = tail[t];
    }
  }
  return back;
}

HWY_INLINE bool QuantizeWeightsRowU8Impl(const float* HWY_RESTRICT p,
                                         const float* HWY_RESTRICT v_scale, int64_t kn,
                                         uint8_t* out, int64_t block_stride, uint8_t* tail_out,
                                         float* HWY_RESTRICT back) {
  const int64_t full = kn / kFastWeightBlock;
  for (int64_t x = 0; x <= full; ++x) {
    const int64_t j0 = x * kFastWeightBlock;
    const int64_t n = x < full ? kFastWeightBlock : kn - j0;
    if (n == 0) break;
    back[x] = QuantizeWeightsBlockU8(p + j0, v_scale + j0, n,
                                     x < full ? out + x * block_stride : tail_out);
    if (back[x] < 0) return false;
  }
  return true;
}

HWY_INLINE void AccumulateIntRowImpl(const int32_t* HWY_RESTRICT sums, int64_t n, float f,
                                     float* HWY_RESTRICT o) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto vf = hn::Set(df, f);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    hn::StoreU(hn::MulAdd(hn::ConvertTo(df, hn::LoadU(di, sums + j)), vf, hn::LoadU(df, o + j)), df,
               o + j);
  }
  for (; j < n; ++j) o[j] += static_cast<float>(sums[j]) * f;
}

// bf16 bits of x[j] rounded to nearest even (BF16FromF32 without its NaN
// case) into out[j], which may overlap x from below. Each vector is loaded
// before the narrower store, which only reaches floats already loaded.
HWY_INLINE void NarrowRowBF16Impl(const float* x, int64_t n, uint16_t* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint16_t, decltype(df)> d16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto half = hn::Set(di, 0x7fff);
  const auto one = hn::Set(di, 1);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto bits = hn::BitCast(di, hn::LoadU(df, x + j));  // P >= 0: the sign bit is 0
    const auto lsb = hn::And(hn::ShiftRight<16>(bits), one);
    const auto rounded = hn::ShiftRight<16>(hn::Add(hn::Add(bits, half), lsb));
    hn::StoreU(hn::DemoteTo(d16, rounded), d16, out + j);
  }
  for (; j < n; ++j) out[j] = BF16FromF32(x[j]);
}

// out[j] = the 16-bit pattern of x[j] * f for j < n: to16 maps a vector of
// products to their patterns (in 32-bit lanes, below 2^16), scalar maps one
// product (the tail) with the same rounding.
template <class To16, class Scalar>
HWY_INLINE void ScaleNarrowRowWith(const float* x, int64_t n, float f, uint16_t* out,
                                   const To16& to16, const Scalar& scalar) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint16_t, decltype(df)> d16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto vf = hn::Set(df, f);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto h = to16(hn::Mul(hn::LoadU(df, x + j), vf));
    // Values below 2^16: the saturating demotion keeps them.
    hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, h)), d16, out + j);
  }
  for (; j < n; ++j) out[j] = scalar(x[j] * f);
}

// BF16FromF32 (core/dtype.h) per lane, in 32-bit lanes: to nearest even, a
// NaN keeping its top bits and made quiet.
template <class DU, class V>
HWY_INLINE hn::Vec<DU> BF16Bits(DU du, V y) {
  const auto bits = hn::BitCast(du, y);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  const auto rounded = hn::ShiftRight<16>(hn::Add(hn::Add(bits, hn::Set(du, 0x7fffu)), lsb));
  const auto nan = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du, 0x40u));
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(y)), nan, rounded);
}

// out[j] = bf16(x[j] * f) for j < n, to nearest even (core/dtype.h
// BF16FromF32 bit for bit: a NaN keeps its top bits and is made quiet): an
// output row in bf16, any sign, Inf or NaN.
HWY_INLINE void ScaleNarrowRowBF16Impl(const float* x, int64_t n, float f, uint16_t* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  auto to16 = [du](hn::Vec<decltype(df)> y) HWY_ATTR { return BF16Bits(du, y); };
  ScaleNarrowRowWith(x, n, f, out, to16, &BF16FromF32);
}

// out[j] = RoundGradOperand(x[j]) (core/fast_compute.h) bit for bit:
// BF16FromF32, but magnitudes below kFastGradFlush to a signed 0.
HWY_INLINE void RoundGradOperandRowImpl(const float* x, int64_t n, uint16_t* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const auto flush = hn::Set(df, kFastGradFlush);
  auto to16 = [du, flush](hn::Vec<decltype(df)> y) HWY_ATTR {
    // |y| < 2^-63 (false for NaN): the sign alone.
    const auto sign = hn::And(hn::ShiftRight<16>(hn::BitCast(du, y)), hn::Set(du, 0x8000u));
    return hn::IfThenElse(hn::RebindMask(du, hn::Lt(hn::Abs(y), flush)), sign, BF16Bits(du, y));
  };
  ScaleNarrowRowWith(x, n, 1.0f, out, to16, &RoundGradOperand);
}

// NarrowExactBF16Row: the top halves, and whether no value is a nonzero
// below 2^-63.
HWY_INLINE bool NarrowExactBF16RowImpl(const float* HWY_RESTRICT x, int64_t n,
                                       uint16_t* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint16_t, decltype(df)> d16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto abs_mask = hn::Set(di, 0x7fffffff);
  const auto limit = hn::Set(di, (127 - 63) << 23);
  const auto zero = hn::Zero(di);
  auto tiny = zero;  // the OR of the magnitudes below 2^-63: nonzero iff one is
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto bits = hn::BitCast(di, hn::LoadU(df, x + j));
    const auto magnitude = hn::And(bits, abs_mask);
    tiny = hn::Or(tiny, hn::IfThenElseZero(hn::Lt(magnitude, limit), magnitude));
    const auto high = hn::BitCast(di, hn::ShiftRight<16>(hn::BitCast(du, bits)));
    hn::StoreU(hn::DemoteTo(d16, high), d16, out + j);  // < 2^16: kept
  }
  bool any_tiny = !hn::AllFalse(di, hn::Ne(tiny, zero));
  for (; j < n; ++j) {
    uint32_t bits;
    std::memcpy(&bits, &x[j], sizeof(bits));
    const uint32_t magnitude = bits & 0x7fffffffu;
    any_tiny |= magnitude != 0 && magnitude < (uint32_t{127 - 63} << 23);
    out[j] = static_cast<uint16_t>(bits >> 16);
  }
  return !any_tiny;
}

// out[j] = f16(x[j] * f) for j < n, core/dtype.cc F16FromF32 bit for bit:
// normal results rebiased and rounded to nearest even on the 13 dropped
// bits, subnormal ones as round-to-even(|y| * 2^24), overflow to Inf, and
// every NaN as the quiet NaN 0x7e00 with the sign kept.
HWY_INLINE void ScaleNarrowRowF16Impl(const float* x, int64_t n, float f, uint16_t* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::RebindToSigned<decltype(df)> di;
  auto to16 = [df, du, di](hn::Vec<decltype(df)> y) HWY_ATTR {
    const auto bits = hn::BitCast(du, y);
    const auto sign = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 0x8000u));
    const auto abs = hn::And(bits, hn::Set(du, 0x7fffffffu));
    // Normal: rebias the exponent from 127 to 15, round the 13 dropped bits.
    const auto rebased = hn::Sub(abs, hn::Set(du, 112u << 23));
    const auto lsb = hn::And(hn::ShiftRight<13>(rebased), hn::Set(du, 1u));
    auto h = hn::ShiftRight<13>(hn::Add(hn::Add(rebased, hn::Set(du, 0x0fffu)), lsb));
    // Subnormal or zero (|y| < 2^-14): |y| * 2^24 is exact, rounded to even.
    const auto scaled = hn::Round(hn::Mul(hn::BitCast(df, abs), hn::Set(df, 16777216.0f)));
    const auto sub = hn::BitCast(du, hn::ConvertTo(di, scaled));
    const auto as_int = [&](uint32_t v) { return hn::BitCast(di, hn::Set(du, v)); };
    const auto absi = hn::BitCast(di, abs);  // < 2^31: signed compares are safe
    h = hn::IfThenElse(hn::RebindMask(du, hn::Lt(absi, as_int(0x38800000u))), sub, h);
    h = hn::IfThenElse(hn::RebindMask(du, hn::Gt(absi, as_int(0x477fefffu))),  // >= 0x477ff000
                       hn::Set(du, 0x7c00u), h);
    h = hn::IfThenElse(hn::RebindMask(du, hn::Gt(absi, as_int(0x7f800000u))), hn::Set(du, 0x7e00u),
                       h);
    return hn::Or(h, sign);
  };
  ScaleNarrowRowWith(x, n, f, out, to16, &F16FromF32);
}

// Wrappers with the exported signatures (HWY_EXPORT needs plain functions).
void SoftcapRowT(float* s, int64_t n, float cap) { SoftcapRowImpl(s, n, cap); }
float RowMaxT(const float* s, int64_t n) { return RowMaxImpl<false>(s, n, nullptr); }
float RowMaxFiniteT(const float* s, int64_t n, bool* all_finite) {
  return RowMaxImpl<true>(s, n, all_finite);
}
float ExpSubtractSumT(float* s, int64_t n, float max) { return ExpSubtractSumImpl(s, n, max); }
void ScaleRowT(float* x, int64_t n, float f) { ScaleRowImpl(x, n, f); }
void AddAlibiRowT(float* x, int64_t n, float slope, float diag) {
  AddAlibiRowImpl(x, n, slope, diag);
}
bool AllFiniteT(const float* x, int64_t n) { return AllFiniteImpl(x, n); }
bool AllFinite16T(const uint16_t* x, int64_t n, uint16_t exponent) {
  return AllFinite16Impl(x, n, exponent);
}
void WidenRowT(const void* src, DType type, int64_t n, float* dst) {
  WidenRowToF32(src, type, static_cast<size_t>(n), dst);
}
void DequantizeRowT(const int8_t* src, int64_t n, float scale, float* dst) {
  DequantizeRowImpl(src, n, scale, dst);
}
void ScaleIntRowT(const int32_t* sums, int64_t n, float row_factor, const float* col_factors,
                  float* out) {
  ScaleIntRowImpl(sums, n, row_factor, col_factors, out);
}
bool QuantizeWeightsRowU8T(const float* p, const float* v_scale, int64_t kn, uint8_t* out,
                           int64_t block_stride, uint8_t* tail_out, float* back) {
  return QuantizeWeightsRowU8Impl(p, v_scale, kn, out, block_stride, tail_out, back);
}
void AccumulateIntRowT(const int32_t* sums, int64_t n, float f, float* o) {
  AccumulateIntRowImpl(sums, n, f, o);
}
void NarrowRowBF16T(const float* x, int64_t n, uint16_t* out) { NarrowRowBF16Impl(x, n, out); }
void RoundGradOperandRowT(const float* x, int64_t n, uint16_t* out) {
  RoundGradOperandRowImpl(x, n, out);
}
bool NarrowExactBF16RowT(const float* x, int64_t n, uint16_t* out) {
  return NarrowExactBF16RowImpl(x, n, out);
}
void ScaleNarrowRowBF16T(const float* x, int64_t n, float f, uint16_t* out) {
  ScaleNarrowRowBF16Impl(x, n, f, out);
}
void ScaleNarrowRowF16T(const float* x, int64_t n, float f, uint16_t* out) {
  ScaleNarrowRowF16Impl(x, n, f, out);
}
int64_t TargetT() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace blas
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#endif  // ATTNKIT_BACKENDS_BLAS_ROW_OPS_INL_H_
