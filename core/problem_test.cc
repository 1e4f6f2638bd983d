#include "core/problem.h"

#include <cmath>

#include "core/problem_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/config_io.h"

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
      {"num_heads: 4 head_dim: 64 q_len: 4 backward: true page_size: 16",
       "backward (true) needs dense K/V; page_size (16) must be 0"},
      {"num_heads: 4 head_dim: 64 q_len: 4 backward: true kv_dtype: INT8",
       "kv_dtype i8 has no gradient"},
      {"num_heads: 4 head_dim: 64 q_len: 4 backward: true compute: FAST kv_dtype: BF16",
       "compute (FAST) with backward (true) needs dtype (f32) equal to kv_dtype (bf16)"},
  };
  for (const Case& c : cases) {
    auto p = FromText(c.text);
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(c.message)) << c.text;
  }
}

// A training step's problem: return_lse comes with it, the id says _bwd,
// and its useful FLOPs are 2.5x the forward's.
TEST(ProblemTest, BackwardImpliesLseAndEndsTheId) {
  auto p = FromText("num_heads: 4 head_dim: 16 q_len: 8 mask { kind: CAUSAL } backward: true");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->backward);
  EXPECT_TRUE(p->return_lse);
  EXPECT_THAT(p->Id(), ::testing::EndsWith("_lse_f32_bwd"));
  EXPECT_DOUBLE_EQ(UsefulBackwardFlops(*p), 2.5 * UsefulFlops(*p));
  EXPECT_TRUE(ConfigFromProblem(*p).backward());
  AttentionProblem no_lse = *p;
  no_lse.return_lse = false;
  EXPECT_THAT(std::string(ValidateProblem(no_lse).message()), HasSubstr("needs return_lse"));
  // FAST training steps: one dtype for Q and K/V (FastRoundsGradOperands).
  auto fast =
      FromText("num_heads: 4 head_dim: 16 q_len: 8 dtype: BF16 backward: true compute: FAST");
  ASSERT_TRUE(fast.ok()) << fast.status();
  EXPECT_THAT(fast->Id(), ::testing::EndsWith("_bf16_bwd_fast"));
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

// A ragged batch over packed K/V: 3 sequences with 2, 0 and 4 queries and
// 9, 4 and 0 keys (q_len 4, kv_len 9), GQA 4/2, d 8, token-major.
AttentionProblem RaggedProblem() {
  AttentionProblem p = BasicProblem(3, 4, 2, 4, 9, 8);
  p.layout = Layout::kBTHD;
  p.q_lengths = {2, 0, 4};
  p.kv_lengths = {9, 4, 0};
  return p;
}

// A decode step over a paged int8 cache: 2 sequences of 40 and 17 keys in a
// pool of 5 pages of 16 (max_pages = 3).
AttentionProblem PagedInt8Problem() {
  AttentionProblem p = BasicProblem(2, 4, 2, 1, 40, 8);
  p.kv_dtype = DType::kI8;
  p.page_size = 16;
  p.num_pages = 5;
  p.kv_lengths = {40, 17};
  return p;
}

TEST(ProblemTest, PagedRaggedAndInt8ProblemsAreValid) {
  EXPECT_TRUE(ValidateProblem(RaggedProblem()).ok()) << ValidateProblem(RaggedProblem());
  EXPECT_TRUE(ValidateProblem(PagedInt8Problem()).ok()) << ValidateProblem(PagedInt8Problem());
  AttentionProblem both = RaggedProblem();  // ragged over a paged pool, int8
  both.page_size = 16;
  both.num_pages = 2;
  both.kv_dtype = DType::kI8;
  both.mask = MaskKind::kCausal;
  both.alignment = Alignment::kBottomRight;
  EXPECT_TRUE(ValidateProblem(both).ok()) << ValidateProblem(both);
  both.kv_lengths = {0, 0, 0};  // a paged pool has rows whatever the lengths
  EXPECT_TRUE(ValidateProblem(both).ok()) << ValidateProblem(both);
  for (int64_t page : {16, 32, 64, 128, 256}) {
    AttentionProblem p = PagedInt8Problem();
    p.page_size = page;
    EXPECT_TRUE(ValidateProblem(p).ok()) << page;
  }
  EXPECT_TRUE(PagedInt8Problem().is_paged());
  EXPECT_FALSE(PagedInt8Problem().is_ragged());
  EXPECT_TRUE(RaggedProblem().is_ragged());
  EXPECT_FALSE(RaggedProblem().is_paged());
}

// Each rule of paging, ragged batches and int8 K/V, by the message it gives.
TEST(ProblemTest, PagedRaggedAndInt8ErrorsNameFieldValueAndRule) {
  struct Case {
    std::string what;
    AttentionProblem p;
    std::string message;
  };
  std::vector<Case> cases;
  auto add = [&](const std::string& what, AttentionProblem p, const std::string& message) {
    cases.push_back({what, std::move(p), message});
  };
  AttentionProblem p = PagedInt8Problem();
  p.page_size = 8;
  add("page below 16", p, "page_size (8) must be in [16, 256]");
  p.page_size = 512;
  add("page above 256", p, "page_size (512) must be in [16, 256]");
  p.page_size = 48;
  add("page not a power of two", p, "page_size (48) must be a power of two");
  p.page_size = -16;
  add("negative page", p, "page_size (-16) must be in [16, 256]");
  p = PagedInt8Problem();
  p.num_pages = 0;
  add("paged without pages", p, "num_pages (0) must be in [1, 2147483648]");
  p.num_pages = -3;
  add("negative pages", p, "num_pages (-3) must be in [1,");
  p = BasicProblem(1, 2, 1, 3, 5, 8);
  p.num_pages = 3;
  add("pages without page_size", p, "num_pages (3) must be 0 unless page_size is set (paged K/V)");
  // Poison draws into dense float K/V only.
  const std::string poison = "poison_blocked and nonfinite_inputs draw into dense float K/V only";
  p = PagedInt8Problem();
  p.kv_dtype = DType::kF32;
  p.poison_blocked = true;
  add("poison, paged", p, poison);
  p = RaggedProblem();
  p.nonfinite_inputs = 3;
  add("nonfinite, ragged", p, poison);
  p = BasicProblem(1, 2, 1, 3, 5, 8);
  p.kv_dtype = DType::kI8;
  p.poison_blocked = true;
  add("poison, int8", p, poison);
  // Ragged batches.
  p = RaggedProblem();
  p.q_lengths = {2, 1};
  add("q_lengths short", p, "q_lengths has 2 entries; a ragged batch needs one per sequence (3)");
  p.q_lengths = {2, 5, 0};
  add("q_lengths over q_len", p, "q_lengths[1] (5) must be in [0, q_len (4)]");
  p.q_lengths = {2, 0, -1};
  add("q_lengths negative", p, "q_lengths[2] (-1) must be in [0, q_len (4)]");
  p = RaggedProblem();
  p.q_lengths = {0, 0, 0};
  add("no queries at all", p, "q_lengths are all 0; a ragged batch needs at least one query");
  p = RaggedProblem();
  p.kv_lengths = {0, 0, 0};
  add("packed, no keys at all", p,
      "kv_lengths are all 0; a ragged batch with packed K/V needs at least one key");
  p = RaggedProblem();
  p.kv_lengths.clear();
  add("ragged without kv_lengths", p,
      "a ragged batch (q_lengths) needs kv_lengths: each sequence's key count");
  p = RaggedProblem();
  p.layout = Layout::kBHTD;
  add("ragged BHTD", p, "a ragged batch (q_lengths) needs layout BTHD");
  p = RaggedProblem();
  p.blocked_mask = true;
  add("ragged dense mask", p, "a ragged batch (q_lengths) takes no blocked_mask or additive_bias");
  p = RaggedProblem();
  p.additive_bias = true;
  add("ragged bias", p, "a ragged batch (q_lengths) takes no blocked_mask or additive_bias");
  // int8 stores K and V only; i32 and u8 store neither.
  const std::string dtypes =
      "dtype must be F32, F16 or BF16, and kv_dtype F32, F16, BF16, INT8, FP8_E4M3 or "
      "FP8_E5M2";
  p = BasicProblem(1, 2, 1, 3, 5, 8);
  p.dtype = DType::kI8;
  add("int8 queries", p, dtypes);
  p = BasicProblem(1, 2, 1, 3, 5, 8);
  p.kv_dtype = DType::kI32;
  add("i32 K/V", p, dtypes);
  p.kv_dtype = DType::kU8;
  add("u8 K/V", p, dtypes);
  for (const Case& c : cases) {
    const absl::Status s = ValidateProblem(c.p);
    ASSERT_FALSE(s.ok()) << c.what;
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message)) << c.what;
  }
}

// Packed token counts: TotalQ = sum of q_lengths, TotalK = sum of kv_lengths.
TEST(ProblemTest, TotalsCountPackedTokens) {
  const AttentionProblem r = RaggedProblem();
  EXPECT_EQ(r.TotalQ(), 2 + 0 + 4);
  EXPECT_EQ(r.TotalK(), 9 + 4 + 0);
  EXPECT_EQ(r.QLength(1), 0);
  AttentionProblem dense = BasicProblem(3, 4, 2, 4, 9, 8);
  EXPECT_EQ(dense.TotalQ(), 3 * 4);
  EXPECT_EQ(dense.TotalK(), 3 * 9);
  EXPECT_EQ(dense.QLength(2), 4);
  dense.kv_lengths = {1, 2, 3};
  EXPECT_EQ(dense.TotalK(), 6);
  const AttentionProblem paged = PagedInt8Problem();
  EXPECT_EQ(paged.max_pages(), 3);  // ceil(40 / 16)
  EXPECT_EQ(dense.max_pages(), 0);
}

TEST(ProblemTest, BytesOfRaggedAndPagedProblems) {
  AttentionProblem r = RaggedProblem();
  r.return_lse = true;
  // Q, O: 6 tokens x 4 heads x 8 f32 each; K, V: 13 tokens x 2 heads x 8 f32
  // each; LSE [4, 6]; kv_lengths [3]; cu_seqlens_q and _k [4] i32 each.
  EXPECT_EQ(*ProblemBytes(r),
            2 * 6 * 4 * 8 * 4 + 2 * 13 * 2 * 8 * 4 + 6 * 4 * 4 + 3 * 4 + 2 * 4 * 4);
  // The whole pool counts, used or not: Q, O [2, 4, 1, 8] f32 each; K, V
  // pools [5, 16, 2, 8] i8 each; their scales [5, 16, 2] f32 each;
  // kv_lengths [2]; block table [2, 3] i32.
  const AttentionProblem paged = PagedInt8Problem();
  EXPECT_EQ(*ProblemBytes(paged),
            2 * 2 * 4 * 8 * 4 + 2 * 5 * 16 * 2 * 8 + 2 * 5 * 16 * 2 * 4 + 2 * 4 + 2 * 3 * 4);
  // Ragged over pages: the pool instead of packed K/V, and cu_seqlens_q only
  // (no cu_seqlens_k): Q, O as above; pools [4, 16, 2, 8] f32 each;
  // kv_lengths [3]; block table [3, 1]; cu_seqlens_q [4].
  AttentionProblem rp = RaggedProblem();
  rp.page_size = 16;
  rp.num_pages = 4;
  EXPECT_EQ(*ProblemBytes(rp), 2 * 6 * 4 * 8 * 4 + 2 * 4 * 16 * 2 * 8 * 4 + 3 * 4 + 3 * 4 + 4 * 4);
  AttentionProblem bigger = paged;
  bigger.num_pages = 6;  // one more page: 16 rows of K and V (8 bytes + scale 4, 2 heads)
  EXPECT_EQ(*ProblemBytes(bigger) - *ProblemBytes(paged), 2 * 16 * 2 * (8 + 4));
  // A pool past the budget is refused before anything is allocated.
  bigger.num_pages = int64_t{1} << 31;
  bigger.page_size = 256;
  bigger.memory_budget_bytes = int64_t{1} << 30;
  ASSERT_TRUE(ValidateProblem(bigger).ok());
  EXPECT_EQ(CheckMemoryBudget(bigger).code(), absl::StatusCode::kResourceExhausted);
}

// K/V bytes read: the union of every sequence's visible keys (a sequence
// without queries reads none), times K and V, KV heads and the row size.
TEST(ProblemTest, KvBytesReadCountsVisibleKeysPerSequence) {
  AttentionProblem p = BasicProblem(2, 4, 2, 1, 10, 8);
  p.kv_lengths = {10, 4};
  // Decode sees every key: 10 + 4 keys x 2 (K, V) x 2 heads x 8 f32.
  EXPECT_EQ(KvBytesRead(p), 14 * 2 * 2 * 32);
  p.kv_dtype = DType::kBF16;
  EXPECT_EQ(KvBytesRead(p), 14 * 2 * 2 * 16);
  p.kv_dtype = DType::kI8;  // 8 bytes + the f32 scale
  EXPECT_EQ(KvBytesRead(p), 14 * 2 * 2 * (8 + 4));
  // Paging moves the rows, not their number: pages shared between the two
  // sequences (2 pages for 3 needed) still count once per sequence.
  p.page_size = 16;
  p.num_pages = 2;
  EXPECT_EQ(KvBytesRead(p), 14 * 2 * 2 * (8 + 4));
  // A window of 2 behind the bottom-right diagonal over 3 queries: sequence
  // 0's rows see [5, 8), [6, 9), [7, 10): keys 5..9; sequence 1's (4 keys)
  // see [0, 2), [0, 3), [1, 4): keys 0..3.
  p = BasicProblem(2, 4, 2, 3, 10, 8);
  p.kv_lengths = {10, 4};
  p.mask = MaskKind::kSlidingWindow;
  p.window_left = 2;
  p.alignment = Alignment::kBottomRight;
  EXPECT_EQ(KvBytesRead(p), (5 + 4) * 2 * 2 * 32);
  // Ragged: sequence 1 has keys but no queries, sequence 2 queries but no
  // keys; only sequence 0's keys (its 2 rows see 8 + 9 keys) are read.
  AttentionProblem r = RaggedProblem();
  r.mask = MaskKind::kCausal;
  r.alignment = Alignment::kBottomRight;
  EXPECT_EQ(KvBytesRead(r), 9 * 2 * 2 * 32);
  r.q_lengths = {0, 0, 4};
  EXPECT_EQ(KvBytesRead(r), 0);
}

// A value head dim of its own (config.proto value_head_dim): unset or equal
// is head_dim (one form, one id); V and O take Ev in bytes, K/V reads and
// FLOPs; out of range names the field.
TEST(ProblemTest, ValueHeadDimCountsVAndOWithItsOwnDim) {
  auto p = FromText(
      "num_heads: 16 num_kv_heads: 1 head_dim: 576 value_head_dim: 512 q_len: 1 "
      "kv_len: 10 dtype: BF16");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->value_dim(), 512);
  EXPECT_TRUE(p->has_value_dim());
  EXPECT_FLOAT_EQ(p->scale, static_cast<float>(1.0 / std::sqrt(576.0)));  // E's, as PyTorch's
  EXPECT_EQ(p->Id(), "mqa_h16_g1_q1_k10_d576_dv512_none_bf16");
  // Q [16, 576], O [16, 512]; K [10, 576], V [10, 512]; bf16.
  EXPECT_EQ(*ProblemBytes(*p), 16 * (576 + 512) * 2 + 10 * (576 + 512) * 2);
  EXPECT_EQ(KvBytesRead(*p), 10 * (576 + 512) * 2);
  EXPECT_DOUBLE_EQ(UsefulFlops(*p), 2.0 * (576 + 512) * 16 * 10);
  EXPECT_DOUBLE_EQ(UsefulBackwardFlops(*p), 2.0 * (3 * 576 + 2 * 512) * 16 * 10);
  p->kv_dtype = DType::kI8;  // each row's scale, for K and for V
  EXPECT_EQ(KvBytesRead(*p), 10 * ((576 + 512) + 8));

  auto same = FromText("num_heads: 2 head_dim: 64 value_head_dim: 64 q_len: 4");
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->value_head_dim, 0);
  EXPECT_FALSE(same->has_value_dim());
  EXPECT_EQ(same->Id(), FromText("num_heads: 2 head_dim: 64 q_len: 4")->Id());
  EXPECT_DOUBLE_EQ(UsefulBackwardFlops(*same), 2.5 * UsefulFlops(*same));

  auto bad = FromText("num_heads: 2 head_dim: 64 value_head_dim: 2000 q_len: 4");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("value_head_dim (2000) must be in [1, 1024]"));
  bad = FromText("num_heads: 2 head_dim: 64 value_head_dim: -3 q_len: 4");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("value_head_dim (-3)"));
}

// Each ragged sequence aligns its causal diagonal to its own query count.
TEST(ProblemTest, VisiblePairsOfARaggedBatchAlignPerSequence) {
  AttentionProblem p = BasicProblem(4, 2, 1, 4, 6, 8);
  p.layout = Layout::kBTHD;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.q_lengths = {4, 1, 0, 2};
  p.kv_lengths = {6, 5, 3, 1};
  ASSERT_TRUE(ValidateProblem(p).ok()) << ValidateProblem(p);
  // Sequence 0: rows see 3, 4, 5, 6 keys; 1 (one query, 5 keys): all 5;
  // 2: no queries; 3 (2 queries, 1 key): row 0 sees none, row 1 the key.
  // Aligned to q_len (4) instead, sequence 1's one row would see 2 keys.
  EXPECT_EQ(CountVisiblePairs(p), 2 * ((3 + 4 + 5 + 6) + 5 + 0 + (0 + 1)));
  EXPECT_EQ(p.mask_params(1).q_len, 1);
  EXPECT_EQ(p.mask_params(0).q_len, 4);
  // Paging does not change what is visible.
  AttentionProblem paged = p;
  paged.page_size = 16;
  paged.num_pages = 1;
  EXPECT_EQ(CountVisiblePairs(paged), CountVisiblePairs(p));
}

TEST(ProblemTest, IdsNameRaggedAndPagedProblems) {
  EXPECT_EQ(RaggedProblem().Id(), "gqa_h4_g2_q4_k9_d8_b3_none_ragged_bthd_f32");
  EXPECT_EQ(PagedInt8Problem().Id(), "gqa_h4_g2_q1_k40_d8_b2_none_pad_paged16_f32_kvi8");
}

TEST(ProblemTest, PagedRaggedInt8ConfigRoundTrips) {
  auto p = FromText(
      "num_heads: 8 num_kv_heads: 2 head_dim: 16 q_len: 5 kv_len: 70 batch: 3 "
      "mask { kind: CAUSAL } alignment: BOTTOM_RIGHT layout: BTHD kv_dtype: INT8 "
      "page_size: 32 q_lengths: [5, 0, 1] kv_lengths: [70, 3, 0] return_lse: true");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->page_size, 32);
  EXPECT_EQ(p->num_pages, 3 * 3) << "unset num_pages: batch * ceil(kv_len / page_size)";
  EXPECT_EQ(p->q_lengths, (std::vector<int64_t>{5, 0, 1}));
  EXPECT_EQ(p->kv_dtype, DType::kI8);
  EXPECT_EQ(p->dtype, DType::kF32);
  const AttentionConfig c = ConfigFromProblem(*p);
  EXPECT_EQ(c.page_size(), 32);
  EXPECT_EQ(c.num_pages(), 9);
  EXPECT_EQ(c.kv_dtype(), INT8);
  ASSERT_EQ(c.q_lengths_size(), 3);
  EXPECT_EQ(c.q_lengths(2), 1);
  auto back = ProblemFromConfig(ParseConfigText(ConfigToText(c), "round trip").value());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Id(), p->Id());
  EXPECT_EQ(back->num_pages, 9);
  EXPECT_EQ(back->q_lengths, p->q_lengths);
  EXPECT_EQ(back->kv_lengths, p->kv_lengths);
  // An explicit num_pages is kept (here fewer than the sequences need).
  p = FromText("num_heads: 2 head_dim: 16 q_len: 1 kv_len: 64 batch: 2 page_size: 16 num_pages: 5");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->num_pages, 5);
  EXPECT_EQ(ProblemFromConfig(ConfigFromProblem(*p))->num_pages, 5);
  // A dense problem stays dense.
  p = FromText("num_heads: 2 head_dim: 16 q_len: 3");
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->is_paged() || p->is_ragged());
  EXPECT_EQ(ConfigToText(ConfigFromProblem(*p)).find("page"), std::string::npos);
}

TEST(ProblemTest, PagedAndRaggedConfigErrors) {
  struct Case {
    std::string text, message;
  };
  const Case cases[] = {
      {"num_heads: 2 head_dim: 8 q_len: 1 kv_len: 64 page_size: 8",
       "page_size (8) must be in [16, 256]"},
      {"num_heads: 2 head_dim: 8 q_len: 1 kv_len: 64 page_size: 24",
       "page_size (24) must be a power of two"},
      {"num_heads: 2 head_dim: 8 q_len: 1 kv_len: 64 num_pages: 4",
       "num_pages (4) must be 0 unless page_size is set"},
      {"num_heads: 2 head_dim: 8 q_len: 1 kv_len: 64 page_size: 16 num_pages: -1",
       "num_pages (-1) must be in [1,"},
      {"num_heads: 2 head_dim: 8 q_len: 2 batch: 2 layout: BTHD q_lengths: [1, 1]",
       "needs kv_lengths"},
      {"num_heads: 2 head_dim: 8 q_len: 2 batch: 2 kv_lengths: [2, 2] q_lengths: [1, 1]",
       "needs layout BTHD"},
      {"num_heads: 2 head_dim: 8 q_len: 2 kv_lengths: [2] q_lengths: [3] layout: BTHD",
       "q_lengths[0] (3) must be in [0, q_len (2)]"},
      {"num_heads: 2 head_dim: 8 q_len: 2 dtype: INT8", "dtype must be F32, F16 or BF16"},
      {"num_heads: 2 head_dim: 8 q_len: 2 kv_dtype: INT8 poison_blocked: true",
       "poison_blocked and nonfinite_inputs draw into dense float K/V only"},
      // The default pool size multiplies batch and kv_len: ranges come first.
      {"num_heads: 2 head_dim: 8 q_len: 1 kv_len: 4294967296 page_size: 16",
       "kv_len (4294967296) must be in [1,"},
  };
  for (const Case& c : cases) {
    auto p = FromText(c.text);
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(c.message)) << c.text;
  }
}

}  // namespace
}  // namespace attnkit
