// The shared __host__ __device__ tile schedule, checked on the CPU against a
// brute-force walk over every (query, key) pair: no visible pair is ever
// skipped, and a tile called fully visible has no hidden pair.
#include "backends/cuda/tile_schedule.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace attnkit {
namespace cuda {
namespace {

struct MaskCase {
  int64_t left, right;
  bool bottom_right;
};

TEST(QueriesOfRowsTest, PackedRows) {
  // group 4: rows 0..3 are query 0, rows 4..7 query 1.
  EXPECT_EQ(QueriesOfRows(0, 4, 4).first, 0);
  EXPECT_EQ(QueriesOfRows(0, 4, 4).end, 1);
  EXPECT_EQ(QueriesOfRows(2, 9, 4).first, 0);
  EXPECT_EQ(QueriesOfRows(2, 9, 4).end, 3);
  EXPECT_EQ(QueriesOfRows(64, 128, 1).first, 64);
  EXPECT_EQ(QueriesOfRows(64, 128, 1).end, 128);
}

TEST(SplitTilesTest, SplitsPartitionTheSpan) {
  for (int64_t n : {0, 1, 5, 31, 128}) {
    for (int splits : {1, 2, 3, 5, 32}) {
      const TileSpan span{7, 7 + n};
      int64_t next = span.begin;
      for (int s = 0; s < splits; ++s) {
        const TileSpan part = SplitTiles(span, splits, s);
        ASSERT_LE(part.begin, part.end);
        if (part.begin == part.end) continue;
        EXPECT_EQ(part.begin, next) << "n " << n << " splits " << splits << " split " << s;
        next = part.end;
      }
      EXPECT_EQ(next, span.end) << "n " << n << " splits " << splits;
    }
  }
}

TEST(KeyTileSpanTest, VisitsEveryVisiblePairAndClassifiesTilesSoundly) {
  const MaskCase masks[] = {{-1, -1, false}, {-1, 0, false}, {-1, 0, true},  {5, 0, true},
                            {3, 2, false},   {0, 0, true},   {20, 7, false}, {-1, 3, true}};
  const int64_t block_n = 16;
  for (const MaskCase& mc : masks) {
    for (int64_t q_len : {1, 7, 40}) {
      for (int64_t kv_len : {1, 16, 37, 100}) {
        for (int64_t kv_length : {int64_t{0}, kv_len / 2, kv_len}) {
          for (int64_t group : {1, 3, 4}) {
            MaskParams m;
            m.left = mc.left;
            m.right = mc.right;
            m.bottom_right = mc.bottom_right;
            m.q_len = q_len;
            const int64_t rows = q_len * group;
            for (int64_t block_m : {16, 64}) {
              for (int64_t r0 = 0; r0 < rows; r0 += block_m) {
                const int64_t r1 = std::min(r0 + block_m, rows);
                const QuerySpan qs = QueriesOfRows(r0, r1, group);
                const TileSpan span = KeyTileSpan(m, kv_length, qs.first, qs.end, block_n);
                SCOPED_TRACE(testing::Message()
                             << "mask (" << mc.left << "," << mc.right << "," << mc.bottom_right
                             << ") Tq " << q_len << " Tk " << kv_len << " len " << kv_length
                             << " group " << group << " rows [" << r0 << "," << r1 << ")");
                for (int64_t r = r0; r < r1; ++r) {
                  const int64_t i = r / group;
                  const KeyRange keys = VisibleKeys(m, i, kv_length);
                  for (int64_t j = keys.begin; j < keys.end; ++j) {
                    const int64_t t = j / block_n;
                    ASSERT_TRUE(t >= span.begin && t < span.end)
                        << "pair (" << i << "," << j << ") outside the tile span";
                    ASSERT_NE(ClassifyTile(m, kv_length, qs.first, qs.end, t * block_n,
                                           (t + 1) * block_n),
                              TileVisibility::kHidden)
                        << "visible pair (" << i << "," << j << ") in a skipped tile";
                  }
                }
                for (int64_t t = span.begin; t < span.end; ++t) {
                  const int64_t k0 = t * block_n, k1 = k0 + block_n;
                  if (ClassifyTile(m, kv_length, qs.first, qs.end, k0, k1) !=
                      TileVisibility::kVisible) {
                    continue;
                  }
                  for (int64_t i = qs.first; i < qs.end; ++i) {
                    const KeyRange keys = VisibleKeys(m, i, kv_length);
                    ASSERT_TRUE(keys.begin <= k0 && keys.end >= k1)
                        << "tile " << t << " called visible but query " << i << " sees ["
                        << keys.begin << "," << keys.end << ")";
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

}  // namespace
}  // namespace cuda
}  // namespace attnkit
