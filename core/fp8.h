// The two 8-bit float formats of the OCP FP8 specification, as inference
// servers (vLLM, FlashInfer) store K/V caches in them (DType kF8E4M3 and
// kF8E5M2, core/dtype.h: codes times a row scale):
//   E4M3 ("e4m3fn"): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no
//     infinities, NaN is S.1111.111; largest finite 448, smallest
//     subnormal 2^-9.
//   E5M2: 1 sign, 5 exponent (bias 15), 2 mantissa bits, IEEE-like
//     (S.11111.00 is infinity, S.11111.xx NaN); largest finite 57344,
//     smallest subnormal 2^-16.
// Encoding rounds to nearest, ties to even, and saturates: a magnitude past
// the largest finite value (infinity included) becomes the largest finite
// value of its sign, as CUDA's __nv_cvt_float_to_fp8(.., __NV_SATFINITE, ..)
// does for the caches of those servers; NaN stays NaN. Decoding is exact.
#ifndef ATTNKIT_CORE_FP8_H_
#define ATTNKIT_CORE_FP8_H_

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace attnkit {

enum class Fp8Format { kE4M3, kE5M2 };

// The value of an fp8 code, exactly (every fp8 value is an f32 normal or a
// small multiple of a power of two): DecodeFp8's definition, inline for
// host and device so that the CUDA kernels decode with it too.
ATTNKIT_HOST_DEVICE inline float Fp8CodeValue(uint8_t code, bool e4m3) {
  const int mant_bits = e4m3 ? 3 : 2, exp_mask = e4m3 ? 0xF : 0x1F, bias = e4m3 ? 7 : 15;
  const int e = (code >> mant_bits) & exp_mask, m = code & ((1 << mant_bits) - 1);
  float mag;
  if (e4m3 && e == exp_mask && m == (1 << mant_bits) - 1) {
    mag = NAN;  // E4M3: S.1111.111 only
  } else if (!e4m3 && e == exp_mask) {
    mag = m == 0 ? INFINITY : NAN;  // E5M2: IEEE's infinity and NaNs
  } else if (e == 0) {              // subnormal: m * 2^(1 - bias - mant_bits)
    mag = ldexpf(static_cast<float>(m), 1 - bias - mant_bits);
  } else {  // (2^mant_bits + m) * 2^(e - bias - mant_bits)
    mag = ldexpf(static_cast<float>((1 << mant_bits) + m), e - bias - mant_bits);
  }
  return (code & 0x80) != 0 ? -mag : mag;
}

// The largest finite value: 448 (E4M3) or 57344 (E5M2).
float Fp8Max(Fp8Format format);

uint8_t EncodeFp8(float x, Fp8Format format);
// Fp8CodeValue through a table of the 256 codes of each format.
float DecodeFp8(uint8_t code, Fp8Format format);

}  // namespace attnkit

#endif  // ATTNKIT_CORE_FP8_H_
