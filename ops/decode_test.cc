// Decoding with the KV cache against a full recompute, on every backend that
// supports the case: token by token (MHA, GQA, MQA), chunked prefill with the
// bottom-right mask (and the top-left mask shown wrong), per-sequence lengths,
// the shared cache read in place by grouped heads, and a cache too small.
#include <memory>
#include <string>
#include <vector>

#include "backends/builtin.h"
#include "core/problem_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ops/layer_test_util.h"
#include "ops/multi_head_attention.h"
#include "tests/backend_test_env.h"

namespace attnkit {
namespace {

using layer_test::ActivationView;
using layer_test::LayerConfig;
using layer_test::MaxAbsDiff;
using layer_test::RandomActivations;
using layer_test::TokenSlice;

class DecodeTest : public testing_env::BackendParamTest<std::string> {
 protected:
  // The layer on this test's backend, or null (skip_ set) when the backend
  // does not run a decode step over a Tk-token cache.
  std::unique_ptr<MultiHeadAttention> Make(AttentionConfig c, int64_t B, int64_t Tk,
                                           bool padded = false) {
    c.set_backend(GetParam());
    AttentionConfig step = c;
    step.set_batch(B);
    step.set_q_len(1);
    step.set_kv_len(Tk);
    step.set_layout(BTHD);
    if (step.alignment() == ALIGNMENT_UNSPECIFIED) step.set_alignment(BOTTOM_RIGHT);
    if (padded) {
      for (int64_t b = 0; b < B; ++b) step.add_kv_lengths(Tk - b);
    }
    auto p = ProblemFromConfig(step);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!testing_env::RunsOrRecordsSkip(GetParam(), *p, &skip_)) return nullptr;
    auto layer = MultiHeadAttention::Create(c, {}, GlobalRegistry());
    EXPECT_TRUE(layer.ok()) << layer.status();
    return layer.ok() ? std::move(layer).value() : nullptr;
  }
  std::string skip_;
};

// y of the whole sequence at once (causal), [B, T, D].
std::vector<float> FullRecompute(MultiHeadAttention* layer, const std::vector<float>& x, int64_t B,
                                 int64_t T) {
  const int64_t D = layer->problem().model_dim;
  std::vector<float> y(B * T * D);
  EXPECT_TRUE(
      layer->Forward(ActivationView(x.data(), B, T, D), ActivationView(y.data(), B, T, D)).ok());
  return y;
}

// Runs tokens [t0, t0 + n) through the cache; returns y [B, n, D].
std::vector<float> Step(MultiHeadAttention* layer, KVCache* cache, const std::vector<float>& x,
                        int64_t B, int64_t T, int64_t t0, int64_t n) {
  const int64_t D = layer->problem().model_dim;
  std::vector<float> y(B * n * D);
  const absl::Status s = layer->ForwardCached(TokenSlice(x.data(), B, T, D, t0, n), cache,
                                              ActivationView(y.data(), B, n, D));
  EXPECT_TRUE(s.ok()) << s;
  return y;
}

// Rows [t0, t0 + n) of every sequence of y [B, T, D].
std::vector<float> Rows(const std::vector<float>& y, int64_t B, int64_t T, int64_t D, int64_t t0,
                        int64_t n) {
  std::vector<float> out;
  for (int64_t b = 0; b < B; ++b) {
    out.insert(out.end(), y.begin() + (b * T + t0) * D, y.begin() + (b * T + t0 + n) * D);
  }
  return out;
}

TEST_P(DecodeTest, TokenByTokenMatchesFullRecompute) {
  struct Case {
    const char* name;
    int64_t heads, kv_heads;
  };
  for (const Case& c : {Case{"mha", 4, 4}, Case{"gqa", 4, 2}, Case{"mqa", 4, 1}}) {
    const int64_t B = 2, T = 9, d = 16, D = c.heads * d;
    auto layer = Make(LayerConfig(c.heads, c.kv_heads, d, true, ""), B, T);
    if (layer == nullptr) GTEST_SKIP() << skip_;
    const std::vector<float> x = RandomActivations(B, T, D, 21);
    const std::vector<float> full = FullRecompute(layer.get(), x, B, T);
    auto cache = layer->NewCache(B, T);
    ASSERT_TRUE(cache.ok()) << cache.status();
    double worst = 0;
    for (int64_t t = 0; t < T; ++t) {
      const std::vector<float> y = Step(layer.get(), &*cache, x, B, T, t, 1);
      worst = std::max(worst, MaxAbsDiff(y, Rows(full, B, T, D, t, 1)));
      EXPECT_EQ(layer->problem().q_len, 1);
      EXPECT_EQ(layer->problem().kv_len, t + 1);
    }
    EXPECT_LE(worst, 1e-5) << c.name;
    EXPECT_EQ(cache->length(0), T);
  }
}

// Prefill 5 tokens, then a 2-token chunk: with the bottom-right mask each new
// query sees every cached token and itself, matching the recompute; the
// top-left mask hides the cache from the chunk and is far off.
TEST_P(DecodeTest, ChunkNeedsBottomRightAlignment) {
  const int64_t B = 1, T = 7, d = 16, D = 4 * d, prefill = 5;
  AttentionConfig config = LayerConfig(4, 2, d, true, "");
  auto layer = Make(config, B, T);
  if (layer == nullptr) GTEST_SKIP() << skip_;
  const std::vector<float> x = RandomActivations(B, T, D, 22);
  const std::vector<float> full = FullRecompute(layer.get(), x, B, T);
  auto cache = layer->NewCache(B, T);
  ASSERT_TRUE(cache.ok());
  const std::vector<float> first = Step(layer.get(), &*cache, x, B, T, 0, prefill);
  EXPECT_LE(MaxAbsDiff(first, Rows(full, B, T, D, 0, prefill)), 1e-5);
  const std::vector<float> chunk = Step(layer.get(), &*cache, x, B, T, prefill, 2);
  EXPECT_EQ(layer->problem().alignment, Alignment::kBottomRight);
  EXPECT_LE(MaxAbsDiff(chunk, Rows(full, B, T, D, prefill, 2)), 1e-5);

  config.set_alignment(TOP_LEFT);
  config.set_backend(GetParam());
  auto top_left = MultiHeadAttention::Create(config, {}, GlobalRegistry());
  if (!top_left.ok()) GTEST_SKIP() << top_left.status();
  auto cache2 = (*top_left)->NewCache(B, T);
  ASSERT_TRUE(cache2.ok());
  Step(top_left->get(), &*cache2, x, B, T, 0, prefill);
  if (!(*top_left)->backend()->Supports((*top_left)->problem()).ok()) GTEST_SKIP();
  const std::vector<float> wrong = Step(top_left->get(), &*cache2, x, B, T, prefill, 2);
  EXPECT_GT(MaxAbsDiff(wrong, Rows(full, B, T, D, prefill, 2)), 0.05)
      << "the top-left mask should hide the cached tokens from the chunk";
}

// Sequences of different lengths in one batch: the backend gets kv_lengths and
// each sequence matches its own recompute.
TEST_P(DecodeTest, PerSequenceLengths) {
  const int64_t B = 2, T = 6, d = 8, D = 2 * d;
  auto layer = Make(LayerConfig(2, 1, d, true, ""), B, T, /*padded=*/true);
  if (layer == nullptr) GTEST_SKIP() << skip_;
  const std::vector<float> x = RandomActivations(B, T, D, 23);
  auto cache = layer->NewCache(B, T);
  ASSERT_TRUE(cache.ok());
  Step(layer.get(), &*cache, x, B, T, 0, 4);
  // Sequence 1 keeps only 3 of its 4 tokens; its next token is x[1, 4].
  ASSERT_TRUE(cache->SetLengths({4, 3}).ok());
  const std::vector<float> y = Step(layer.get(), &*cache, x, B, T, 4, 1);
  ASSERT_TRUE(layer->problem().has_kv_lengths());
  EXPECT_EQ(layer->problem().kv_lengths, (std::vector<int64_t>{5, 4}));
  // Recompute: sequence 0 is tokens 0..4; sequence 1 is tokens 0, 1, 2, 4.
  const std::vector<float> x0(x.begin(), x.begin() + 5 * D);
  std::vector<float> x1(x.begin() + T * D, x.begin() + (T + 3) * D);
  x1.insert(x1.end(), x.begin() + (T + 4) * D, x.begin() + (T + 5) * D);
  const std::vector<float> want0 = FullRecompute(layer.get(), x0, 1, 5);
  const std::vector<float> want1 = FullRecompute(layer.get(), x1, 1, 4);
  EXPECT_LE(MaxAbsDiff(std::vector<float>(y.begin(), y.begin() + D), Rows(want0, 1, 5, D, 4, 1)),
            1e-5);
  EXPECT_LE(MaxAbsDiff(std::vector<float>(y.begin() + D, y.end()), Rows(want1, 1, 4, D, 3, 1)),
            1e-5);
}

INSTANTIATE_TEST_SUITE_P(AllBackends, DecodeTest, ::testing::ValuesIn(testing_env::BackendNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return testing_env::SafeName(info.param);
                         });

// The backend receives the cache itself as K/V: Hkv heads (not H), the cache
// buffer's address and capacity strides, so nothing is copied H / Hkv times.
TEST(DecodeCacheTest, GroupedHeadsReadTheSharedCacheInPlace) {
  BackendRegistry registry;
  auto spy = std::make_unique<layer_test::SpyBackend>(/*device_mode=*/false);
  layer_test::SpyBackend* backend = spy.get();
  ASSERT_TRUE(registry.Register(std::move(spy)).ok());
  auto layer = MultiHeadAttention::Create(LayerConfig(8, 2, 16, true, "spy"), {}, registry);
  ASSERT_TRUE(layer.ok()) << layer.status();
  const int64_t B = 1, T = 3, D = 128, capacity = 32;
  auto cache = (*layer)->NewCache(B, capacity);
  ASSERT_TRUE(cache.ok());
  const std::vector<float> x = RandomActivations(B, T, D, 24);
  for (int64_t t = 0; t < T; ++t) Step(layer->get(), &*cache, x, B, T, t, 1);
  ASSERT_EQ(backend->calls().size(), 3u);
  const AttentionArgs& last = backend->calls().back();
  EXPECT_EQ(last.k.data, cache->keys().data);
  EXPECT_EQ(last.v.data, cache->values().data);
  EXPECT_EQ(last.k.shape[1], 2);  // Hkv, not H
  EXPECT_EQ(last.k.shape[2], 3);  // Tk = the cached length
  EXPECT_EQ(last.k.strides[1], capacity * 16);
  EXPECT_EQ(last.q.shape[1], 8);
}

// A device backend keeps the cache in its own memory: a decode step uploads
// the step's queries and the cache's new rows, not the whole cache, and the
// output is the host path's, bit for bit. After the lengths are rolled back,
// the rewritten rows are uploaded again.
TEST(DecodeCacheTest, DeviceBackendGetsOnlyTheNewRowsEachStep) {
  BackendRegistry registry;
  ASSERT_TRUE(registry.Register(std::make_unique<layer_test::SpyBackend>(true)).ok());
  ASSERT_TRUE(registry.Register(std::make_unique<layer_test::SpyBackend>(false)).ok());
  const int64_t H = 8, G = 2, d = 16, B = 2, T = 12, D = H * d, capacity = 64;
  auto device = MultiHeadAttention::Create(LayerConfig(H, G, d, true, "spy-device"), {}, registry);
  auto host = MultiHeadAttention::Create(LayerConfig(H, G, d, true, "spy"), {}, registry);
  ASSERT_TRUE(device.ok() && host.ok());
  auto device_cache = (*device)->NewCache(B, capacity);
  auto host_cache = (*host)->NewCache(B, capacity);
  ASSERT_TRUE(device_cache.ok() && host_cache.ok());
  const std::vector<float> x = RandomActivations(B, T, D, 26);
  // Bytes a step of n tokens uploads: the queries and n new K and V rows.
  auto step_bytes = [&](int64_t n) {
    return static_cast<int64_t>(sizeof(float)) * (B * n * H * d + 2 * B * G * n * d);
  };
  auto step = [&](int64_t t0, int64_t n) {
    const int64_t before = (*device)->uploaded_bytes();
    const std::vector<float> got = Step(device->get(), &*device_cache, x, B, T, t0, n);
    const std::vector<float> want = Step(host->get(), &*host_cache, x, B, T, t0, n);
    EXPECT_EQ(got, want) << "tokens [" << t0 << ", " << t0 + n << ")";
    EXPECT_EQ((*device)->uploaded_bytes() - before, step_bytes(n))
        << "tokens [" << t0 << ", " << t0 + n << ")";
  };
  step(0, 5);  // prefill
  for (int64_t t = 5; t < 9; ++t) step(t, 1);
  // Roll both caches back to 6 tokens and decode again from there.
  ASSERT_TRUE(device_cache->SetLengths({6, 6}).ok());
  ASSERT_TRUE(host_cache->SetLengths({6, 6}).ok());
  for (int64_t t = 6; t < 9; ++t) step(t, 1);
  EXPECT_EQ((*host)->uploaded_bytes(), 0);
}

// A cache too small for the next chunk: ResourceExhausted naming the values,
// and the cache is left as it was.
TEST(DecodeCacheTest, CacheTooSmall) {
  auto layer =
      MultiHeadAttention::Create(LayerConfig(4, 2, 8, true, "reference"), {}, GlobalRegistry());
  ASSERT_TRUE(layer.ok());
  const int64_t B = 1, T = 6, D = 32;
  auto cache = (*layer)->NewCache(B, 4);
  ASSERT_TRUE(cache.ok());
  const std::vector<float> x = RandomActivations(B, T, D, 25);
  Step(layer->get(), &*cache, x, B, T, 0, 3);
  std::vector<float> y(2 * D);
  const absl::Status s = (*layer)->ForwardCached(TokenSlice(x.data(), B, T, D, 3, 2), &*cache,
                                                 ActivationView(y.data(), B, 2, D));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("holds 3 tokens, 2 more need 5, the capacity is 4"));
  EXPECT_EQ(cache->length(0), 3);
  // A cache for another layer shape is refused too.
  auto other = KVCache::Create(1, 4, 8, 8);
  EXPECT_THAT(std::string((*layer)
                              ->ForwardCached(TokenSlice(x.data(), B, T, D, 3, 1), &*other,
                                              ActivationView(y.data(), B, 1, D))
                              .message()),
              ::testing::HasSubstr("num_kv_heads (2)"));
}

}  // namespace
}  // namespace attnkit
