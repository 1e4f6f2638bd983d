// The KV cache: appends land at each sequence's length, the attention views
// have the capacity buffer's strides, overflow writes nothing, and memory is
// accounted exactly.
#include "ops/kv_cache.h"

#include <vector>

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
  EXPECT_NE(s.message().find("sequence 1 at length 3"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("capacity (4)"), absl::string_view::npos) << s;
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
}

}  // namespace
}  // namespace attnkit
