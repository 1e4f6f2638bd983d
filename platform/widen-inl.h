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

// dst[0, n) = the contiguous storage src[0, n) of `type` (f32, bf16 or f16)
// as f32, exactly; the tail past the last whole vector converts one element
// at a time (core/dtype.h), to the same bits.
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
