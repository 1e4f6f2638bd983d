// Widening IEEE binary16 to f32 per Highway target, exact for every bit
// pattern. Highway 1.0.3's PromoteTo(f32, f16) is exact where the CPU has
// F16C (AVX2 and up), but its emulation on the other targets (SSE4, SCALAR)
// turns Inf and NaN into finite values (found by row_ops_test's exhaustive
// check): those lanes are rebuilt from the bits here. Included once per
// target (toggle guard) by the kernels that read f16 K/V.
#if defined(ATTNKIT_CORE_WIDEN_F16_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_CORE_WIDEN_F16_INL_H_
#undef ATTNKIT_CORE_WIDEN_F16_INL_H_
#else
#define ATTNKIT_CORE_WIDEN_F16_INL_H_
#endif

#include <cstdint>

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

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#endif  // toggle guard
