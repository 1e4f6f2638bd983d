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

// Folding into the running (max, sum) agrees with normalising then folding,
// on both sides of the sink (which of the two maxima is larger) and far out.
TEST(NormalizeWithSinkTest, AgreesWithFoldSink) {
  for (float m : {-80.0f, -2.0f, 0.0f, 3.0f, 85.0f}) {
    for (float l : {1.0f, 7.5f, 300.0f}) {
      for (float sink : {-kInf, -90.0f, -1.0f, 0.5f, 4.0f, 88.0f}) {
        const SinkNorm n = NormalizeWithSink(m, l, sink);
        const SinkFold f = FoldSink(m + std::log(l), sink);
        EXPECT_NEAR(n.inv * l, f.scale, 4e-6f * std::max(1.0f, f.scale))
            << m << " " << l << " " << sink;
        EXPECT_NEAR(n.lse, f.lse, 4e-6f * std::max(1.0f, std::fabs(f.lse)));
      }
    }
  }
  EXPECT_TRUE(std::isnan(NormalizeWithSink(0.0f, 1.0f, kNaN).inv));
  EXPECT_TRUE(std::isnan(NormalizeWithSink(0.0f, 1.0f, kInf).lse));
}

}  // namespace
}  // namespace attnkit
