// Widening f16 and bf16 storage to f32 per Highway target, exact for every
// bit pattern; shared by the Highway and BLAS backends. Highway 1.0.3's PromoteTo(f32, f16) is
// exact where the CPU has F16C (AVX2 and up), but its emulation on the other targets (SSE4, SCALAR)
// turns Inf and NaN into finite values (found by row_ops_test's exhaustive
// check): those lanes are rebuilt from the bits here. Included once per
// target (toggle guard) by the kernels that read 16-bit K/V.
#if defined(ATTNKIT_CORE_WIDEN_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_CORE_WIDEN_INL_H_
#undef ATTNKIT_CORE_WIDEN_INL_H_
#else
#define ATTNKIT_CORE_WIDEN_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <limits>

#include "core/dtype.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {

// The Lanes(df) f16 values at p as f32 (unaligned load).
template <class DF>
HWY_INLINE hwy::HWY_NAMESPACE::Vec<DF> LoadF16AsF32(DF df, const hwy::float16_t* HWY_RESTRICT p) {
  namespace hn = hwy::HWY_NAMESPACE;
  const auto f = hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::float16_t, DF>(), p));
#if HWY_TARGET <= HWY_AVX2 && HWY_ARCH_X86
  return f;  // F16C: exact, Inf and NaN included
#else
  const hn::RebindToUnsigned<DF> du;
  const auto bits = hn::PromoteTo(
      du, hn::LoadU(hn::Rebind<uint16_t, DF>(), reinterpret_cast<const uint16_t*>(p)));
  const auto exp_mask = hn::Set(du, 0x7C00u);
  const auto special = hn::Eq(hn::And(bits, exp_mask), exp_mask);  // Inf or NaN
  const auto rebuilt = hn::Or(
      hn::Or(hn::ShiftLeft<16>(hn::And(bits, hn::Set(du, 0x8000u))), hn::Set(du, 0x7F800000u)),
      hn::ShiftLeft<13>(hn::And(bits, hn::Set(du, 0x03FFu))));
  return hn::IfThenElse(hn::RebindMask(df, special), hn::BitCast(df, rebuilt), f);
#endif
}

#if HWY_TARGET <= HWY_AVX2 && HWY_ARCH_X86
// The Lanes(df) E4M3 codes at p times 2^-8, through f16 as LoadFp8AsF32
// widens them before its multiply: exact for every code but the NaN ones
// (S.1111.111, read as +-480 * 2^-8), subnormal codes included, and never
// an f32 subnormal.
template <class DF>
HWY_INLINE hwy::HWY_NAMESPACE::Vec<DF> LoadE4M3TimesTwoToMinus8(DF df,
                                                                const uint8_t* HWY_RESTRICT p) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const hn::Rebind<int16_t, DF> d16;
  const auto wide =
      hn::PromoteTo(d16, hn::LoadU(hn::Rebind<int8_t, DF>(), reinterpret_cast<const int8_t*>(p)));
  const auto h = hn::And(hn::ShiftLeft<7>(wide), hn::Set(d16, static_cast<int16_t>(0xBF80)));
  return hn::PromoteTo(df, hn::BitCast(dh, h));  // F16C: exact
}
#endif

// The Lanes(df) fp8 codes at p (core/fp8.h; E4M3 when e4m3, else E5M2)
// decoded to f32, exactly, from the bits.
//  - E4M3 where the target converts f16 in hardware (x86 AVX2 and up: F16C):
//    the code sign-extended to 16 bits and shifted left by 7 puts the sign
//    at bit 15 (its copy at bit 14 masked off) and the 7-bit magnitude under
//    f16's exponent: the value times 2^-8 as an f16 (bias 15 - 7), subnormal
//    codes on f16 subnormals, which F16C widens exactly and at full speed;
//    times 2^8; the NaN codes (S.1111.111, +-480 so far) set to NaN.
//  - E4M3 elsewhere: the code shifted to the top byte and arithmetic-shifted
//    back puts the sign at bit 31 and the magnitude under f32's exponent
//    (the sign's copies in bits 27-30 masked off), times 2^120 (bias 127 -
//    7), NaN ORed in as all ones.
//  - E5M2 is the top byte of an f16 (exactly, Inf and NaN included):
//    widened as f16 where the target converts f16 in hardware, else from its
//    bits like E4M3 (2^112).
// Why not the f32 bits on x86: a subnormal code lands on an f32 subnormal,
// and Intel's multiplies and FMAs take a microcode assist on one (about 35
// ns a vector against 0.26 here, Xeon with AMX); a cache quantized with one
// scale per tensor (vLLM's default scale is 1) holds such codes in many
// rows. The other targets keep the f32 bits (SSE4 has no F16C).
template <class DF>
HWY_INLINE hwy::HWY_NAMESPACE::Vec<DF> LoadFp8AsF32(DF df, const uint8_t* HWY_RESTRICT p,
                                                    bool e4m3) {
  namespace hn = hwy::HWY_NAMESPACE;
#if HWY_TARGET <= HWY_AVX2 && HWY_ARCH_X86
  const hn::Rebind<hwy::float16_t, DF> dh;
  if (e4m3) {
    const auto value = hn::Mul(LoadE4M3TimesTwoToMinus8(df, p), hn::Set(df, 0x1p8f));
    const auto nan = hn::Eq(hn::Abs(value), hn::Set(df, 480.0f));  // S.1111.111 read as finite
    return hn::IfThenElse(nan, hn::Set(df, std::numeric_limits<float>::quiet_NaN()), value);
  }
  const hn::Rebind<uint16_t, DF> d16;
  const auto h = hn::ShiftLeft<8>(hn::PromoteTo(d16, hn::LoadU(hn::Rebind<uint8_t, DF>(), p)));
  return hn::PromoteTo(df, hn::BitCast(dh, h));  // F16C: exact
#else
  const hn::RebindToSigned<DF> di;
  const hn::RebindToUnsigned<DF> du;
  if (e4m3) {
    const auto bits = hn::PromoteTo(di, hn::LoadU(hn::Rebind<uint8_t, DF>(), p));
    const auto signed_mag = hn::And(hn::ShiftRight<4>(hn::ShiftLeft<24>(bits)),
                                    hn::Set(di, static_cast<int32_t>(0x87F00000u)));
    const auto value = hn::Mul(hn::BitCast(df, signed_mag), hn::Set(df, 0x1p120f));
    const auto nan =
        hn::VecFromMask(di, hn::Eq(hn::And(bits, hn::Set(di, 0x7F)), hn::Set(di, 0x7F)));
    return hn::BitCast(df, hn::Or(hn::BitCast(di, value), nan));
  }
  const auto bits = hn::PromoteTo(du, hn::LoadU(hn::Rebind<uint8_t, DF>(), p));
  const auto sign = hn::ShiftLeft<24>(hn::And(bits, hn::Set(du, 0x80u)));
  const auto mag = hn::And(bits, hn::Set(du, 0x7Fu));
  const auto smag = hn::BitCast(di, mag);  // 0..127: signed compares are safe
  auto value = hn::Mul(hn::BitCast(df, hn::ShiftLeft<21>(mag)), hn::Set(df, 0x1p112f));
  // S.11111.00 is infinity, S.11111.xx NaN.
  const auto special = hn::Gt(smag, hn::Set(di, 0x7B));
  const auto nan_bits = hn::IfThenElse(hn::RebindMask(du, hn::Eq(smag, hn::Set(di, 0x7C))),
                                       hn::Set(du, 0x7F800000u), hn::Set(du, 0x7FC00000u));
  value = hn::IfThenElse(hn::RebindMask(df, special), hn::BitCast(df, nan_bits), value);
  return hn::BitCast(df, hn::Or(hn::BitCast(du, value), sign));
#endif
}

// dst[0, n) = the contiguous storage src[0, n) of `type` (f32, bf16 or f16;
// i8 and fp8 as their unscaled values) as f32, exactly; the tail past the last whole vector
// converts one element at a time (core/dtype.h), to the same bits.
HWY_INLINE void WidenRowToF32(const void* HWY_RESTRICT src, DType type, size_t n,
                              float* HWY_RESTRICT dst) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  if (type == DType::kF32) {
    const auto* f = static_cast<const float*>(src);
    for (; i + N <= n; i += N) hn::StoreU(hn::LoadU(df, f + i), df, dst + i);
  } else if (type == DType::kI8) {  // the integer values; callers scale
    const hn::Rebind<int8_t, decltype(df)> d8;
    const hn::Rebind<int32_t, decltype(df)> d32;
    const auto* q = static_cast<const int8_t*>(src);
    for (; i + N <= n; i += N) {
      hn::StoreU(hn::ConvertTo(df, hn::PromoteTo(d32, hn::LoadU(d8, q + i))), df, dst + i);
    }
  } else if (IsFp8(type)) {  // the decoded codes; callers scale
    const auto* q = static_cast<const uint8_t*>(src);
    const bool e4m3 = type == DType::kF8E4M3;
    for (; i + N <= n; i += N) hn::StoreU(LoadFp8AsF32(df, q + i, e4m3), df, dst + i);
  } else if (type == DType::kBF16) {
    const hn::Rebind<hwy::bfloat16_t, decltype(df)> dbf;
    const auto* h = static_cast<const hwy::bfloat16_t*>(src);
    for (; i + N <= n; i += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dbf, h + i)), df, dst + i);
  } else {
    const auto* h = static_cast<const hwy::float16_t*>(src);
    for (; i + N <= n; i += N) hn::StoreU(LoadF16AsF32(df, h + i), df, dst + i);
  }
  for (; i < n; ++i) dst[i] = LoadAsF32(src, type, static_cast<int64_t>(i));
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#endif  // toggle guard
