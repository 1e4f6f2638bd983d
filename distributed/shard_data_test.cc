// distributed/shard_data.h: every rank's shard, put back into a full tensor with
// InsertShard, is the whole-problem data the reference reads, byte for byte,
// for contiguous and zigzag layouts, 1 to 4 ranks, f32 and bf16.
#include "distributed/shard_data.h"

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "distributed/shard_rows.h"
#include "gtest/gtest.h"

namespace attnkit {
namespace dist {
namespace {

bool SameBytes(const TensorView& a, const TensorView& b) {
  if (a.dtype != b.dtype || a.NumElements() != b.NumElements()) return false;
  return std::memcmp(a.data, b.data, a.NumElements() * DTypeSize(a.dtype)) == 0;
}

bool AllZero(const TensorView& t) {
  const auto* bytes = static_cast<const unsigned char*>(t.data);
  for (int64_t i = 0; i < t.NumElements() * static_cast<int64_t>(DTypeSize(t.dtype)); ++i) {
    if (bytes[i] != 0) return false;
  }
  return true;
}

using Case = std::tuple<DType, Sharding, int>;

class ShardDataTest : public testing::TestWithParam<Case> {};

TEST_P(ShardDataTest, ShardsOfAllRanksAreTheFullData) {
  const auto [dtype, sharding, ranks] = GetParam();
  // Tq differs from Tk (contiguous only: zigzag is causal self-attention).
  for (const int64_t q_len : {int64_t{24}, int64_t{48}}) {
    if (sharding == Sharding::kZigzag && q_len != 24) continue;
    AttentionProblem p = BasicProblem(/*batch=*/2, /*heads=*/4, /*kv_heads=*/2, q_len,
                                      /*kv_len=*/24, /*head_dim=*/8);
    p.dtype = p.kv_dtype = dtype;
    p.return_lse = true;
    p.kv_lengths = {24, 17};
    const uint64_t seed = 7;
    SCOPED_TRACE(absl::StrCat(p.Id(), " ", ShardingName(sharding), " x", ranks));
    const absl::StatusOr<ShardLayout> q_layout = MakeLayout(sharding, ranks, p.q_len, "q_len");
    const absl::StatusOr<ShardLayout> kv_layout = MakeLayout(sharding, ranks, p.kv_len, "kv_len");
    ASSERT_TRUE(q_layout.ok()) << q_layout.status();
    ASSERT_TRUE(kv_layout.ok()) << kv_layout.status();

    absl::StatusOr<FullData> full = FullProblemData(p, seed, /*with_d_o=*/true);
    ASSERT_TRUE(full.ok()) << full.status();
    absl::StatusOr<FullData> gathered = FullProblemData(p, seed + 1, /*with_d_o=*/true);
    ASSERT_TRUE(gathered.ok()) << gathered.status();
    // Another seed's data: every row must be overwritten by some rank.
    ASSERT_FALSE(SameBytes(gathered->data.q.view(), full->data.q.view()));
    for (int r = 0; r < ranks; ++r) {
      absl::StatusOr<ShardData> s = ShardData::Random(p, *q_layout, *kv_layout, r, seed, true);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_EQ(s->q.view().dim(2), p.q_len / ranks);
      EXPECT_EQ(s->k.view().dim(1), p.num_kv_heads);
      EXPECT_EQ(s->k.view().dim(2), p.kv_len / ranks);
      EXPECT_EQ(s->lse.view().rank, 3);
      EXPECT_TRUE(s->q.view().IsContiguous());
      EXPECT_TRUE(AllZero(s->o.view()) && AllZero(s->dq.view()) && AllZero(s->dk.view()) &&
                  AllZero(s->dv.view()));
      const ShardArgs a = s->args();
      const ShardGrads g = s->grads();
      EXPECT_EQ(a.q.data, s->q.data());
      EXPECT_EQ(g.d_o.data, s->d_o.data());
      ASSERT_TRUE(InsertShard(a.q, *q_layout, r, gathered->data.q.view()).ok());
      ASSERT_TRUE(InsertShard(a.k, *kv_layout, r, gathered->data.k.view()).ok());
      ASSERT_TRUE(InsertShard(a.v, *kv_layout, r, gathered->data.v.view()).ok());
      ASSERT_TRUE(InsertShard(g.d_o, *q_layout, r, gathered->d_o.view()).ok());
    }
    EXPECT_TRUE(SameBytes(gathered->data.q.view(), full->data.q.view()));
    EXPECT_TRUE(SameBytes(gathered->data.k.view(), full->data.k.view()));
    EXPECT_TRUE(SameBytes(gathered->data.v.view(), full->data.v.view()));
    EXPECT_TRUE(SameBytes(gathered->d_o.view(), full->d_o.view()));
    // The reference's kv_lengths are the problem's.
    ASSERT_FALSE(full->data.kv_lengths.view().empty());
    EXPECT_EQ(static_cast<const int32_t*>(full->data.kv_lengths.data())[1], 17);
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, ShardDataTest,
                         testing::Combine(testing::Values(DType::kF32, DType::kBF16),
                                          testing::Values(Sharding::kContiguous, Sharding::kZigzag),
                                          testing::Values(1, 2, 3, 4)),
                         [](const testing::TestParamInfo<Case>& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               ShardingName(std::get<1>(info.param)), "_n",
                                               std::get<2>(info.param));
                         });

// Values are uniform in [-1, 1), differ between tensors and seeds, and bf16
// storage holds them rounded.
TEST(ShardData, ValuesAreUniformAndDistinct) {
  double sum = 0, sum_sq = 0, lo = 1, hi = -1;
  int same_tensor = 0, same_seed = 0;
  const int n = 1 << 16;
  for (int i = 0; i < n; ++i) {
    const float x = InputValue(3, InputTensor::kQ, 0, i % 7, i / 7, i % 64);
    sum += x;
    sum_sq += double{x} * x;
    lo = std::min<double>(lo, x);
    hi = std::max<double>(hi, x);
    same_tensor += x == InputValue(3, InputTensor::kK, 0, i % 7, i / 7, i % 64);
    same_seed += x == InputValue(4, InputTensor::kQ, 0, i % 7, i / 7, i % 64);
  }
  EXPECT_GE(lo, -1.0);
  EXPECT_LT(hi, 1.0);
  EXPECT_LT(lo, -0.99);
  EXPECT_GT(hi, 0.99);
  EXPECT_NEAR(sum / n, 0.0, 0.02);
  EXPECT_NEAR(sum_sq / n, 1.0 / 3.0, 0.02);  // the variance of U(-1, 1)
  EXPECT_LT(same_tensor, 4);
  EXPECT_LT(same_seed, 4);

  AttentionProblem p = BasicProblem(1, 2, 1, 8, 8, 4);
  p.dtype = p.kv_dtype = DType::kBF16;
  absl::StatusOr<FullData> full = FullProblemData(p, 3, false);
  ASSERT_TRUE(full.ok()) << full.status();
  const TensorView q = full->data.q.view();
  EXPECT_EQ(q.LoadF32(q.Offset(0, 1, 5, 2)),
            F32FromBF16(BF16FromF32(InputValue(3, InputTensor::kQ, 0, 1, 5, 2))));
  EXPECT_TRUE(full->d_o.view().empty());
}

// The whole-problem data follows p.layout; the values do not change with it.
TEST(ShardData, FullDataInTokenMajorLayout) {
  AttentionProblem p = BasicProblem(2, 4, 2, 6, 10, 8);
  absl::StatusOr<FullData> bhtd = FullProblemData(p, 5, true);
  p.layout = Layout::kBTHD;
  absl::StatusOr<FullData> bthd = FullProblemData(p, 5, true);
  ASSERT_TRUE(bhtd.ok() && bthd.ok());
  for (const auto& [a, b] : {std::make_pair(bhtd->data.k.view(), bthd->data.k.view()),
                             std::make_pair(bhtd->d_o.view(), bthd->d_o.view())}) {
    for (int64_t h = 0; h < a.dim(1); ++h) {
      for (int64_t t = 0; t < a.dim(2); ++t) {
        for (int64_t c = 0; c < a.dim(3); ++c) {
          ASSERT_EQ(a.LoadF32(a.Offset(1, h, t, c)), b.LoadF32(b.Offset(1, h, t, c)));
        }
      }
    }
  }
}

// The reference holds the whole problem: a budget that refuses it in one
// process (ProblemData) does not refuse the oracle's copy.
TEST(ShardData, FullDataIgnoresTheMemoryBudget) {
  AttentionProblem p = BasicProblem(1, 4, 2, 64, 64, 16);
  p.memory_budget_bytes = 4096;
  EXPECT_EQ(ProblemData::Allocate(p).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(FullProblemData(p, 1, true).ok());
}

TEST(ShardData, RefusalsNameTheField) {
  AttentionProblem p = BasicProblem(1, 4, 2, 16, 16, 8);
  const ShardLayout q = *MakeLayout(Sharding::kContiguous, 2, 16, "q_len");
  const ShardLayout wrong = *MakeLayout(Sharding::kContiguous, 2, 32, "kv_len");
  absl::Status s = ShardData::Random(p, q, q, 0, 1, /*with_grads=*/true).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("return_lse"), absl::string_view::npos) << s;
  s = ShardData::Random(p, q, wrong, 0, 1, false).status();
  EXPECT_NE(s.message().find("kv_len"), absl::string_view::npos) << s;
  s = ShardData::Random(p, q, q, 2, 1, false).status();
  EXPECT_NE(s.message().find("rank 2"), absl::string_view::npos) << s;
  AttentionProblem bthd = p;
  bthd.layout = Layout::kBTHD;
  s = ShardData::Random(bthd, q, q, 0, 1, false).status();
  EXPECT_NE(s.message().find("layout"), absl::string_view::npos) << s;
  AttentionProblem int8 = p;
  int8.kv_dtype = DType::kI8;
  s = FullProblemData(int8, 1, false).status();
  EXPECT_NE(s.message().find("kv_dtype"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace dist
}  // namespace attnkit
