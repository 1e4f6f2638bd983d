#include "distributed/strategy.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace attnkit {
namespace dist {
namespace {

TEST(StrategyTest, NamesRoundTrip) {
  for (Strategy s : {Strategy::kRing, Strategy::kUlysses, Strategy::kAuto}) {
    const absl::StatusOr<Strategy> parsed = ParseStrategy(StrategyName(s));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_EQ(StrategyName(Strategy::kRing), "ring");
  EXPECT_EQ(StrategyName(Strategy::kUlysses), "ulysses");
  EXPECT_EQ(StrategyName(Strategy::kAuto), "auto");
}

TEST(StrategyTest, UnknownNameIsInvalidArgument) {
  for (absl::string_view bad : {"", "Ring", "ring ", "allgather"}) {
    const absl::StatusOr<Strategy> parsed = ParseStrategy(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(),
              absl::StrCat("strategy (", bad, ") must be ring, ulysses or auto"));
  }
}

}  // namespace
}  // namespace dist
}  // namespace attnkit
