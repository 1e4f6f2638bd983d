#include "platform/median.h"

#include <vector>

#include "gtest/gtest.h"

namespace attnkit {
namespace {

TEST(MedianTest, OddCountIsTheMiddleValue) {
  EXPECT_EQ(Median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(Median({5.0}), 5.0);
}

TEST(MedianTest, EvenCountIsTheMeanOfTheTwoMiddleValues) {
  EXPECT_EQ(Median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_EQ(Median({1.0, 1.0, 9.0, 9.0}), 5.0);
  EXPECT_EQ(Median({7.0, 3.0}), 5.0);
}

TEST(MedianTest, EmptyIsZero) { EXPECT_EQ(Median({}), 0.0); }

TEST(MedianTest, LeavesTheCallersOrder) {
  const std::vector<double> v = {9.0, 1.0, 5.0, 3.0};
  EXPECT_EQ(Median(v), 4.0);
  EXPECT_EQ(v, (std::vector<double>{9.0, 1.0, 5.0, 3.0}));
}

}  // namespace
}  // namespace attnkit
