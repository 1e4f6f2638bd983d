// The KV cache: appends land at each sequence's length, the attention views
// have the capacity buffer's strides, overflow writes nothing, and memory is
// accounted exactly. Paged: tokens land in their block table's pages, a fork
// shares pages and copies a shared partial page before writing, running out
// of pages writes nothing. Int8: rows are quantized with their scales.
#include "ops/kv_cache.h"

#include <vector>

#include "core/quantize.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ops/cost.h"

namespace attnkit {
namespace {

// Rows [B * T, G * d] whose value encodes (b, t, g, c).
std::vector<float> Rows(int64_t B, int64_t T, int64_t G, int64_t d, float base) {
  std::vector<float> rows(B * T * G * d);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < G * d; ++i)
        rows[(b * T + t) * G * d + i] = base + b * 1000 + t * 100 + i;
  return rows;
}

TEST(KVCacheTest, AppendsInPlaceAndViewsUseCapacityStrides) {
  auto cache = KVCache::Create(2, 3, 8, 4);
  ASSERT_TRUE(cache.ok()) << cache.status();
  ASSERT_TRUE(cache->SetLengths({2, 5}).ok());
  const std::vector<float> k = Rows(2, 2, 3, 4, 0), v = Rows(2, 2, 3, 4, 0.5f);
  ASSERT_TRUE(cache->Append(k.data(), v.data(), 3 * 4, 2).ok());
  EXPECT_EQ(cache->length(0), 4);
  EXPECT_EQ(cache->length(1), 7);
  EXPECT_EQ(cache->max_length(), 7);
  EXPECT_FALSE(cache->uniform_lengths());
  const TensorView kv = cache->keys();
  EXPECT_EQ(kv.shape[2], 7);
  EXPECT_EQ(kv.strides[0], 3 * 8 * 4);
  EXPECT_EQ(kv.strides[1], 8 * 4);
  EXPECT_EQ(kv.strides[2], 4);
  // Token t of sequence b went to position length_before + t.
  EXPECT_EQ(kv.LoadF32(kv.Offset(0, 2, 3, 1)), 0 + 1 * 100 + 2 * 4 + 1);
  EXPECT_EQ(kv.LoadF32(kv.Offset(1, 1, 5, 0)), 1000 + 0 * 100 + 1 * 4 + 0);
  const TensorView vv = cache->values();
  EXPECT_EQ(vv.LoadF32(vv.Offset(1, 2, 6, 3)), 0.5f + 1000 + 100 + 2 * 4 + 3);
  const auto* lengths = static_cast<const int32_t*>(cache->kv_lengths_view().data);
  EXPECT_EQ(lengths[0], 4);
  EXPECT_EQ(lengths[1], 7);
}

TEST(KVCacheTest, OverflowIsResourceExhaustedAndWritesNothing) {
  auto cache = KVCache::Create(2, 1, 4, 2);
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE(cache->SetLengths({1, 3}).ok());
  const std::vector<float> k = Rows(2, 2, 1, 2, 7), v = k;
  const absl::Status s = cache->Append(k.data(), v.data(), 2, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("sequence 1 holds 3 tokens, 2 more need 5, the capacity is 4"),
            absl::string_view::npos)
      << s;
  EXPECT_EQ(cache->length(0), 1);
  EXPECT_EQ(cache->length(1), 3);
  const TensorView kv = cache->keys();
  for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(kv.LoadF32(kv.Offset(0, 0, j, 0)), 0.0f);
}

TEST(KVCacheTest, BadDimensionsNameTheValue) {
  EXPECT_NE(KVCache::Create(1, 0, 8, 4).status().message().find("kv_heads (0)"),
            absl::string_view::npos);
  EXPECT_NE(KVCache::Create(1, 1, 8, 4, DType::kI32).status().message().find("i32"),
            absl::string_view::npos);
  auto cache = KVCache::Create(2, 1, 8, 4);
  EXPECT_NE(cache->SetLengths({9, 0}).message().find("(9)"), absl::string_view::npos);
}

TEST(KVCacheTest, SixteenBitStorageRoundsOnAppend) {
  auto cache = KVCache::Create(1, 1, 2, 2, DType::kBF16);
  ASSERT_TRUE(cache.ok());
  const float k[] = {1.0f + 1.0f / 1024, 3.0f}, v[] = {-2.0f, 0.5f};
  ASSERT_TRUE(cache->Append(k, v, 2, 1).ok());
  EXPECT_EQ(cache->keys().LoadF32(0), 1.0f);  // bf16 keeps 8 significant bits
  EXPECT_EQ(cache->values().LoadF32(1), 0.5f);
  EXPECT_EQ(cache->bytes(), 2 * 2 * 2 * 2);
}

// Value c of head g, token t, sequence b in Rows(..., base): what a paged
// cache must hold at that token's page row.
float RowValue(int64_t b, int64_t t, int64_t g, int64_t d, int64_t c, float base) {
  return base + b * 1000 + t * 100 + g * d + c;
}

TEST(PagedKVCacheTest, TokensLandInTheirPagesRows) {
  const int64_t B = 2, G = 3, d = 4, T = 20, ps = 16;
  auto cache = KVCache::CreatePaged(B, G, d, ps, 8);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_TRUE(cache->paged());
  EXPECT_EQ(cache->capacity(), 8 * ps);
  const std::vector<float> k = Rows(B, T, G, d, 0), v = Rows(B, T, G, d, 0.5f);
  ASSERT_TRUE(cache->Append(k.data(), v.data(), G * d, T).ok());
  EXPECT_EQ(cache->free_pages(), 4);  // two pages per sequence
  const TensorView kv = cache->keys(), vv = cache->values();
  ASSERT_EQ(kv.rank, 4);
  EXPECT_EQ(kv.shape[0], 8);
  EXPECT_EQ(kv.shape[1], ps);
  EXPECT_EQ(kv.shape[2], G);
  EXPECT_EQ(kv.shape[3], d);
  const TensorView table = cache->block_table_view(2);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int32_t page = static_cast<const int32_t*>(table.data)[table.Offset(b, t / ps)];
      EXPECT_EQ(page, cache->block_tables().page(b, t));
      for (int64_t g = 0; g < G; ++g) {
        for (int64_t c = 0; c < d; ++c) {
          EXPECT_EQ(kv.LoadF32(kv.Offset(page, t % ps, g, c)), RowValue(b, t, g, d, c, 0));
          EXPECT_EQ(vv.LoadF32(vv.Offset(page, t % ps, g, c)), RowValue(b, t, g, d, c, 0.5f));
        }
      }
    }
  }
  EXPECT_EQ(cache->bytes(), KVCache::PagedBytesFor(G, d, ps, 8, DType::kF32));
  EXPECT_EQ(cache->bytes(), 2 * 8 * ps * G * d * 4);
  EXPECT_TRUE(cache->key_scales().empty());
  EXPECT_TRUE(KVCache::Create(1, 1, 4, 2)->block_table_view(1).empty());
}

// Sequence 1 forks sequence 0's 5 tokens (one shared, partially filled
// page); the next append copies that page for sequence 0 and lets sequence 1
// write the original in place: each sees its own new token, both the prefix.
TEST(PagedKVCacheTest, ForkSharesThePrefixAndCopiesOnWrite) {
  const int64_t B = 2, G = 1, d = 2, ps = 16;
  auto cache = KVCache::CreatePaged(B, G, d, ps, 4);
  ASSERT_TRUE(cache.ok());
  const std::vector<float> prompt = Rows(B, 5, G, d, 0);
  ASSERT_TRUE(cache->Append(prompt.data(), prompt.data(), G * d, 5).ok());
  ASSERT_TRUE(cache->Fork(0, 1, 5).ok());
  EXPECT_EQ(cache->length(1), 5);
  EXPECT_EQ(cache->block_tables().page(1, 0), cache->block_tables().page(0, 0));
  EXPECT_EQ(cache->free_pages(), 3);  // sequence 1's own page came back
  const std::vector<float> next = Rows(B, 1, G, d, 0.25f);
  ASSERT_TRUE(cache->Append(next.data(), next.data(), G * d, 1).ok());
  EXPECT_NE(cache->block_tables().page(0, 0), cache->block_tables().page(1, 0));
  EXPECT_EQ(cache->free_pages(), 2);
  const TensorView kv = cache->keys();
  for (int64_t b = 0; b < B; ++b) {
    const int32_t page = cache->block_tables().page(b, 0);
    for (int64_t t = 0; t < 5; ++t) {  // sequence 0's prompt in both
      EXPECT_EQ(kv.LoadF32(kv.Offset(page, t, 0, 1)), RowValue(0, t, 0, d, 1, 0)) << b << " " << t;
    }
    EXPECT_EQ(kv.LoadF32(kv.Offset(page, 5, 0, 1)), RowValue(b, 0, 0, d, 1, 0.25f)) << b;
  }
  EXPECT_THAT(std::string(cache->Fork(0, 0, 1).message()), ::testing::HasSubstr("onto itself"));
  EXPECT_THAT(std::string(cache->Fork(0, 1, 7).message()),
              ::testing::HasSubstr("fork of 7 tokens must be in [0, the source's length (6)]"));
  EXPECT_THAT(std::string(cache->Fork(2, 1, 1).message()),
              ::testing::HasSubstr("fork source (2) must be a sequence in [0, batch (2))"));
}

TEST(PagedKVCacheTest, OutOfPagesWritesNothingAndSetLengthsOnlyShrinks) {
  auto cache = KVCache::CreatePaged(1, 1, 2, 16, 2);
  ASSERT_TRUE(cache.ok());
  const std::vector<float> k = Rows(1, 33, 1, 2, 0);
  const absl::Status s = cache->Append(k.data(), k.data(), 2, 33);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("needs 3 new pages of 16 tokens, 2 of 2 are free"));
  EXPECT_EQ(cache->length(0), 0);
  EXPECT_EQ(cache->free_pages(), 2);
  ASSERT_TRUE(cache->Append(k.data(), k.data(), 2, 32).ok());
  EXPECT_EQ(cache->CheckRoom(1).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(cache->SetLengths({33}).message()),
              ::testing::HasSubstr("(33) must be in [0, its length (32)]"));
  ASSERT_TRUE(cache->SetLengths({16}).ok());
  EXPECT_EQ(cache->free_pages(), 1);
  cache->Clear();
  EXPECT_EQ(cache->free_pages(), 2);
  EXPECT_THAT(std::string(KVCache::CreatePaged(1, 1, 2, 24, 2).status().message()),
              ::testing::HasSubstr("page_size (24) must be a power of two in [16, 256]"));
  EXPECT_THAT(std::string(KVCache::CreatePaged(1, 1, 2, 16, 0).status().message()),
              ::testing::HasSubstr("num_pages (0)"));
}

// A mirror uploads the rows appended since it last synced: per page, every
// KV head's rows of the new tokens in one run; a copied page from its start.
TEST(PagedKVCacheTest, UnmirroredSpansCoverTheNewRows) {
  const int64_t G = 2, ps = 16;
  auto cache = KVCache::CreatePaged(2, G, 4, ps, 8);
  ASSERT_TRUE(cache.ok());
  const std::vector<float> k = Rows(2, 18, G, 4, 0);
  auto spans = [&](bool all) {
    std::vector<std::pair<int64_t, int64_t>> out;
    EXPECT_TRUE(cache
                    ->ForEachUnmirroredSpan(all,
                                            [&](KVCache::RowSpan s) {
                                              out.emplace_back(s.first, s.count);
                                              return absl::OkStatus();
                                            })
                    .ok());
    return out;
  };
  ASSERT_TRUE(cache->Append(k.data(), k.data(), G * 4, 18).ok());  // pages 0 1 | 2 3
  using P = std::pair<int64_t, int64_t>;
  EXPECT_THAT(spans(false), ::testing::ElementsAre(P{0, 16 * G}, P{1 * ps * G, 2 * G},
                                                   P{2 * ps * G, 16 * G}, P{3 * ps * G, 2 * G}));
  cache->MarkMirrored();
  EXPECT_TRUE(spans(false).empty());
  EXPECT_EQ(spans(true).size(), 4u);
  ASSERT_TRUE(cache->Append(k.data(), k.data(), G * 4, 1).ok());
  EXPECT_THAT(spans(false), ::testing::ElementsAre(P{(1 * ps + 2) * G, G}, P{(3 * ps + 2) * G, G}));
  cache->MarkMirrored();
  // Sequence 1 forks sequence 0's first 17 tokens and both append: sequence
  // 0 (19 tokens) copies the shared page 1 and its copy is new from the
  // page's start (token 16); sequence 1, then page 1's only holder, writes
  // its token 17 there in place.
  ASSERT_TRUE(cache->Fork(0, 1, 17).ok());
  EXPECT_TRUE(spans(false).empty());
  ASSERT_TRUE(cache->Append(k.data(), k.data(), G * 4, 1).ok());
  const int32_t copy = cache->block_tables().page(0, 16);
  EXPECT_NE(copy, 1);
  EXPECT_EQ(cache->block_tables().page(1, 16), 1);
  EXPECT_THAT(spans(false),
              ::testing::ElementsAre(P{copy * ps * G, 4 * G}, P{(1 * ps + 1) * G, G}));
}

TEST(KVCacheTest, DenseForkCopiesTheRows) {
  auto cache = KVCache::Create(2, 2, 8, 2);
  ASSERT_TRUE(cache.ok());
  const std::vector<float> k = Rows(2, 3, 2, 2, 0);
  ASSERT_TRUE(cache->Append(k.data(), k.data(), 4, 3).ok());
  cache->MarkMirrored();
  ASSERT_TRUE(cache->Fork(1, 0, 2).ok());
  EXPECT_EQ(cache->length(0), 2);
  EXPECT_EQ(cache->mirrored_until(0), 0);
  const TensorView kv = cache->keys();
  for (int64_t t = 0; t < 2; ++t) {
    EXPECT_EQ(kv.LoadF32(kv.Offset(0, 1, t, 1)), RowValue(1, t, 1, 2, 1, 0));
  }
}

// Int8: each (token, KV head) row is QuantizeRowI8's, with its scale in the
// scale tensor at the row's place, dense and paged.
TEST(KVCacheTest, Int8RowsAreQuantizedWithTheirScales) {
  const int64_t B = 2, G = 2, d = 8, T = 3;
  const std::vector<float> k = Rows(B, T, G, d, -900), v = Rows(B, T, G, d, 0.5f);
  for (bool paged : {false, true}) {
    auto cache = paged ? KVCache::CreatePaged(B, G, d, 16, 4, DType::kI8)
                       : KVCache::Create(B, G, 4, d, DType::kI8);
    ASSERT_TRUE(cache.ok()) << cache.status();
    ASSERT_TRUE(cache->Append(k.data(), v.data(), G * d, T).ok());
    const TensorView kq = cache->keys(), ks = cache->key_scales(), vs = cache->value_scales();
    EXPECT_EQ(kq.dtype, DType::kI8);
    ASSERT_EQ(ks.rank, 3);
    EXPECT_EQ(ks.dtype, DType::kF32);
    EXPECT_EQ(ks.shape[paged ? 2 : 1], G);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t g = 0; g < G; ++g) {
          const float* src = k.data() + (b * T + t) * G * d + g * d;
          int8_t want[8];
          const float scale = QuantizeRowI8(src, d, want);
          const int64_t page = paged ? cache->block_tables().page(b, t) : 0;
          const int64_t row = paged ? kq.Offset(page, t, g) : kq.Offset(b, g, t);
          const int64_t srow = paged ? ks.Offset(page, t, g) : ks.Offset(b, g, t);
          EXPECT_EQ(static_cast<const float*>(ks.data)[srow], scale);
          for (int64_t c = 0; c < d; ++c) {
            EXPECT_EQ(static_cast<const int8_t*>(kq.data)[row + c], want[c]);
            EXPECT_NEAR(want[c] * scale, src[c], scale / 2 + 1e-6);
          }
          const float* vsrc = v.data() + (b * T + t) * G * d + g * d;
          EXPECT_EQ(static_cast<const float*>(vs.data)[srow], QuantizeRowI8(vsrc, d, want));
        }
      }
    }
  }
  // One byte per value plus one f32 scale per row, for K and V.
  EXPECT_EQ(KVCache::BytesFor(1, 2, 4, 8, DType::kI8), 2 * 2 * 4 * (8 + 4));
  EXPECT_EQ(KVCache::PagedBytesFor(2, 8, 16, 4, DType::kI8), 2 * 4 * 16 * 2 * (8 + 4));
}

// The standard example: 32 layers, head_dim 128, 4,096 tokens, 16-bit values.
TEST(KVCacheTest, StandardExampleBytes) {
  const int64_t layers = 32;
  EXPECT_EQ(layers * KVCache::BytesFor(1, 32, 4096, 128, DType::kBF16), int64_t{2} << 30);
  EXPECT_EQ(layers * KVCache::BytesFor(1, 8, 4096, 128, DType::kF16), int64_t{512} << 20);
  EXPECT_EQ(layers * KVCache::BytesFor(1, 1, 4096, 128, DType::kBF16), int64_t{64} << 20);
  // The cost model agrees with the cache it describes.
  AttentionProblem p;
  p.num_heads = 32;
  p.num_kv_heads = 8;
  p.head_dim = 128;
  p.q_len = 1;
  p.kv_len = 4096;
  p.kv_dtype = DType::kBF16;
  EXPECT_EQ(ComputeCost(p).kv_cache_bytes, KVCache::BytesFor(1, 8, 4096, 128, DType::kBF16));
  p.kv_dtype = DType::kI8;  // with the scales
  EXPECT_EQ(ComputeCost(p).kv_cache_bytes, KVCache::BytesFor(1, 8, 4096, 128, DType::kI8));
}

}  // namespace
}  // namespace attnkit
