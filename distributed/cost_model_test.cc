// The ring / Ulysses cost model: scaling laws, the crossover where the ring
// stops hiding its transfers (against a hand calculation), Ulysses' head
// rule, the strategy choice, and the projection table.
#include "distributed/cost_model.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace attnkit {
namespace dist {
namespace {

using ::testing::HasSubstr;

// An H32/G8 d128 causal self-attention layer over T tokens: f32 Q/O, bf16
// K/V (the block shape of the ring bench).
AttentionProblem Layer(int64_t tokens, int64_t heads = 32, int64_t kv_heads = 8) {
  AttentionProblem p = BasicProblem(1, heads, kv_heads, tokens, tokens, 128);
  p.kv_dtype = DType::kBF16;
  p.mask = MaskKind::kCausal;
  return p;
}

LinkModel Link(double bytes_per_s, double latency_s) {
  LinkModel l;
  l.bandwidth_bytes_per_s = bytes_per_s;
  l.latency_s = latency_s;
  return l;
}

TEST(CostModelTest, RingComputeAndStepTransferScaleAsOneOverN) {
  const AttentionProblem p = Layer(8192);
  const LinkModel link = Link(1e9, 0.0);
  for (int n : {2, 4, 8, 16}) {
    const StrategyEstimate a = EstimateRing(p, n, link, 1e12);
    const StrategyEstimate b = EstimateRing(p, 2 * n, link, 1e12);
    ASSERT_EQ(a.strategy, Strategy::kRing);
    EXPECT_NEAR(b.compute_s / a.compute_s, 0.5, 1e-12) << n;
    // Per step: N - 1 transfers of one K/V block of Tk/N rows.
    EXPECT_NEAR((b.comm_s / (2 * n - 1)) / (a.comm_s / (n - 1)), 0.5, 1e-12) << n;
    EXPECT_NEAR(static_cast<double>(b.memory_bytes) / a.memory_bytes, 0.5, 1e-6) << n;
  }
}

TEST(CostModelTest, RingBlockBytesMatchTheShapes) {
  const AttentionProblem p = Layer(8192);
  const StrategyEstimate e = EstimateRing(p, 4, Link(1e9, 0.0), 1e12);
  // K and V [1, 8, 2048, 128] bf16, sent 3 times.
  EXPECT_EQ(e.bytes_sent, int64_t{3} * 2 * 8 * 2048 * 128 * 2);
}

TEST(CostModelTest, RingCrossoverMatchesHandCalculation) {
  // Hidden while a step's compute F / (N^2 f) covers its transfer
  // 2 B G (T/N) d e / bw (latency 0): N <= F bw / (2 B G T d e f). With
  // F = 4 d H T (T + 1) / 2 (causal pairs) this is N* = H (T + 1) bw / (G e f)
  // = 32 * 8193 * 1e9 / (8 * 2 * 1e12) = 16.386.
  const int64_t t = 8192;
  const double bw = 1e9, f = 1e12;
  const double n_star = 32.0 * (t + 1) * bw / (8.0 * 2 * f);
  ASSERT_NEAR(n_star, 16.386, 1e-9);
  const AttentionProblem p = Layer(t);
  EXPECT_TRUE(EstimateRing(p, 16, Link(bw, 0.0), f).comm_hidden);
  const StrategyEstimate past = EstimateRing(p, 17, Link(bw, 0.0), f);
  EXPECT_FALSE(past.comm_hidden);
  EXPECT_GT(past.exposed_comm_s, 0.0);
  EXPECT_LT(past.efficiency, 1.0);
  // Below the crossover the ring costs compute only: efficiency 1.
  EXPECT_NEAR(EstimateRing(p, 4, Link(bw, 0.0), f).efficiency, 1.0, 1e-12);
  // Latency moves the crossover down: 2 messages of 100 us per step.
  EXPECT_FALSE(EstimateRing(p, 16, Link(bw, 100e-6), f).comm_hidden);
}

TEST(CostModelTest, RingExposedTimeIsHandComputed) {
  const AttentionProblem p = Layer(8192);
  const double f = 1e12, bw = 1e9, lat = 5e-6;
  const int n = 32;
  const StrategyEstimate e = EstimateRing(p, n, Link(bw, lat), f);
  const double flops = 4.0 * 128 * 32 * (8192.0 * 8193.0 / 2.0);
  const double step_compute = flops / f / (n * n);
  const double step_comm = 2.0 * 8 * (8192.0 / n) * 128 * 2 / bw + 2 * lat;
  EXPECT_NEAR(e.compute_s, flops / f / n, 1e-12);
  EXPECT_NEAR(e.exposed_comm_s, (n - 1) * (step_comm - step_compute), 1e-12);
  EXPECT_NEAR(e.time_s, e.compute_s + e.exposed_comm_s, 1e-15);
  EXPECT_NEAR(e.efficiency, (flops / f) / (n * e.time_s), 1e-12);
}

TEST(CostModelTest, SingleRankHasNoCommunication) {
  const StrategyEstimate e = EstimateRing(Layer(4096), 1, LinkModel{}, 1e11);
  EXPECT_EQ(e.strategy, Strategy::kRing);
  EXPECT_EQ(e.bytes_sent, 0);
  EXPECT_EQ(e.comm_s, 0.0);
  EXPECT_TRUE(e.comm_hidden);
  EXPECT_NEAR(e.efficiency, 1.0, 1e-12);
}

TEST(CostModelTest, UnusableInputsAreNotPossible) {
  const AttentionProblem p = Layer(4096);
  EXPECT_EQ(EstimateRing(p, 0, Link(1e9, 0), 1e11).strategy, Strategy::kAuto);
  EXPECT_EQ(EstimateRing(p, 4, Link(0, 0), 1e11).strategy, Strategy::kAuto);
  EXPECT_EQ(EstimateRing(p, 4, Link(1e9, 0), 0.0).strategy, Strategy::kAuto);
  EXPECT_EQ(EstimateUlysses(p, 4, Link(1e9, 0), -1.0).strategy, Strategy::kAuto);
}

TEST(CostModelTest, UlyssesNeedsHeadsDivisibleByRanks) {
  const AttentionProblem p = Layer(6144);  // H32 / G8
  const LinkModel link = Link(12.5e9, 5e-6);
  EXPECT_EQ(EstimateUlysses(p, 3, link, 1e11).strategy, Strategy::kAuto);      // 32 % 3
  EXPECT_EQ(EstimateUlysses(p, 64, link, 1e11).strategy, Strategy::kAuto);     // 32 % 64
  EXPECT_EQ(EstimateUlysses(p, 4, link, 1e11).strategy, Strategy::kUlysses);   // G 8 % 4
  EXPECT_EQ(EstimateUlysses(p, 16, link, 1e11).strategy, Strategy::kUlysses);  // 16 % G 8
  // H 24, G 12 on 8 ranks: 24 % 8 == 0 but neither 12 % 8 nor 8 % 12 is.
  EXPECT_EQ(EstimateUlysses(Layer(6144, 24, 12), 8, link, 1e11).strategy, Strategy::kAuto);
}

TEST(CostModelTest, UlyssesTrafficIsHandComputed) {
  // MHA H8 d128 T1024 on 4 ranks, f32 Q/O, bf16 K/V: each of Q, O sends
  // 3 pieces of [2 heads, 256 rows, 128] f32; K, V 3 pieces of bf16.
  AttentionProblem p = Layer(1024, 8, 8);
  const StrategyEstimate e = EstimateUlysses(p, 4, Link(1e9, 1e-6), 1e12);
  const int64_t q_piece = 2 * 256 * 128 * 4, kv_piece = 2 * 256 * 128 * 2;
  EXPECT_EQ(e.bytes_sent, 3 * (2 * q_piece + 2 * kv_piece));
  EXPECT_NEAR(e.comm_s, e.bytes_sent / 1e9 + 4 * 3 * 1e-6, 1e-12);
  EXPECT_EQ(e.exposed_comm_s, e.comm_s);
  EXPECT_FALSE(e.comm_hidden);
  // More ranks than KV heads: each rank gets one whole KV head.
  const StrategyEstimate g = EstimateUlysses(Layer(1024, 32, 2), 8, Link(1e9, 0), 1e12);
  const int64_t q8 = 4 * 128 * 128 * 4, kv8 = 1 * 128 * 128 * 2;
  EXPECT_EQ(g.bytes_sent, 7 * (2 * q8 + 2 * kv8));
}

TEST(CostModelTest, ChoosesUlyssesForManyHeadsShortSequenceFastLink) {
  // MHA H64, 2k tokens, 8 ranks at 400 Gb/s and an accelerator's rate: a
  // ring step's compute (~10 us) cannot hide a 2 MB block, while Ulysses
  // moves less data once.
  const AttentionProblem p = Layer(2048, 64, 64);
  const LinkModel link = Link(50e9, 5e-6);
  const double f = 1e14;
  EXPECT_LT(EstimateUlysses(p, 8, link, f).time_s, EstimateRing(p, 8, link, f).time_s);
  EXPECT_EQ(ChooseStrategy(p, 8, link, f, absl::OkStatus()), Strategy::kUlysses);
  // Refused by the caller (UlyssesSupports) or by the head count: ring.
  EXPECT_EQ(ChooseStrategy(p, 8, link, f, absl::UnimplementedError("no")), Strategy::kRing);
  EXPECT_EQ(ChooseStrategy(Layer(2048 * 3, 64, 64), 3, link, f, absl::OkStatus()), Strategy::kRing);
}

TEST(CostModelTest, ChoosesRingWhenItHidesTheTransfers) {
  // Long sequence, slow compute: the ring hides everything, Ulysses pays its
  // all-to-alls on top.
  const AttentionProblem p = Layer(65536);
  const LinkModel link = Link(12.5e9, 5e-6);
  EXPECT_TRUE(EstimateRing(p, 8, link, 1e11).comm_hidden);
  EXPECT_EQ(ChooseStrategy(p, 8, link, 1e11, absl::OkStatus()), Strategy::kRing);
}

TEST(CostModelTest, ProjectionIsFiniteAndComplete) {
  const std::vector<int64_t> tokens = {131072, 262144, 524288, 1048576};
  const std::vector<int> ranks = {8, 16, 32, 64, 128, 256, 512, 1024};
  const std::vector<double> links = {100, 400};
  const std::vector<ProjectionRow> rows = Project(Layer(1024), tokens, ranks, links, 5e-6, 4e14);
  ASSERT_EQ(rows.size(), tokens.size() * ranks.size() * links.size());
  for (const ProjectionRow& r : rows) {
    SCOPED_TRACE(testing::Message() << r.tokens << " " << r.ranks << " " << r.link_gbit_per_s);
    EXPECT_EQ(r.ring.strategy, Strategy::kRing);
    // H32 splits over at most 32 ranks.
    EXPECT_EQ(r.ulysses.strategy, r.ranks <= 32 ? Strategy::kUlysses : Strategy::kAuto);
    for (double x : {r.ring.compute_s, r.ring.comm_s, r.ring.exposed_comm_s, r.ring.time_s,
                     r.ring.efficiency, r.ulysses.time_s, r.ulysses.efficiency}) {
      EXPECT_TRUE(std::isfinite(x));
      EXPECT_GE(x, 0.0);
    }
    EXPECT_GT(r.ring.memory_bytes, 0);
    EXPECT_GT(r.ring.bytes_sent, 0);
    EXPECT_LE(r.ring.efficiency, 1.0 + 1e-12);
  }
  // 1M tokens on 8 ranks: Q, O shards [32, 131072, 128] f32 are 2 GiB each.
  const ProjectionRow& big = rows[3 * ranks.size() * links.size()];
  ASSERT_EQ(big.tokens, 1048576);
  ASSERT_EQ(big.ranks, 8);
  EXPECT_GT(big.ring.memory_bytes, int64_t{4} << 30);
}

TEST(CostModelTest, FormatProjectionHasRowsAndCrossovers) {
  const std::vector<ProjectionRow> rows =
      Project(Layer(1024), {131072, 1048576}, {8, 64, 512}, {100, 400}, 5e-6, 4e14);
  const std::string table = FormatProjection(rows);
  EXPECT_THAT(table, HasSubstr("ring_s"));
  EXPECT_THAT(table, HasSubstr("ring_MiB"));
  EXPECT_THAT(table, HasSubstr("   128k      8   100 "));
  EXPECT_THAT(table, HasSubstr("     1M    512   400 "));
  // At 400 TFLOP/s a 128k ring exposes comm at 100 Gb/s from N > 2 T bw / f,
  // about 8.2: hidden at 8, exposed from 64.
  EXPECT_THAT(table, HasSubstr("128k tokens, 100 Gb/s: the ring hides its communication up to 8 "
                               "ranks and exposes it from 64 ranks"));
  // Ulysses cannot split 32 heads over 64 or 512 ranks.
  EXPECT_THAT(table, HasSubstr("-    ring\n"));
  // One crossover line per (tokens, link).
  int lines = 0;
  for (size_t at = 0; (at = table.find(" Gb/s: ", at)) != std::string::npos; ++at) ++lines;
  EXPECT_EQ(lines, 4);
}

}  // namespace
}  // namespace dist
}  // namespace attnkit
