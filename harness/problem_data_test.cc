// ProblemData::Random for paged, ragged and int8 problems: block tables in
// range with distinct pages (shared only when the pool is too small), -1 in
// unused entries, NaN in every pool row nobody reads, offsets that match the
// lengths, and int8 rows with finite scales (harness/problem_data.h).
#include "harness/problem_data.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace attnkit {
namespace {

int32_t Entry(const ProblemData& data, const AttentionProblem& p, int64_t b, int64_t j) {
  return static_cast<const int32_t*>(data.block_table.data())[b * p.max_pages() + j];
}

int64_t UsedPages(const AttentionProblem& p, int64_t b) {
  return (p.KvLength(b) + p.page_size - 1) / p.page_size;
}

// True for every pool row (page * page_size + r) some sequence reads.
std::vector<bool> ReadRows(const ProblemData& data, const AttentionProblem& p) {
  std::vector<bool> read(static_cast<size_t>(p.num_pages * p.page_size), false);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t t = 0; t < p.KvLength(b); ++t) {
      read[Entry(data, p, b, t / p.page_size) * p.page_size + t % p.page_size] = true;
    }
  }
  return read;
}

// Every element of pool row r (all KV heads) of k and v is NaN when the row
// is unread and finite when it is read; for int8, the same of the scales.
void ExpectNaNExactlyInUnreadRows(const ProblemData& data, const AttentionProblem& p) {
  const std::vector<bool> read = ReadRows(data, p);
  const int64_t G = p.num_kv_heads, d = p.head_dim;
  int64_t unread = 0;
  for (size_t r = 0; r < read.size(); ++r) {
    unread += read[r] ? 0 : 1;
    const int64_t page = static_cast<int64_t>(r) / p.page_size, row = r % p.page_size;
    for (int64_t g = 0; g < G; ++g) {
      if (p.kv_dtype == DType::kI8) {
        for (const Tensor* s : {&data.k_scale, &data.v_scale}) {
          const float x = s->view().LoadF32(s->view().Offset(page, row, g));
          ASSERT_EQ(std::isnan(x), !read[r]) << "scale of row " << r << " head " << g;
          if (read[r]) {
            ASSERT_TRUE(std::isfinite(x) && x > 0) << x;
          }
        }
        continue;
      }
      for (const Tensor* t : {&data.k, &data.v}) {
        for (int64_t c = 0; c < d; ++c) {
          const float x = t->view().LoadF32(t->view().Offset(page, row, g, c));
          ASSERT_EQ(std::isnan(x), !read[r]) << "row " << r << " head " << g << " c " << c;
        }
      }
    }
  }
  EXPECT_GT(unread, 0) << "the test needs unread rows to say anything";
}

// 3 sequences of 50, 17 and 0 keys in pages of 16 (4, 2 and 0 pages used of
// max_pages 4), in a pool of 9: room for every sequence's own pages.
AttentionProblem Paged(DType kv_dtype) {
  AttentionProblem p = BasicProblem(3, 4, 2, 1, 50, 8);
  p.kv_dtype = kv_dtype;
  p.page_size = 16;
  p.num_pages = 9;
  p.kv_lengths = {50, 17, 0};
  return p;
}

TEST(ProblemDataTest, PagedTablesUseDistinctPagesOfThePool) {
  for (DType kv : {DType::kF32, DType::kBF16, DType::kF16, DType::kI8}) {
    for (uint64_t seed : {1, 2, 3}) {
      const AttentionProblem p = Paged(kv);
      SCOPED_TRACE(p.Id());
      auto data = ProblemData::Random(p, seed);
      ASSERT_TRUE(data.ok()) << data.status();
      ASSERT_TRUE(ValidateArgs(p, data->args()).ok()) << ValidateArgs(p, data->args());
      ASSERT_TRUE(ValidateHostIndexTensors(p, data->args()).ok());
      std::set<int32_t> pages;
      int64_t used_total = 0;
      for (int64_t b = 0; b < p.batch; ++b) {
        for (int64_t j = 0; j < p.max_pages(); ++j) {
          const int32_t e = Entry(*data, p, b, j);
          if (j >= UsedPages(p, b)) {
            EXPECT_EQ(e, -1) << "unused entry [" << b << ", " << j << "]";
            continue;
          }
          EXPECT_GE(e, 0);
          EXPECT_LT(e, p.num_pages);
          pages.insert(e);
          ++used_total;
        }
      }
      EXPECT_EQ(used_total, 4 + 2 + 0);
      EXPECT_EQ(static_cast<int64_t>(pages.size()), used_total) << "no page is shared";
      ExpectNaNExactlyInUnreadRows(*data, p);
    }
  }
}

// Pages are shuffled: over a few seeds the table is not the identity and
// not always the same.
TEST(ProblemDataTest, PagedTablesAreShuffledBySeed) {
  const AttentionProblem p = Paged(DType::kF32);
  std::set<std::vector<int32_t>> tables;
  bool identity_every_time = true;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    auto data = ProblemData::Random(p, seed);
    ASSERT_TRUE(data.ok());
    std::vector<int32_t> t;
    for (int64_t j = 0; j < 4; ++j) t.push_back(Entry(*data, p, 0, j));
    identity_every_time &= t == std::vector<int32_t>{0, 1, 2, 3};
    tables.insert(t);
  }
  EXPECT_FALSE(identity_every_time);
  EXPECT_GT(tables.size(), 1u);
  auto a = ProblemData::Random(p, 9), b = ProblemData::Random(p, 9);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(Entry(*a, p, 0, j), Entry(*b, p, 0, j)) << "seeded";
}

// With fewer pages than the sequences need, later sequences share a prefix
// of sequence 0's pages; every other page is still distinct and in range.
TEST(ProblemDataTest, SmallPoolsSharePrefixPages) {
  // 2 x 64 keys and 1 x 40 keys: 4 + 4 + 3 = 11 pages needed, 7 in the pool.
  AttentionProblem p = BasicProblem(3, 2, 1, 3, 64, 16);
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.page_size = 16;
  p.num_pages = 7;
  p.kv_lengths = {64, 64, 40};
  for (DType kv : {DType::kF32, DType::kI8}) {
    p.kv_dtype = kv;
    for (uint64_t seed : {1, 5}) {
      auto data = ProblemData::Random(p, seed);
      ASSERT_TRUE(data.ok()) << data.status();
      ASSERT_TRUE(ValidateHostIndexTensors(p, data->args()).ok());
      // Entries of sequence b > 0 equal to sequence 0's at the same position
      // form a prefix; the rest are pages no other entry uses.
      std::map<int32_t, int> uses;
      int64_t shared = 0;
      for (int64_t b = 0; b < p.batch; ++b) {
        bool in_prefix = b > 0;
        for (int64_t j = 0; j < UsedPages(p, b); ++j) {
          const int32_t e = Entry(*data, p, b, j);
          ASSERT_GE(e, 0);
          ASSERT_LT(e, p.num_pages);
          in_prefix = in_prefix && e == Entry(*data, p, 0, j);
          if (in_prefix) {
            ++shared;
          } else {
            ++uses[e];
          }
        }
      }
      EXPECT_GE(shared, 11 - 7) << "at least the shortfall is shared";
      for (const auto& [page, n] : uses) EXPECT_EQ(n, 1) << "page " << page << " reused";
      ExpectNaNExactlyInUnreadRows(*data, p);
    }
  }
}

// Allocate's default table: sequence b's entry j is page b * max_pages + j
// (modulo the pool).
TEST(ProblemDataTest, AllocateGivesConsecutivePages) {
  const AttentionProblem p = Paged(DType::kF32);
  auto data = ProblemData::Allocate(p);
  ASSERT_TRUE(data.ok());
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t j = 0; j < p.max_pages(); ++j) {
      EXPECT_EQ(Entry(*data, p, b, j), (b * p.max_pages() + j) % p.num_pages);
    }
  }
  EXPECT_EQ(data->k.view().shape, (std::array<int64_t, 4>{9, 16, 2, 8}));
  EXPECT_EQ(data->block_table.view().shape[1], 4);
}

// Ragged: packed Q/O [total_q, H, d], LSE [H, total_q], cu_seqlens offsets;
// packed K/V [total_k, G, d] at cu_seqlens_k.
TEST(ProblemDataTest, RaggedTensorsArePackedWithOffsets) {
  AttentionProblem p = BasicProblem(4, 4, 2, 6, 30, 8);
  p.layout = Layout::kBTHD;
  p.q_lengths = {6, 0, 1, 1};
  p.kv_lengths = {30, 7, 0, 12};
  p.return_lse = true;
  for (DType kv : {DType::kF32, DType::kI8}) {
    p.kv_dtype = kv;
    auto data = ProblemData::Random(p, 3);
    ASSERT_TRUE(data.ok()) << data.status();
    const AttentionArgs a = data->args();
    EXPECT_TRUE(ValidateArgs(p, a).ok()) << ValidateArgs(p, a);
    EXPECT_TRUE(ValidateHostIndexTensors(p, a).ok()) << ValidateHostIndexTensors(p, a);
    const auto* cu_q = static_cast<const int32_t*>(data->cu_seqlens_q.data());
    const auto* cu_k = static_cast<const int32_t*>(data->cu_seqlens_k.data());
    EXPECT_EQ(std::vector<int32_t>(cu_q, cu_q + 5), (std::vector<int32_t>{0, 6, 6, 7, 8}));
    EXPECT_EQ(std::vector<int32_t>(cu_k, cu_k + 5), (std::vector<int32_t>{0, 30, 37, 37, 49}));
    EXPECT_EQ(a.q.rank, 3);
    EXPECT_EQ(a.q.shape[0], 8);
    EXPECT_EQ(a.k.shape[0], 49);
    EXPECT_EQ(a.lse.shape[0], 4);
    EXPECT_EQ(a.lse.shape[1], 8);
    EXPECT_TRUE(a.block_table.empty());
    // Every packed key is drawn (no NaN: nothing in a packed K is unread).
    const TensorView& drawn = kv == DType::kI8 ? a.k_scale : a.k;
    ForEachOffset(drawn, [&](int64_t off) { ASSERT_TRUE(std::isfinite(drawn.LoadF32(off))); });
  }
}

// int8 K/V: every row's scale finite and positive, values in [-127, 127]
// with +-127 in every row (the row's largest magnitude), in both layouts.
TEST(ProblemDataTest, Int8RowsAreQuantized) {
  for (Layout layout : {Layout::kBHTD, Layout::kBTHD}) {
    AttentionProblem p = BasicProblem(2, 4, 2, 3, 11, 16);
    p.layout = layout;
    p.kv_dtype = DType::kI8;
    p.dtype = DType::kBF16;
    auto data = ProblemData::Random(p, 8);
    ASSERT_TRUE(data.ok()) << data.status();
    const AttentionArgs a = data->args();
    ASSERT_TRUE(ValidateArgs(p, a).ok()) << ValidateArgs(p, a);
    std::set<float> scales;
    for (const auto& [kv, scale] :
         {std::make_pair(a.k, a.k_scale), std::make_pair(a.v, a.v_scale)}) {
      ASSERT_EQ(kv.dtype, DType::kI8);
      for (int64_t b = 0; b < 2; ++b) {
        for (int64_t g = 0; g < 2; ++g) {
          for (int64_t t = 0; t < 11; ++t) {
            const float s = scale.LoadF32(scale.Offset(b, g, t));
            ASSERT_TRUE(std::isfinite(s) && s > 0 && s <= 1.0f / 127 * (1 + 1e-6)) << s;
            scales.insert(s);
            int max_abs = 0;
            for (int64_t c = 0; c < 16; ++c) {
              const float x = kv.LoadF32(kv.Offset(b, g, t, c));
              ASSERT_GE(x, -127);
              max_abs = std::max(max_abs, static_cast<int>(std::fabs(x)));
            }
            EXPECT_EQ(max_abs, 127);
          }
        }
      }
    }
    EXPECT_GT(scales.size(), 40u) << "each row has its own scale";
  }
}

}  // namespace
}  // namespace attnkit
