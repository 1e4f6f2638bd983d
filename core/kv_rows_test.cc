// KvRows: where row t of KV head g of sequence b lives, in a dense
// [B, G, Tk, d] tensor (either layout) or a paged pool [pages, page, G, d]
// read through a block table [B, max_pages] of any strides.
#include "core/kv_rows.h"

#include <cstdint>
#include <vector>

#include "core/problem.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace attnkit {
namespace {

TEST(KvRowsTest, DenseRowsAreTheViewsOwnOffsets) {
  // B 2, G 3, Tk 5, d 4; offsets only, so no storage is needed.
  AttentionProblem p = BasicProblem(2, 6, 3, 1, 5, 4);
  for (Layout layout : {Layout::kBHTD, Layout::kBTHD}) {
    static float storage[2 * 3 * 5 * 4];
    AttentionArgs a;
    a.k = AttentionView(storage, DType::kF32, layout, 2, 3, 5, 4);
    const KvRows rows(p, a);
    EXPECT_FALSE(rows.paged());
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t g = 0; g < 3; ++g) {
        for (int64_t t = 0; t < 5; ++t) {
          EXPECT_EQ(rows.Offset(a.k, b, g, t), a.k.Offset(b, g, t, 0));
          // A dense run never ends: rows are evenly spaced by the T stride.
          EXPECT_GE(rows.RunLength(t), int64_t{1} << 40);
        }
      }
    }
    EXPECT_EQ(KvRows::RowStride(a.k, false), layout == Layout::kBHTD ? 4 : 3 * 4);
    // Scales [B, G, Tk] (rank 3).
    TensorView scale = ContiguousView(storage, DType::kF32, {2, 3, 5});
    EXPECT_EQ(rows.ScaleOffset(scale, 1, 2, 3), (1 * 3 + 2) * 5 + 3);
  }
}

// Pool [6 pages, 16, G 2, d 4]; sequence 0 uses pages 4, 0, 2 and sequence 1
// pages 5, 1 (entry 2 unused, -1).
TEST(KvRowsTest, PagedRowsFollowTheBlockTable) {
  AttentionProblem p = BasicProblem(2, 4, 2, 1, 40, 4);
  p.page_size = 16;
  p.num_pages = 6;
  p.kv_lengths = {40, 20};
  ASSERT_TRUE(ValidateProblem(p).ok());
  ASSERT_EQ(p.max_pages(), 3);
  const int64_t kPages = 6, kPage = 16, G = 2, d = 4;
  const int32_t table[2][3] = {{4, 0, 2}, {5, 1, -1}};
  // Row-major table, and the same entries column-major ([3, 2] transposed):
  // only the strides differ.
  int32_t column_major[3][2];
  for (int b = 0; b < 2; ++b) {
    for (int j = 0; j < 3; ++j) column_major[j][b] = table[b][j];
  }
  static uint16_t pool[6 * 16 * 2 * 4];  // bf16: offsets are in elements
  const TensorView kv = ContiguousView(pool, DType::kBF16, {kPages, kPage, G, d});
  const TensorView scale = ContiguousView(pool, DType::kF32, {kPages, kPage, G});
  for (bool transposed : {false, true}) {
    AttentionArgs a;
    a.k = kv;
    if (transposed) {
      a.block_table = ContiguousView(column_major, DType::kI32, {3, 2});
      a.block_table.shape = {2, 3, 0, 0};
      a.block_table.strides = {1, 2, 0, 0};
    } else {
      a.block_table = ContiguousView(const_cast<int32_t*>(&table[0][0]), DType::kI32, {2, 3});
    }
    const KvRows rows(p, a);
    ASSERT_TRUE(rows.paged());
    EXPECT_EQ(rows.page_size(), 16);
    EXPECT_EQ(KvRows::RowStride(kv, true), G * d);
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t t = 0; t < p.kv_lengths[b]; ++t) {
        const int64_t page = table[b][t / kPage];
        for (int64_t g = 0; g < G; ++g) {
          const int64_t row = page * kPage + t % kPage;
          EXPECT_EQ(rows.Offset(kv, b, g, t), (row * G + g) * d) << b << " " << t;
          EXPECT_EQ(rows.ScaleOffset(scale, b, g, t), row * G + g) << b << " " << t;
        }
        // A run ends at the page's end; within it rows are RowStride apart.
        const int64_t run = rows.RunLength(t);
        EXPECT_EQ(run, kPage - t % kPage);
        if (t + run - 1 < p.kv_lengths[b]) {
          EXPECT_EQ(rows.Offset(kv, b, 0, t + run - 1),
                    rows.Offset(kv, b, 0, t) + (run - 1) * KvRows::RowStride(kv, true));
        }
      }
    }
    // Spot checks by hand: sequence 0's key 17 is row 1 of page 0; sequence
    // 1's key 16 is row 0 of page 1.
    EXPECT_EQ(rows.Offset(kv, 0, 1, 17), kv.Offset(0, 1, 1, 0));
    EXPECT_EQ(rows.Offset(kv, 1, 0, 16), kv.Offset(1, 0, 0, 0));
    EXPECT_EQ(rows.Offset(kv, 0, 0, 39), kv.Offset(2, 7, 0, 0));
  }
}

}  // namespace
}  // namespace attnkit
