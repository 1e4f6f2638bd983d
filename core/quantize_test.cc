// QuantizeRowI8: symmetric int8 rows with one f32 scale (core/quantize.h).
#include "core/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/fp8.h"
#include "gtest/gtest.h"

namespace attnkit {
namespace {

// Quantizes x into a buffer first filled with garbage, so a value the
// function forgets to write shows.
std::vector<int8_t> Quantize(const std::vector<float>& x, float* scale) {
  std::vector<int8_t> q(x.size(), int8_t{99});
  *scale = QuantizeRowI8(x.data(), static_cast<int64_t>(x.size()), q.data());
  return q;
}

TEST(QuantizeTest, LargestMagnitudeMapsToPlusOrMinus127) {
  float scale = 0;
  std::vector<int8_t> q = Quantize({0.5f, -2.0f, 1.0f, 0.0f}, &scale);
  EXPECT_FLOAT_EQ(scale, 2.0f / 127.0f);
  EXPECT_EQ(q, (std::vector<int8_t>{32, -127, 64, 0}));  // 31.75 -> 32, 63.5 -> 64 (even)
  q = Quantize({0.25f, 3.0f, -1.5f}, &scale);
  EXPECT_FLOAT_EQ(scale, 3.0f / 127.0f);
  // -1.5 * f32(127 / 3) rounds to -63.5 in f32, a tie: to even, -64.
  EXPECT_EQ(q, (std::vector<int8_t>{11, 127, -64}));
}

// Rounding is to nearest, ties to even (scale 1 makes the products exact).
TEST(QuantizeTest, RoundsHalfToEven) {
  float scale = 0;
  const std::vector<int8_t> q = Quantize({127.0f, 0.5f, 1.5f, -2.5f, 2.4f, -126.6f}, &scale);
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(q, (std::vector<int8_t>{127, 0, 2, -2, 2, -127}));
}

// Every tie and the values beside it across the range, against
// std::nearbyint (QuantizeRowI8 rounds inline): x = k / 4 with 127 the row's
// largest magnitude, so scale is 1 and x * 127 / 127 is x exactly.
TEST(QuantizeTest, RoundsAsNearbyintAcrossTheRange) {
  std::vector<float> x = {127.0f};
  for (int k = -508; k <= 508; ++k) x.push_back(static_cast<float>(k) / 4.0f);
  for (float y : {0.5f, 1.5f, 126.5f}) {  // just beside a tie, both sides
    x.push_back(std::nextafter(y, 0.0f));
    x.push_back(std::nextafter(y, 200.0f));
    x.push_back(-std::nextafter(y, 0.0f));
  }
  float scale = 0;
  const std::vector<int8_t> q = Quantize(x, &scale);
  ASSERT_EQ(scale, 1.0f);
  for (size_t c = 0; c < x.size(); ++c) {
    EXPECT_EQ(q[c], static_cast<int8_t>(std::nearbyint(x[c]))) << "x = " << x[c];
  }
}

// A row so small that 127 / max|x| overflows f32 (below about 3.7e-37,
// subnormal values included) quantizes as the same row times 2^64 does:
// its zeros stay 0 (they went to -127 when the inverse scale was Inf).
TEST(QuantizeTest, TinyRowQuantizesAsItsScaledTwin) {
  const float kTwoTo64 = 0x1p64f;
  const float kTiny = std::numeric_limits<float>::denorm_min();
  for (const std::vector<float>& row : {std::vector<float>{2e-38f, 0.0f, -1e-38f, 5e-39f, -0.0f},
                                        std::vector<float>{3 * kTiny, -kTiny, 0.0f, 2 * kTiny},
                                        std::vector<float>{-3e-37f, 1e-37f}}) {
    std::vector<float> twin(row);
    for (float& x : twin) x *= kTwoTo64;
    float scale = 0, twin_scale = 0;
    const std::vector<int8_t> q = Quantize(row, &scale), want = Quantize(twin, &twin_scale);
    EXPECT_EQ(q, want) << "first value " << row[0];
    float max_abs = 0;
    for (float x : row) max_abs = std::max(max_abs, std::fabs(x));
    EXPECT_EQ(scale, max_abs / 127.0f);
  }
  // 2^-126 and -2^-127: -63.5, a tie, to even.
  float scale = 0;
  EXPECT_EQ(Quantize({0x1p-126f, 0.0f, -0x1p-127f}, &scale), (std::vector<int8_t>{127, 0, -64}));
}

// fp8 rows: the largest magnitude maps to the format's largest value, and
// every code reads back within half a step of x / scale; a row whose scale
// underflows to 0 (below about 6e-43 in E4M3) is stored as zeros, never as
// the NaN codes x / 0 gave its zeros.
TEST(QuantizeTest, Fp8RowsAndTinyFp8Rows) {
  for (Fp8Format format : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    const std::vector<float> row = {0.75f, -3.0f, 0.0f, 1e-3f};
    std::vector<uint8_t> codes(row.size(), 99);
    const float scale = QuantizeRowFp8(row.data(), 4, format, codes.data());
    EXPECT_EQ(scale, 3.0f / Fp8Max(format));
    EXPECT_EQ(DecodeFp8(codes[1], format), -Fp8Max(format));
    EXPECT_EQ(codes[2], 0);
    for (size_t c = 0; c < row.size(); ++c) {
      const float back = DecodeFp8(codes[c], format) * scale;
      EXPECT_NEAR(back, row[c], 3.0f / 8.0f) << "value " << row[c];  // E5M2's step at 3 is 1
    }
    const float kTiny = std::numeric_limits<float>::denorm_min();
    const std::vector<float> tiny = {7 * kTiny, 0.0f, -kTiny, -0.0f};
    std::vector<uint8_t> tiny_codes(tiny.size(), 99);
    EXPECT_EQ(QuantizeRowFp8(tiny.data(), 4, format, tiny_codes.data()), 0.0f);
    EXPECT_EQ(tiny_codes, std::vector<uint8_t>(tiny.size(), 0));
  }
}

TEST(QuantizeTest, ZeroRowHasScaleZero) {
  float scale = -1;
  EXPECT_EQ(Quantize({0.0f, -0.0f, 0.0f}, &scale), (std::vector<int8_t>{0, 0, 0}));
  EXPECT_EQ(scale, 0.0f);
  const int8_t untouched = 5;
  int8_t out = untouched;
  EXPECT_EQ(QuantizeRowI8(nullptr, 0, &out), 0.0f);  // an empty row
  EXPECT_EQ(out, untouched);
}

// A NaN or Inf anywhere in the row: NaN scale (the row dequantizes to NaN,
// as the float row would poison attention) and zeros.
TEST(QuantizeTest, NonFiniteRowHasNaNScale) {
  const float kInf = std::numeric_limits<float>::infinity();
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  for (float bad : {kNaN, kInf, -kInf}) {
    float scale = 0;
    const std::vector<int8_t> q = Quantize({1.0f, bad, -0.5f}, &scale);
    EXPECT_TRUE(std::isnan(scale)) << bad;
    EXPECT_EQ(q, (std::vector<int8_t>{0, 0, 0})) << bad;
    EXPECT_TRUE(std::isnan(q[0] * scale)) << "dequantized row must be NaN";
  }
}

// Random rows of every magnitude: values in [-127, 127], the maximum at
// +-127, and dequantization within half a step of the input (plus 1e-4 of a
// step: x * f32(127 / max) carries a few f32 roundings of up to 127 steps).
TEST(QuantizeTest, RoundTripErrorIsAtMostHalfAStep) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (int trial = 0; trial < 500; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 300);
    const float magnitude = std::ldexp(1.0f, static_cast<int>(rng() % 60) - 30);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = unit(rng) * magnitude;
    float max_abs = 0;
    for (float v : x) max_abs = std::max(max_abs, std::fabs(v));
    float scale = 0;
    const std::vector<int8_t> q = Quantize(x, &scale);
    ASSERT_EQ(scale, max_abs / 127.0f);
    bool saw_extreme = false;
    for (int64_t c = 0; c < n; ++c) {
      ASSERT_GE(q[c], -127) << "-128 is never produced";
      saw_extreme |= q[c] == 127 || q[c] == -127;
      const double err = std::fabs(double(x[c]) - double(q[c]) * double(scale));
      ASSERT_LE(err, (0.5 + 1e-4) * scale) << "trial " << trial << " c " << c;
    }
    EXPECT_TRUE(saw_extreme) << "trial " << trial;
  }
}

}  // namespace
}  // namespace attnkit
