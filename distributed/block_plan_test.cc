// Sharding and block planning without MPI: the zigzag balance, the block
// kinds, their masks against core/mask.h, and the ring's step count.
#include "distributed/block_plan.h"

#include <vector>

#include "core/mask.h"
#include "distributed/ring_attention.h"
#include "distributed/sharding.h"
#include "gtest/gtest.h"

namespace attnkit {
namespace dist {
namespace {

AttentionProblem Causal(int64_t t) {
  AttentionProblem p = BasicProblem(1, 4, 2, t, t, 16);
  p.mask = MaskKind::kCausal;
  return p;
}

// Visible (query, key) pairs rank r computes over the whole ring, per head.
int64_t PairsOnRank(const AttentionProblem& p, const ShardLayout& ql, const ShardLayout& kl,
                    int r) {
  int64_t pairs = 0;
  for (int s = 0; s < ql.num_ranks; ++s) {
    const int src = (r - s + ql.num_ranks) % ql.num_ranks;
    for (const RowRange& qc : ql.Ranges(r)) {
      for (const RowRange& kc : kl.Ranges(src)) {
        const BlockPlan plan = PlanBlock(p, qc.begin, qc.rows, kc.begin, kc.rows);
        for (int64_t i = 0; i < qc.rows; ++i) {
          const int64_t len = plan.kv_lengths[0];
          for (int64_t j = 0; j < len; ++j) {
            bool visible = plan.mask == BlockMask::kNone ||
                           (plan.mask == BlockMask::kCausal && j <= i) ||
                           (plan.mask == BlockMask::kDense && plan.dense[i * kc.rows + j] == 0);
            pairs += plan.mask != BlockMask::kHidden && visible;
          }
        }
      }
    }
  }
  return pairs;
}

TEST(ShardingTest, ZigzagHoldsAnEarlyAndALateChunk) {
  const auto layout = MakeLayout(Sharding::kZigzag, 4, 64, "q_len");
  ASSERT_TRUE(layout.ok());
  const std::vector<RowRange> r1 = layout->Ranges(1);
  ASSERT_EQ(r1.size(), 2u);
  EXPECT_EQ(r1[0].begin, 8);
  EXPECT_EQ(r1[1].begin, 48);  // chunk 2N - 1 - r = 6
  EXPECT_EQ(r1[1].local, 8);
  EXPECT_EQ(layout->LocalRows(), 16);
  const auto bad = MakeLayout(Sharding::kZigzag, 4, 60, "q_len");
  EXPECT_EQ(std::string(bad.status().message()),
            "q_len (60) must be a positive multiple of 8 for zigzag sharding over 4 ranks");
}

TEST(BlockPlanTest, ZigzagGivesEveryRankTheSameCausalWork) {
  for (int n = 1; n <= 8; ++n) {
    const AttentionProblem p = Causal(16 * n);
    const auto ql = QueryShard(p, n, Strategy::kRing), kl = KvShard(p, n, Strategy::kRing);
    ASSERT_TRUE(ql.ok() && kl.ok());
    EXPECT_EQ(ql->sharding, Sharding::kZigzag);
    int64_t total = 0;
    const int64_t first = PairsOnRank(p, *ql, *kl, 0);
    for (int r = 0; r < n; ++r) {
      const int64_t pairs = PairsOnRank(p, *ql, *kl, r);
      EXPECT_EQ(pairs, first) << "rank " << r << " of " << n;
      total += pairs;
    }
    EXPECT_EQ(total, CountVisiblePairs(p) / (p.batch * p.num_heads)) << n << " ranks";
  }
}

TEST(BlockPlanTest, KindsOfBlocks) {
  const AttentionProblem p = Causal(64);
  EXPECT_EQ(PlanBlock(p, 16, 16, 16, 16).mask, BlockMask::kCausal);  // the diagonal
  EXPECT_EQ(PlanBlock(p, 32, 16, 0, 16).mask, BlockMask::kNone);     // below it
  EXPECT_EQ(PlanBlock(p, 0, 16, 32, 16).mask, BlockMask::kHidden);   // above it
  // Padding: sequence 1 has 20 keys, so it sees 4 of the chunk [16, 32) and
  // none of [32, 48).
  AttentionProblem pad = BasicProblem(2, 2, 2, 64, 64, 16);
  pad.kv_lengths = {64, 20};
  const BlockPlan a = PlanBlock(pad, 0, 16, 16, 16);
  EXPECT_EQ(a.mask, BlockMask::kNone);
  EXPECT_EQ(a.kv_lengths, (std::vector<int64_t>{16, 4}));
  EXPECT_EQ(PlanBlock(pad, 0, 16, 32, 16).kv_lengths, (std::vector<int64_t>{16, 0}));
  const AttentionProblem block = BlockProblem(pad, a, 16, 16);
  EXPECT_EQ(block.kv_lengths, (std::vector<int64_t>{16, 4}));
  EXPECT_EQ(block.dtype, DType::kF32);
  EXPECT_TRUE(block.return_lse);
  EXPECT_TRUE(ValidateProblem(block).ok()) << ValidateProblem(block);
}

// Off-diagonal window blocks are dense, and the dense mask is exactly the
// global mask (core/mask.h) restricted to the block.
TEST(BlockPlanTest, DenseMasksMatchTheGlobalMask) {
  AttentionProblem p = BasicProblem(2, 2, 1, 48, 96, 16);
  p.mask = MaskKind::kSlidingWindow;
  p.window_left = 13;
  p.window_right = 5;
  p.alignment = Alignment::kBottomRight;
  p.kv_lengths = {96, 70};
  int dense_blocks = 0;
  for (int64_t q0 = 0; q0 < 48; q0 += 12) {
    for (int64_t k0 = 0; k0 < 96; k0 += 24) {
      const BlockPlan plan = PlanBlock(p, q0, 12, k0, 24);
      dense_blocks += plan.mask == BlockMask::kDense;
      for (int64_t b = 0; b < 2; ++b) {
        for (int64_t i = 0; i < 12; ++i) {
          const KeyRange want = VisibleKeys(p.mask_params(b), q0 + i, p.KvLength(b));
          for (int64_t j = 0; j < 24; ++j) {
            const bool global = k0 + j >= want.begin && k0 + j < want.end;
            bool local = plan.mask != BlockMask::kHidden && j < plan.kv_lengths[b];
            if (plan.mask == BlockMask::kCausal) local &= j <= i;
            if (plan.mask == BlockMask::kDense) local &= plan.dense[(b * 12 + i) * 24 + j] == 0;
            ASSERT_EQ(local, global) << "b " << b << " q " << q0 + i << " k " << k0 + j;
          }
        }
      }
    }
  }
  EXPECT_GT(dense_blocks, 0);
}

TEST(BlockPlanTest, WindowsShortenTheRing) {
  AttentionProblem p = BasicProblem(1, 2, 2, 128, 128, 16);
  p.mask = MaskKind::kSlidingWindow;
  p.window_left = 20;
  p.window_right = 0;
  const auto ql = QueryShard(p, 8, Strategy::kRing), kl = KvShard(p, 8, Strategy::kRing);
  ASSERT_TRUE(ql.ok() && kl.ok());
  EXPECT_EQ(ql->sharding, Sharding::kContiguous);
  EXPECT_EQ(RingSteps(p, *ql, *kl), 3);  // chunks of 16: the window reaches 2 ranks back
  p.mask = MaskKind::kCausal;
  EXPECT_EQ(RingSteps(p, *QueryShard(p, 8, Strategy::kRing), *KvShard(p, 8, Strategy::kRing)), 8);
}

}  // namespace
}  // namespace dist
}  // namespace attnkit
