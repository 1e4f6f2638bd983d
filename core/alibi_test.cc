#include "core/alibi.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace attnkit {
namespace {

TEST(AlibiTest, DistanceFromTheDiagonalOnBothSides) {
  EXPECT_EQ(AlibiTerm(0.5f, 10, 10), 0.0f);
  EXPECT_EQ(AlibiTerm(0.5f, 10, 7), -1.5f);
  EXPECT_EQ(AlibiTerm(0.5f, 10, 13), -1.5f);  // keys right of the diagonal (no causal mask)
  EXPECT_EQ(AlibiTerm(0.25f, 0, 1 << 20), -262144.0f);
}

TEST(AlibiTest, DiagonalFollowsTheMasksAlignment) {
  MaskParams m;
  m.q_len = 4;
  EXPECT_EQ(Diagonal(m, 1, 100), 1);  // top-left
  m.bottom_right = true;
  EXPECT_EQ(Diagonal(m, 1, 100), 97);  // query 1 of 4 against 100 keys
  EXPECT_EQ(Diagonal(m, 3, 100), 99);  // the last query's diagonal is the last key
}

TEST(AlibiTest, NonFiniteSlopesGiveNonFiniteTerms) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(AlibiTerm(inf, 3, 3)));  // inf * 0
  EXPECT_EQ(AlibiTerm(inf, 3, 1), -inf);
  EXPECT_TRUE(std::isnan(AlibiTerm(std::nanf(""), 3, 1)));
  EXPECT_EQ(AlibiTerm(3e38f, 0, 100), -inf);  // the f32 product overflows
}

TEST(AlibiTest, DefaultSlopesAreThePapers) {
  // 8 heads: 1/2, 1/4, ..., 1/256.
  const std::vector<float> eight = DefaultAlibiSlopes(8);
  ASSERT_EQ(eight.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(eight[i], std::exp2(-(i + 1.0f)));
  // 12 heads (not a power of two): the 8-head slopes, then 2^-0.5, 2^-1.5,
  // 2^-2.5, 2^-3.5 (every other slope of 16 heads).
  const std::vector<float> twelve = DefaultAlibiSlopes(12);
  ASSERT_EQ(twelve.size(), 12u);
  EXPECT_FLOAT_EQ(twelve[7], 1.0f / 256);
  EXPECT_FLOAT_EQ(twelve[8], std::exp2(-0.5f));
  EXPECT_FLOAT_EQ(twelve[11], std::exp2(-3.5f));
}

}  // namespace
}  // namespace attnkit
