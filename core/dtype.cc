#include "core/dtype.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace attnkit {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kU8:
    case DType::kI8:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return 1;
  }
  return 0;
}

absl::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
    case DType::kU8:
      return "u8";
    case DType::kI8:
      return "i8";
    case DType::kF8E4M3:
      return "f8e4m3";
    case DType::kF8E5M2:
      return "f8e5m2";
  }
  return "?";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kU8, DType::kI8,
                  DType::kF8E4M3, DType::kF8E5M2}) {
    if (name == DTypeName(t)) return t;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "dtype '%s' is unknown; expected one of f32, f16, bf16, i32, u8, i8, f8e4m3, f8e5m2", name));
}

bool IsFloatStorage(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

bool IsKvStorage(DType t) { return IsFloatStorage(t) || IsScaledKv(t); }

double DTypeEpsilon(DType t) {
  switch (t) {
    case DType::kF16:
      return std::ldexp(1.0, -10);
    case DType::kBF16:
      return std::ldexp(1.0, -7);
    default:
      return std::ldexp(1.0, -23);
  }
}

double DTypeUlp(DType t, double x) {
  const int min_exponent = t == DType::kF16 ? -14 : -126;
  int exponent = min_exponent;
  if (x != 0) exponent = std::max(min_exponent, std::ilogb(x));
  return std::ldexp(DTypeEpsilon(t), exponent);
}

uint16_t F16FromF32(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // Inf or NaN; keep NaN quiet and non-zero.
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // Rounds to Inf.
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): value = abs_float * 2^24 in units of 2^-24.
    float a;
    std::memcpy(&a, &abs, sizeof(a));
    const float scaled = a * 16777216.0f;  // exact: a < 2^-14
    // nearbyint rounds to nearest even under the default rounding mode.
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  // Normal: rebias exponent from 127 to 15 and round the 13 dropped bits.
  const uint32_t rebased = abs - (112u << 23);
  const uint32_t lsb = (rebased >> 13) & 1u;
  const uint32_t rounded = rebased + 0x0fffu + lsb;
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

float F32FromF16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    std::memcpy(&bits, &v, sizeof(bits));
    bits |= sign;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

}  // namespace attnkit
