// FoldSink (core/sinks.h): config.proto's rules for a sink, and the fold's
// value against the fp64 sum it stands for.
#include "core/sinks.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace attnkit {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(FoldSinkTest, MatchesTheDenominatorWithTheSinkInIt) {
  for (float lse : {-30.0f, -1.0f, 0.0f, 2.5f, 7.0f, 60.0f}) {
    for (float sink : {-40.0f, -2.0f, 0.0f, 3.0f, 7.0f, 80.0f}) {
      const SinkFold f = FoldSink(lse, sink);
      // log(e^lse + e^sink) and e^lse / (e^lse + e^sink), in double.
      const double m = std::max<double>(lse, sink);
      const double total = std::exp(double(lse) - m) + std::exp(double(sink) - m);
      const double want_lse = m + std::log(total), want_scale = std::exp(double(lse) - m) / total;
      EXPECT_NEAR(f.lse, want_lse, 1e-6 * (1 + std::fabs(want_lse))) << lse << " " << sink;
      EXPECT_NEAR(f.scale, want_scale, 1e-6 * want_scale + 1e-30) << lse << " " << sink;
      EXPECT_GE(f.lse, std::max(lse, sink));
    }
  }
}

TEST(FoldSinkTest, ARowThatSeesNoKeyGivesZeroAndTheSink) {
  const SinkFold f = FoldSink(-kInf, 1.5f);
  EXPECT_EQ(f.scale, 0.0f);
  EXPECT_EQ(f.lse, 1.5f);
}

TEST(FoldSinkTest, MinusInfinityIsNoSink) {
  const SinkFold f = FoldSink(2.0f, -kInf);
  EXPECT_EQ(f.scale, 1.0f);
  EXPECT_EQ(f.lse, 2.0f);
  EXPECT_EQ(FoldSink(-kInf, -kInf).lse, -kInf);
}

TEST(FoldSinkTest, NaNOrPlusInfinityPoisonsTheRow) {
  for (float sink : {kNaN, kInf}) {
    EXPECT_TRUE(std::isnan(FoldSink(1.0f, sink).scale));
    EXPECT_TRUE(std::isnan(FoldSink(1.0f, sink).lse));
    EXPECT_TRUE(std::isnan(FoldSink(-kInf, sink).scale)) << "even a row that sees no key";
  }
  EXPECT_TRUE(std::isnan(FoldSink(kNaN, 0.0f).lse)) << "a NaN row stays NaN";
}

}  // namespace
}  // namespace attnkit
