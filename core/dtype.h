// Element types of attnkit tensors and the scalar conversions between the
// 16-bit storage types and float. Arithmetic always happens in fp32 or wider.
#ifndef ATTNKIT_CORE_DTYPE_H_
#define ATTNKIT_CORE_DTYPE_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/fp8.h"

namespace attnkit {

// kF32/kF16/kBF16 store Q, K, V, O; kI32 holds key lengths, offsets and
// block tables; kU8 holds the dense "blocked" mask (1 = blocked); kI8 stores
// quantized K and V (value = int8 * the row's f32 scale, core/quantize.h);
// kF8E4M3 and kF8E5M2 store K and V as OCP FP8 (core/fp8.h), also times a
// row scale (per (token, head), or one per tensor as a stride-0 view).
enum class DType { kF32, kF16, kBF16, kI32, kU8, kI8, kF8E4M3, kF8E5M2 };

size_t DTypeSize(DType t);
// "f32", "f16", "bf16", "i32", "u8", "i8", "f8e4m3", "f8e5m2"
absl::string_view DTypeName(DType t);
absl::StatusOr<DType> ParseDType(absl::string_view name);
bool IsFloatStorage(DType t);  // f32, f16 or bf16
// K and V storage: a float storage type, or i8, f8e4m3 or f8e5m2 with
// per-(token, head) scales.
bool IsKvStorage(DType t);
// K/V storage read times a row scale (k_scale, v_scale): i8 and the fp8s.
inline bool IsScaledKv(DType t) {
  return t == DType::kI8 || t == DType::kF8E4M3 || t == DType::kF8E5M2;
}
inline bool IsFp8(DType t) { return t == DType::kF8E4M3 || t == DType::kF8E5M2; }
inline Fp8Format Fp8FormatOf(DType t) {
  return t == DType::kF8E4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
}
// Machine epsilon of a float storage type (2^-23, 2^-10, 2^-7).
double DTypeEpsilon(DType t);
// One ulp of |x| in a float storage type: DTypeEpsilon scaled to x's binade,
// the subnormal spacing below the smallest normal (and for x = 0).
double DTypeUlp(DType t, double x);

// IEEE binary16 <-> float, round to nearest even; Inf and NaN are kept.
uint16_t F16FromF32(float f);
float F32FromF16(uint16_t h);

// bfloat16 is the top half of a float; rounding is to nearest even.
inline float F32FromBF16(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
inline uint16_t BF16FromF32(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  }
  const uint32_t lsb = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + lsb) >> 16);
}

// Reads element `i` of a float storage buffer as float (an i8 element as
// its integer value, an fp8 one as its decoded value: the caller applies the
// row's scale).
inline float LoadAsF32(const void* data, DType t, int64_t i) {
  switch (t) {
    case DType::kI8:
      return static_cast<float>(static_cast<const int8_t*>(data)[i]);
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return DecodeFp8(static_cast<const uint8_t*>(data)[i], Fp8FormatOf(t));
    case DType::kF16:
      return F32FromF16(static_cast<const uint16_t*>(data)[i]);
    case DType::kBF16:
      return F32FromBF16(static_cast<const uint16_t*>(data)[i]);
    default:
      return static_cast<const float*>(data)[i];
  }
}

// Writes `value` to element `i` of a float storage buffer, rounding to `t`
// (an i8 element gets the value rounded to the nearest integer, saturated
// to [-127, 127], an fp8 one encoded and saturated (core/fp8.h): the caller
// keeps the row's scale).
inline void StoreFromF32(void* data, DType t, int64_t i, float value) {
  switch (t) {
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      static_cast<uint8_t*>(data)[i] = EncodeFp8(value, Fp8FormatOf(t));
      break;
    case DType::kI8:
      static_cast<int8_t*>(data)[i] =
          static_cast<int8_t>(std::fmin(127.0f, std::fmax(-127.0f, std::nearbyint(value))));
      break;
    case DType::kF16:
      static_cast<uint16_t*>(data)[i] = F16FromF32(value);
      break;
    case DType::kBF16:
      static_cast<uint16_t*>(data)[i] = BF16FromF32(value);
      break;
    default:
      static_cast<float*>(data)[i] = value;
  }
}

}  // namespace attnkit

#endif  // ATTNKIT_CORE_DTYPE_H_
