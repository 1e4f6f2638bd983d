#include "core/quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnkit {

namespace {

// x rounded to the nearest integer, ties to even, for |x| <= 2^22: adding
// 1.5 * 2^23 leaves no fraction bits, so the sum is rounded as
// std::nearbyint rounds (the default rounding mode), and subtracting it
// again is exact. Inline, where std::nearbyint is a libm call on the
// baseline ISA (SSE4.1's roundss is not assumed). An int8 FAST decode
// quantizes each Q row per item: Zen 5, B8 H32/8 Tk4096 d128, one thread,
// query phase 0.101-0.109 -> 0.074-0.081 ms (phase_bench, alternating).
inline float RoundHalfEvenSmall(float x) {
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23
  return (x + kShift) - kShift;
}

// The largest |x[c]| of a row, or NaN where it holds a NaN or Inf: the
// scale rule both quantizers share.
float MaxAbsOrNaN(const float* x, int64_t n) {
  float max_abs = 0.0f;
  bool finite = true;
  for (int64_t c = 0; c < n; ++c) {
    const float a = std::fabs(x[c]);
    finite &= a <= std::numeric_limits<float>::max();  // false for NaN and Inf
    max_abs = std::max(max_abs, a);
  }
  return finite ? max_abs : std::numeric_limits<float>::quiet_NaN();
}

}  // namespace

float QuantizeRowI8(const float* x, int64_t n, int8_t* out) {
  const float max_abs = MaxAbsOrNaN(x, n);
  if (!(max_abs > 0.0f)) {  // an all-zero row (scale 0) or a non-finite one (NaN)
    std::fill(out, out + n, int8_t{0});
    return max_abs;
  }
  const float scale = max_abs / 127.0f;
  float inv = 127.0f / max_abs;
  // A row below about 3.7e-37, where 127 / max_abs overflows f32 (every
  // value then went to +-127, zeros too): its values and max_abs times
  // 2^64, exactly (a power of two, into the normal range), give the
  // quotient and the products the unscaled row has without the overflow.
  const bool tiny = !(inv <= std::numeric_limits<float>::max());
  constexpr float kTwoTo64 = 0x1p64f;
  if (tiny) inv = 127.0f / (max_abs * kTwoTo64);
  for (int64_t c = 0; c < n; ++c) {
    // |x[c] * inv| <= 127 (and a rounding): well within RoundHalfEvenSmall.
    // The product is rounded to f32 first (core/BUILD builds this file
    // without fused multiply-adds): as std::nearbyint(x[c] * inv) was.
    const float q = RoundHalfEvenSmall((tiny ? x[c] * kTwoTo64 : x[c]) * inv);
    out[c] = static_cast<int8_t>(std::min(127.0f, std::max(-127.0f, q)));
  }
  return scale;
}

float QuantizeRowFp8(const float* x, int64_t n, Fp8Format format, uint8_t* out) {
  const float max_abs = MaxAbsOrNaN(x, n);
  if (!(max_abs > 0.0f)) {  // as QuantizeRowI8
    std::fill(out, out + n, uint8_t{0});
    return max_abs;
  }
  const float scale = max_abs / Fp8Max(format);
  if (!(scale > 0.0f)) {
    // Below about 6e-43 (E4M3; 1e-40 E5M2) the scale underflows to 0, so
    // every value dequantizes to 0: stored as 0 (x / 0 made the row's
    // zeros NaN codes, which read back as NaN).
    std::fill(out, out + n, uint8_t{0});
    return 0.0f;
  }
  for (int64_t c = 0; c < n; ++c) out[c] = EncodeFp8(x[c] / scale, format);
  return scale;
}

}  // namespace attnkit
