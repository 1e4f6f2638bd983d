#include "core/dtype.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace attnkit {
namespace {

TEST(DTypeTest, F16RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = F32FromF16(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F32FromF16(F16FromF32(f)))) << h;
      continue;
    }
    EXPECT_EQ(F16FromF32(f), h) << "f16 bits " << h << " value " << f;
  }
}

TEST(DTypeTest, F16RoundsToNearestEven) {
  EXPECT_EQ(F32FromF16(F16FromF32(1.0f + std::ldexp(1.0f, -11))), 1.0f);  // tie -> even
  EXPECT_EQ(F32FromF16(F16FromF32(1.0f + 3 * std::ldexp(1.0f, -11))), 1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(F32FromF16(F16FromF32(65520.0f)), std::numeric_limits<float>::infinity());
  EXPECT_EQ(F32FromF16(F16FromF32(65519.0f)), 65504.0f);
  EXPECT_EQ(F32FromF16(F16FromF32(std::ldexp(1.0f, -25))), 0.0f);  // tie below min subnormal
  EXPECT_EQ(F32FromF16(F16FromF32(std::ldexp(1.5f, -24))), std::ldexp(1.0f, -23));
  EXPECT_EQ(F32FromF16(F16FromF32(-2.0f)), -2.0f);
}

TEST(DTypeTest, BF16RoundsToNearestEven) {
  EXPECT_EQ(F32FromBF16(BF16FromF32(1.0f + std::ldexp(1.0f, -8))), 1.0f);  // tie -> even
  EXPECT_EQ(F32FromBF16(BF16FromF32(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(F32FromBF16(BF16FromF32(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(F32FromBF16(BF16FromF32(-3.0f)), -3.0f);
}

TEST(DTypeTest, NamesParseBack) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kU8}) {
    EXPECT_EQ(*ParseDType(DTypeName(t)), t);
  }
  EXPECT_FALSE(ParseDType("f64").ok());
}

}  // namespace
}  // namespace attnkit
