#include "core/fp8.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "gtest/gtest.h"

namespace attnkit {
namespace {

constexpr Fp8Format kFormats[] = {Fp8Format::kE4M3, Fp8Format::kE5M2};

TEST(Fp8Test, KnownValues) {
  EXPECT_EQ(Fp8Max(Fp8Format::kE4M3), 448.0f);
  EXPECT_EQ(Fp8Max(Fp8Format::kE5M2), 57344.0f);
  EXPECT_EQ(DecodeFp8(0x01, Fp8Format::kE4M3), std::ldexp(1.0f, -9));   // smallest subnormal
  EXPECT_EQ(DecodeFp8(0x08, Fp8Format::kE4M3), std::ldexp(1.0f, -6));   // smallest normal
  EXPECT_EQ(DecodeFp8(0x01, Fp8Format::kE5M2), std::ldexp(1.0f, -16));  // smallest subnormal
  EXPECT_EQ(DecodeFp8(0x38, Fp8Format::kE4M3), 1.0f);
  EXPECT_EQ(DecodeFp8(0x3C, Fp8Format::kE5M2), 1.0f);
  EXPECT_EQ(DecodeFp8(0xC0, Fp8Format::kE4M3), -2.0f);
  EXPECT_TRUE(std::isnan(DecodeFp8(0x7F, Fp8Format::kE4M3)));
  EXPECT_TRUE(std::isnan(DecodeFp8(0xFF, Fp8Format::kE4M3)));
  EXPECT_EQ(DecodeFp8(0x7C, Fp8Format::kE5M2), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(DecodeFp8(0x7D, Fp8Format::kE5M2)));
  EXPECT_EQ(EncodeFp8(-0.0f, Fp8Format::kE4M3), 0x80);
}

// Every finite code decodes and encodes back to itself (-0 included).
TEST(Fp8Test, EveryFiniteCodeRoundTrips) {
  for (Fp8Format f : kFormats) {
    for (int c = 0; c < 256; ++c) {
      const float v = DecodeFp8(static_cast<uint8_t>(c), f);
      if (!std::isfinite(v)) continue;
      EXPECT_EQ(EncodeFp8(v, f), c) << "code " << c << " value " << v;
    }
  }
}

// Encoding gives the nearest finite code, ties to the even mantissa, for
// random floats over the whole range (by brute force over the 256 codes),
// and saturates past the largest finite value.
TEST(Fp8Test, RoundsToNearestEvenAndSaturates) {
  std::mt19937_64 rng(7);
  for (Fp8Format f : kFormats) {
    const double max = Fp8Max(f);
    std::uniform_real_distribution<double> log_mag(-20, std::log2(max) + 1);
    for (int t = 0; t < 20000; ++t) {
      float x = static_cast<float>(std::exp2(log_mag(rng)));
      if (t % 2) x = -x;
      if (t % 7 == 0) {  // a midpoint between two neighbouring codes
        const uint8_t c = static_cast<uint8_t>(rng() % 0x7B);
        x = static_cast<float>((double(DecodeFp8(c, f)) + DecodeFp8(c + 1, f)) / 2);
      }
      const uint8_t got = EncodeFp8(x, f);
      if (std::fabs(x) >= max) {
        EXPECT_EQ(DecodeFp8(got, f), std::copysign(static_cast<float>(max), x)) << x;
        continue;
      }
      int best = -1;
      double best_err = 1e300;
      for (int c = 0; c < 256; ++c) {
        const double v = DecodeFp8(static_cast<uint8_t>(c), f);
        if (!std::isfinite(v) || std::signbit(v) != std::signbit(x)) continue;
        const double err = std::fabs(v - double(x));
        // Ties: the even code (its mantissa's last bit 0).
        if (err < best_err || (err == best_err && (c & 1) == 0)) {
          best = c;
          best_err = err;
        }
      }
      EXPECT_EQ(DecodeFp8(got, f), DecodeFp8(static_cast<uint8_t>(best), f))
          << "x " << x << " got code " << int(got) << " nearest " << best;
    }
  }
}

TEST(Fp8Test, NaNStaysNaNAndInfinitySaturates) {
  for (Fp8Format f : kFormats) {
    EXPECT_TRUE(std::isnan(DecodeFp8(EncodeFp8(std::nanf(""), f), f)));
    EXPECT_EQ(DecodeFp8(EncodeFp8(std::numeric_limits<float>::infinity(), f), f), Fp8Max(f));
    EXPECT_EQ(DecodeFp8(EncodeFp8(-std::numeric_limits<float>::infinity(), f), f), -Fp8Max(f));
    EXPECT_EQ(DecodeFp8(EncodeFp8(1e-30f, f), f), 0.0f);  // underflows to 0
  }
}

}  // namespace
}  // namespace attnkit
