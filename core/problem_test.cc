#include "core/problem.h"

#include "core/config_io.h"
#include "core/problem_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace attnkit {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<AttentionProblem> FromText(const std::string& text) {
  auto config = ParseConfigText(text, "test");
  if (!config.ok()) return config.status();
  return ProblemFromConfig(*config);
}

TEST(ProblemTest, DefaultsFillIn) {
  auto p = FromText("num_heads: 8 head_dim: 64 q_len: 16");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->num_kv_heads, 8);
  EXPECT_EQ(p->kv_len, 16);
  EXPECT_EQ(p->batch, 1);
  EXPECT_EQ(p->model_dim, 512);
  EXPECT_FLOAT_EQ(p->scale, 0.125f);
  EXPECT_EQ(p->dtype, DType::kF32);
  EXPECT_EQ(p->backend, "auto");
  EXPECT_EQ(p->Variant(), "mha");
}

TEST(ProblemTest, ErrorsNameFieldValueAndRule) {
  struct Case {
    std::string text, message;
  };
  const Case cases[] = {
      {"num_heads: 12 num_kv_heads: 5 head_dim: 64 q_len: 4",
       "num_heads (12) must be a multiple of num_kv_heads (5)"},
      {"num_heads: 4 num_kv_heads: 8 head_dim: 64 q_len: 4", "num_kv_heads (8) must be in [1, 4]"},
      {"num_heads: 0 head_dim: 64 q_len: 4", "num_heads (0) must be in [1, 65536]"},
      {"num_heads: 4 head_dim: 0 q_len: 4", "head_dim (0) must be in [1, 1024]"},
      {"num_heads: 4 head_dim: 64 q_len: 0", "q_len (0) must be in [1,"},
      {"num_heads: 4 head_dim: 64 q_len: 4 kv_len: 9 mask { kind: CAUSAL }",
       "alignment must be TOP_LEFT or BOTTOM_RIGHT when q_len (4) != kv_len (9)"},
      {"num_heads: 4 head_dim: 64 q_len: 4 mask { kind: SLIDING_WINDOW window_left: -1 }",
       "mask.window_left (-1) must be in [0,"},
      {"num_heads: 4 head_dim: 64 q_len: 4 mask { kind: CAUSAL window_left: 3 }",
       "must be 0 unless mask.kind is SLIDING_WINDOW"},
      {"num_heads: 4 head_dim: 64 q_len: 4 scale: -1", "scale (-1) must be finite and > 0"},
      {"num_heads: 4 head_dim: 64 q_len: 4 softcap: -2", "softcap (-2) must be finite and >= 0"},
      {"num_heads: 4 head_dim: 64 q_len: 4 batch: 2 kv_lengths: 3",
       "kv_lengths has 1 entries; it must be empty or have one per batch entry (2)"},
      {"num_heads: 4 head_dim: 64 q_len: 4 kv_lengths: 5",
       "kv_lengths[0] (5) must be in [0, kv_len (4)]"},
      {"num_heads: 4 head_dim: 64 q_len: 2000000000 batch: 2000000000", "overflows 64 bits"},
      // Found by the config fuzzer: the default model_dim overflowed.
      {"num_heads: 3 head_dim: 9223372036854775807 q_len: 1",
       "head_dim (9223372036854775807) must be in [1, 1024]"},
      {"num_heads: 4 head_dim: 64 q_len: 4 memory_budget_bytes: -1",
       "memory_budget_bytes (-1) must be >= 1"},
  };
  for (const Case& c : cases) {
    auto p = FromText(c.text);
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(c.message)) << c.text;
  }
}

TEST(ProblemTest, ParseErrorsGiveLineAndColumn) {
  auto config = ParseConfigText("num_heads: 4\nhead_dim: 64\nwidht: 3\n", "cfg.textproto");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("cfg.textproto: line 3, column 6: Message type \"attnkit.AttentionConfig\" "
                        "has no field named \"widht\""));
}

TEST(ProblemTest, ConfigRoundTrips) {
  auto p = FromText(
      "num_heads: 8 num_kv_heads: 2 head_dim: 32 q_len: 5 kv_len: 9 batch: 2 "
      "mask { kind: SLIDING_WINDOW window_left: 3 window_right: 1 } alignment: TOP_LEFT "
      "kv_lengths: [9, 4] softcap: 2 dtype: BF16 kv_dtype: F16 layout: BTHD return_lse: true");
  ASSERT_TRUE(p.ok()) << p.status();
  auto back = ProblemFromConfig(ConfigFromProblem(*p));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Id(), p->Id());
  EXPECT_EQ(p->Id(), "gqa_h8_g2_q5_k9_d32_b2_window3x1_tl_pad_cap_bthd_lse_bf16_kvf16");
}

// VisibleKeys against the definition, and ClassifyTile against brute force.
TEST(MaskTest, RangesAndTilesMatchTheDefinition) {
  for (int64_t q_len : {1, 3, 8}) {
    for (int64_t kv_length : {0, 1, 5, 8, 13}) {
      for (int64_t left : {-1, 0, 2}) {
        for (int64_t right : {-1, 0, 1}) {
          for (bool br : {false, true}) {
            MaskParams m{left, right, br, q_len};
            const int64_t off = br ? kv_length - q_len : 0;
            auto visible = [&](int64_t i, int64_t j) {
              return (left < 0 || j >= i + off - left) && (right < 0 || j <= i + off + right) &&
                     j >= 0 && j < kv_length;
            };
            for (int64_t i = 0; i < q_len; ++i) {
              const KeyRange r = VisibleKeys(m, i, kv_length);
              for (int64_t j = 0; j < 16; ++j) {
                EXPECT_EQ(j >= r.begin && j < r.end, visible(i, j));
              }
            }
            for (int64_t q0 = 0; q0 < q_len; ++q0) {
              for (int64_t q1 = q0 + 1; q1 <= q_len; ++q1) {
                for (int64_t k0 = 0; k0 < 14; k0 += 3) {
                  const int64_t k1 = k0 + 3;
                  bool any = false, all = true;
                  for (int64_t i = q0; i < q1; ++i) {
                    for (int64_t j = k0; j < k1; ++j) {
                      any |= visible(i, j);
                      all &= visible(i, j);
                    }
                  }
                  const TileVisibility t = ClassifyTile(m, kv_length, q0, q1, k0, k1);
                  if (t == TileVisibility::kHidden) {
                    EXPECT_FALSE(any);
                  }
                  if (t == TileVisibility::kVisible) {
                    EXPECT_TRUE(all);
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(ProblemTest, VisiblePairsAreExact) {
  auto p = FromText("num_heads: 2 head_dim: 8 q_len: 10 mask { kind: CAUSAL }");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(CountVisiblePairs(*p), 2 * 55);
  EXPECT_DOUBLE_EQ(UsefulFlops(*p), 4.0 * 8 * 110);
  p = FromText(
      "num_heads: 1 head_dim: 8 q_len: 2 kv_len: 6 mask { kind: CAUSAL } "
      "alignment: BOTTOM_RIGHT batch: 2 kv_lengths: [6, 1]");
  ASSERT_TRUE(p.ok());
  // Sequence 0: rows see 5 and 6 keys; sequence 1 (1 key): row 0 sees none, row 1 sees 1.
  EXPECT_EQ(CountVisiblePairs(*p), 5 + 6 + 0 + 1);
}

// Buffers over the budget are refused before anything is allocated.
TEST(ProblemTest, MemoryBudgetIsCheckedBeforeAllocation) {
  AttentionProblem p = BasicProblem(1, 2, 1, 4, 8, 16);
  p.return_lse = p.blocked_mask = true;
  // Q, O: 2*4*16 f32 each; K, V: 8*16 f32 each; LSE 2*4 f32; mask 2*4*8 u8.
  const int64_t bytes = 2 * 128 * 4 + 2 * 128 * 4 + 8 * 4 + 64;
  auto computed = ProblemBytes(p);
  ASSERT_TRUE(computed.ok());
  EXPECT_EQ(*computed, bytes);
  p.memory_budget_bytes = bytes;
  EXPECT_TRUE(CheckMemoryBudget(p).ok());
  p.memory_budget_bytes = bytes - 1;
  const absl::Status s = CheckMemoryBudget(p);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("more than memory_budget_bytes"));
  // 2^31 tokens x 65536 heads x 1024 dims: a valid shape, far over budget.
  AttentionProblem huge = BasicProblem(1, 65536, 1, int64_t{1} << 31, int64_t{1} << 31, 1024);
  ASSERT_TRUE(ValidateProblem(huge).ok());
  EXPECT_EQ(CheckMemoryBudget(huge).code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace attnkit
