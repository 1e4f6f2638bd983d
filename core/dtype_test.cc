#include "core/dtype.h"

#include <cmath>
#include <limits>
#include <string>

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
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kU8, DType::kI8}) {
    EXPECT_EQ(*ParseDType(DTypeName(t)), t);
  }
  EXPECT_FALSE(ParseDType("f64").ok());
  EXPECT_EQ(DTypeName(DType::kI8), "i8");
  // The error lists every name, i8 included.
  EXPECT_NE(std::string(ParseDType("int4").status().message()).find("u8, i8"), std::string::npos);
}

// int8 is K/V storage (one byte, read as its integer value; the row's scale
// is the caller's), never a float storage type for Q and O.
TEST(DTypeTest, Int8IsKvStorageOnly) {
  EXPECT_EQ(DTypeSize(DType::kI8), 1u);
  EXPECT_FALSE(IsFloatStorage(DType::kI8));
  EXPECT_TRUE(IsKvStorage(DType::kI8));
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) EXPECT_TRUE(IsKvStorage(t));
  EXPECT_FALSE(IsKvStorage(DType::kI32));
  EXPECT_FALSE(IsKvStorage(DType::kU8));
  const int8_t values[] = {-128, -127, -1, 0, 1, 127};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(LoadAsF32(values, DType::kI8, i), float(values[i]));
}

}  // namespace
}  // namespace attnkit
