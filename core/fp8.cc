#include "core/fp8.h"

#include <cmath>
#include <limits>

namespace attnkit {
namespace {

struct Layout {
  int exponent_bits, mantissa_bits, bias;
  uint8_t max_code;  // the largest finite magnitude's code (sign bit clear)
  uint8_t nan_code;
};

Layout LayoutOf(Fp8Format f) {
  // E4M3: S.1111.110 = 1.75 * 2^8 = 448; S.1111.111 is NaN.
  // E5M2: S.11110.11 = 1.75 * 2^15 = 57344; S.11111.00 infinity.
  return f == Fp8Format::kE4M3 ? Layout{4, 3, 7, 0x7E, 0x7F} : Layout{5, 2, 15, 0x7B, 0x7F};
}

}  // namespace

float Fp8Max(Fp8Format format) { return DecodeFp8(LayoutOf(format).max_code, format); }

uint8_t EncodeFp8(float x, Fp8Format format) {
  const Layout l = LayoutOf(format);
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | l.nan_code;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= Fp8Max(format)) return sign | l.max_code;  // saturates (infinity too)
  const int m = l.mantissa_bits;
  const int min_exponent = 1 - l.bias;  // of the smallest normal, 2^(1 - bias)
  if (a < std::ldexp(1.0, min_exponent)) {
    // Subnormal: a multiple n of 2^(min_exponent - m). n == 2^m is the
    // smallest normal, whose code is n as well.
    const double n = std::nearbyint(std::ldexp(a, m - min_exponent));  // ties to even
    return sign | static_cast<uint8_t>(n);
  }
  int e2 = 0;
  std::frexp(a, &e2);  // a = f 2^e2 with f in [0.5, 1)
  int exponent = e2 - 1;
  double n = std::nearbyint(std::ldexp(std::ldexp(a, -exponent) - 1.0, m));  // ties to even
  if (n == std::ldexp(1.0, m)) {  // rounded up to the next power of two
    n = 0;
    ++exponent;
  }
  const int code = ((exponent + l.bias) << m) | static_cast<int>(n);
  return sign | static_cast<uint8_t>(code > l.max_code ? l.max_code : code);
}

namespace {

struct DecodeTables {
  float e4m3[256], e5m2[256];
  DecodeTables() {
    for (int c = 0; c < 256; ++c) {
      e4m3[c] = Fp8CodeValue(static_cast<uint8_t>(c), /*e4m3=*/true);
      e5m2[c] = Fp8CodeValue(static_cast<uint8_t>(c), /*e4m3=*/false);
    }
  }
};

}  // namespace

float DecodeFp8(uint8_t code, Fp8Format format) {
  static const DecodeTables* const tables = new DecodeTables();  // a table lookup per value
  return format == Fp8Format::kE4M3 ? tables->e4m3[code] : tables->e5m2[code];
}

}  // namespace attnkit
