// Decoding through paged and int8 KV caches, on every backend that supports
// the case: a paged cache gives the dense cache's outputs (bit for bit on the
// reference), a forked prompt prefix gives what prefilling the prompt again
// gives, an int8 cache gives what attention over the dequantized K/V gives,
// a device backend's mirror of a paged or int8 cache uploads only new rows,
// and running out of pages is an error that leaves the cache as it was.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backends/builtin.h"
#include "backends/reference/reference_backend.h"
#include "core/problem_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ops/layer_test_util.h"
#include "ops/multi_head_attention.h"
#include "tests/backend_test_env.h"

namespace attnkit {
namespace {

using layer_test::LayerConfig;
using layer_test::MaxAbsDiff;
using layer_test::RandomActivations;
using layer_test::TokenSlice;

constexpr int64_t kPage = 16;

// Runs tokens [t0, t0 + n) of x [B, T, D] through the cache; returns y
// [B, n, D].
std::vector<float> Step(MultiHeadAttention* layer, KVCache* cache, const std::vector<float>& x,
                        int64_t B, int64_t T, int64_t t0, int64_t n) {
  const int64_t D = layer->problem().model_dim;
  std::vector<float> y(B * n * D);
  const absl::Status s = layer->ForwardCached(TokenSlice(x.data(), B, T, D, t0, n), cache,
                                              layer_test::ActivationView(y.data(), B, n, D));
  EXPECT_TRUE(s.ok()) << s;
  return y;
}

// The decode step problem of a paged (and int8) cache of Tk tokens with
// per-sequence lengths, for asking a backend whether it runs the case.
AttentionProblem StepProblem(AttentionConfig c, int64_t B, int64_t Tk, bool int8) {
  c.set_batch(B);
  c.set_q_len(1);
  c.set_kv_len(Tk);
  c.set_layout(BTHD);
  c.set_alignment(BOTTOM_RIGHT);
  c.set_page_size(kPage);
  if (int8) c.set_kv_dtype(INT8);
  for (int64_t b = 0; b < B; ++b) c.add_kv_lengths(Tk - b);
  auto p = ProblemFromConfig(c);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : AttentionProblem();
}

// The same tokens through a dense and a paged cache of one layer, in chunks
// that cross page boundaries, then one token at a time; after 24 tokens
// sequence 1 drops its last 3 (so lengths differ). Returns the largest
// difference between their outputs.
double PagedVsDense(MultiHeadAttention* layer, DType kv_dtype) {
  const int64_t B = 2, T = 40, D = layer->problem().model_dim;
  auto dense = layer->NewCache(B, T, kv_dtype);
  auto paged = layer->NewPagedCache(B, kPage, 6, kv_dtype);  // 3 pages a sequence
  EXPECT_TRUE(dense.ok() && paged.ok());
  if (!dense.ok() || !paged.ok()) return 1e9;
  const std::vector<float> x = RandomActivations(B, T, D, 31);
  double worst = 0;
  auto step = [&](int64_t t0, int64_t n) {
    const std::vector<float> want = Step(layer, &*dense, x, B, T, t0, n);
    const std::vector<float> got = Step(layer, &*paged, x, B, T, t0, n);
    EXPECT_EQ(layer->problem().page_size, kPage);
    worst = std::max(worst, MaxAbsDiff(got, want));
  };
  step(0, 5);
  step(5, 12);  // tokens 5..16: into the second page
  for (int64_t t = 17; t < 24; ++t) step(t, 1);
  EXPECT_TRUE(dense->SetLengths({24, 21}).ok());
  EXPECT_TRUE(paged->SetLengths({24, 21}).ok());
  for (int64_t t = 24; t < T; ++t) step(t, 1);
  EXPECT_EQ(paged->length(1), T - 3);
  EXPECT_EQ(paged->free_pages(), 0);
  return worst;
}

class PagedDecodeTest : public testing_env::BackendParamTest<std::string> {
 protected:
  // The layer on this test's backend, or null (skip_ set) when the backend
  // does not run a paged (int8) decode step.
  std::unique_ptr<MultiHeadAttention> Make(bool int8, int64_t B = 2, int64_t Tk = 40) {
    AttentionConfig c = LayerConfig(4, 2, 16, true, GetParam());
    if (!testing_env::RunsOrRecordsSkip(GetParam(), StepProblem(c, B, Tk, int8), &skip_)) {
      return nullptr;
    }
    auto layer = MultiHeadAttention::Create(c, {}, GlobalRegistry());
    EXPECT_TRUE(layer.ok()) << layer.status();
    return layer.ok() ? std::move(layer).value() : nullptr;
  }
  std::string skip_;
};

// Same keys, same order of reads: only summation order may differ between
// the two layouts, and it does not on a backend that reads rows one by one.
TEST_P(PagedDecodeTest, PagedCacheMatchesDenseCache) {
  for (bool int8 : {false, true}) {
    auto layer = Make(int8);
    if (layer == nullptr) GTEST_SKIP() << skip_;
    EXPECT_LE(PagedVsDense(layer.get(), int8 ? DType::kI8 : DType::kF32), 1e-5)
        << (int8 ? "int8" : "f32");
  }
}

// Sequence 1 gets sequence 0's prompt by Fork (shared pages, no recompute)
// instead of prefilling it: every later output is what prefilling it gives.
TEST_P(PagedDecodeTest, ForkedPromptMatchesPrefill) {
  auto layer = Make(false);
  if (layer == nullptr) GTEST_SKIP() << skip_;
  const int64_t B = 2, P = 20, T = 30, D = layer->problem().model_dim;
  // x: both sequences share their first P tokens, then differ; x_other has
  // a different prompt for sequence 1 (which the fork replaces).
  std::vector<float> x = RandomActivations(B, T, D, 32);
  std::copy(x.begin(), x.begin() + P * D, x.begin() + T * D);
  std::vector<float> x_other = x;
  const std::vector<float> noise = RandomActivations(1, P, D, 33);
  std::copy(noise.begin(), noise.end(), x_other.begin() + T * D);

  auto prefilled = layer->NewPagedCache(B, kPage, 8);
  auto forked = layer->NewPagedCache(B, kPage, 8);
  ASSERT_TRUE(prefilled.ok() && forked.ok());
  Step(layer.get(), &*prefilled, x, B, T, 0, P);
  Step(layer.get(), &*forked, x_other, B, T, 0, P);
  ASSERT_TRUE(forked->Fork(0, 1, P).ok());
  EXPECT_EQ(forked->free_pages(), 8 - 2);  // one prompt's two pages, shared
  EXPECT_EQ(forked->block_tables().allocator().refcount(forked->block_tables().page(1, 0)), 2);
  double worst = 0;
  for (int64_t t = P; t < T; ++t) {
    const std::vector<float> want = Step(layer.get(), &*prefilled, x, B, T, t, 1);
    const std::vector<float> got = Step(layer.get(), &*forked, x, B, T, t, 1);
    worst = std::max(worst, MaxAbsDiff(got, want));
  }
  EXPECT_LE(worst, 1e-5);
  // The partially filled shared page was copied at the first step; the full
  // one is still shared.
  EXPECT_NE(forked->block_tables().page(0, P - 1), forked->block_tables().page(1, P - 1));
  EXPECT_EQ(forked->block_tables().page(0, 0), forked->block_tables().page(1, 0));
}

// Wraps a host backend: runs it, and for int8 K/V also runs the reference on
// the dequantized values (k * scale rounded to f32, in the same dense or
// paged layout) and keeps the largest difference between the two outputs.
class DequantizedOracle : public Backend {
 public:
  explicit DequantizedOracle(Backend* inner)
      : inner_(inner), reference_(MakeReferenceBackend("oracle-reference")) {}
  std::string Name() const override { return "oracle"; }
  std::string Description() const override { return "a backend checked on dequantized K/V"; }
  Capabilities Caps() const override { return inner_->Caps(); }
  absl::Status Supports(const AttentionProblem& p) const override { return inner_->Supports(p); }
  double worst() const { return worst_; }
  int int8_calls() const { return int8_calls_; }

 protected:
  absl::Status ForwardImpl(const AttentionProblem& p, const AttentionArgs& a,
                           RunInfo* info) override {
    absl::Status s = inner_->Forward(p, a, info);
    if (!s.ok() || p.kv_dtype != DType::kI8) return s;
    ++int8_calls_;
    AttentionProblem pf = p;
    pf.kv_dtype = DType::kF32;
    AttentionArgs af = a;
    af.k_scale = af.v_scale = TensorView();
    auto k = Dequantize(a.k, a.k_scale), v = Dequantize(a.v, a.v_scale);
    auto o =
        Tensor::Contiguous(DType::kF32, {a.o.shape[0], a.o.shape[1], a.o.shape[2], a.o.shape[3]});
    if (!k.ok() || !v.ok() || !o.ok()) return absl::InternalError("oracle allocation");
    af.k = k->view();
    af.v = v->view();
    af.o = o->view();
    s = reference_->Forward(pf, af, nullptr);
    if (!s.ok()) return s;
    ForEachOffset(a.o, [&, i = int64_t{0}](int64_t off) mutable {
      const double diff = std::fabs(double(a.o.LoadF32(off)) - af.o.LoadF32(i++));
      worst_ = std::max(worst_, diff);
    });
    return absl::OkStatus();
  }

 private:
  // f32 with t's shape: element [.., c] = t[.., c] * scale[..], for a
  // contiguous rank-4 int8 t and its rank-3 scales.
  static absl::StatusOr<Tensor> Dequantize(const TensorView& t, const TensorView& scale) {
    auto out = Tensor::Contiguous(DType::kF32, {t.shape[0], t.shape[1], t.shape[2], t.shape[3]});
    if (!out.ok()) return out.status();
    float* o = static_cast<float*>(out->data());
    const int64_t rows = t.shape[0] * t.shape[1] * t.shape[2], d = t.shape[3];
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i0 = r / (t.shape[1] * t.shape[2]), i1 = r / t.shape[2] % t.shape[1],
                    i2 = r % t.shape[2];
      const float s = static_cast<const float*>(scale.data)[scale.Offset(i0, i1, i2)];
      for (int64_t c = 0; c < d; ++c) o[r * d + c] = t.LoadF32(t.Offset(i0, i1, i2, c)) * s;
    }
    return out;
  }

  Backend* inner_;
  std::unique_ptr<Backend> reference_;
  double worst_ = 0;
  int int8_calls_ = 0;
};

// An int8 cache, dense and paged: each call's output is attention over the
// dequantized keys and values (the reference fed them), to f32 rounding.
TEST_P(PagedDecodeTest, Int8CacheIsAttentionOverDequantizedValues) {
  if (Make(true) == nullptr) GTEST_SKIP() << skip_;
  auto inner = GlobalRegistry().Find(GetParam());
  ASSERT_TRUE(inner.ok());
  if (!(*inner)->UsesHostMemory()) GTEST_SKIP() << "the oracle reads host memory";
  BackendRegistry registry;
  auto oracle = std::make_unique<DequantizedOracle>(*inner);
  DequantizedOracle* o = oracle.get();
  ASSERT_TRUE(registry.Register(std::move(oracle)).ok());
  auto layer = MultiHeadAttention::Create(LayerConfig(4, 2, 16, true, "oracle"), {}, registry);
  ASSERT_TRUE(layer.ok()) << layer.status();
  PagedVsDense(layer->get(), DType::kI8);
  EXPECT_GT(o->int8_calls(), 0);
  EXPECT_LE(o->worst(), 1e-5);
}

// int8 against f32 storage, end to end. Quantizing rounds each K/V value by
// at most max|row| / 254 (QuantizeRowI8: scale = max|row| / 127, round to
// nearest); through the softmax (scores move by about that times |q|_1 /
// sqrt(d)) and Wo, this layer's outputs (up to ~0.5) move by about 0.002;
// 0.01 bounds that quantization error, not a backend's.
TEST_P(PagedDecodeTest, Int8CacheStaysCloseToF32) {
  auto layer = Make(true);
  if (layer == nullptr) GTEST_SKIP() << skip_;
  const int64_t B = 2, T = 24, D = layer->problem().model_dim;
  auto f32 = layer->NewPagedCache(B, kPage, 4);
  auto i8 = layer->NewPagedCache(B, kPage, 4, DType::kI8);
  ASSERT_TRUE(f32.ok() && i8.ok());
  const std::vector<float> x = RandomActivations(B, T, D, 34);
  double worst = 0, scale = 0;
  for (int64_t t = 0; t < T; t += (t == 0 ? 8 : 1)) {
    const int64_t n = t == 0 ? 8 : 1;
    const std::vector<float> want = Step(layer.get(), &*f32, x, B, T, t, n);
    const std::vector<float> got = Step(layer.get(), &*i8, x, B, T, t, n);
    worst = std::max(worst, MaxAbsDiff(got, want));
    for (float w : want) scale = std::max(scale, double(std::fabs(w)));
  }
  EXPECT_GT(worst, 0) << "int8 storage should round something";
  EXPECT_LE(worst, 0.01) << "largest |y| " << scale;
}

INSTANTIATE_TEST_SUITE_P(AllBackends, PagedDecodeTest,
                         ::testing::ValuesIn(testing_env::BackendNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return testing_env::SafeName(info.param);
                         });

// On the reference the two layouts give the same bits: it reads each key row
// through the same KvRows index map, in the same order.
TEST(PagedDecodeReferenceTest, PagedCacheIsBitwiseTheDenseCache) {
  auto layer =
      MultiHeadAttention::Create(LayerConfig(4, 2, 16, true, "reference"), {}, GlobalRegistry());
  ASSERT_TRUE(layer.ok()) << layer.status();
  EXPECT_EQ(PagedVsDense(layer->get(), DType::kF32), 0.0);
  EXPECT_EQ(PagedVsDense(layer->get(), DType::kI8), 0.0);
}

// A device backend mirrors the pool (and int8 scales) and gets only the
// step's new rows uploaded, plus the queries and the block table; its
// outputs are the host path's, bit for bit, through a fork's copy-on-write.
TEST(PagedDecodeCacheTest, DeviceBackendMirrorsThePoolAndUploadsNewRows) {
  for (DType dtype : {DType::kF32, DType::kI8}) {
    BackendRegistry registry;
    ASSERT_TRUE(registry.Register(std::make_unique<layer_test::SpyBackend>(true)).ok());
    ASSERT_TRUE(registry.Register(std::make_unique<layer_test::SpyBackend>(false)).ok());
    const int64_t H = 8, G = 2, d = 16, B = 2, T = 40, D = H * d, pages = 8;
    auto device =
        MultiHeadAttention::Create(LayerConfig(H, G, d, true, "spy-device"), {}, registry);
    auto host = MultiHeadAttention::Create(LayerConfig(H, G, d, true, "spy"), {}, registry);
    ASSERT_TRUE(device.ok() && host.ok());
    auto device_cache = (*device)->NewPagedCache(B, kPage, pages, dtype);
    auto host_cache = (*host)->NewPagedCache(B, kPage, pages, dtype);
    ASSERT_TRUE(device_cache.ok() && host_cache.ok());
    const std::vector<float> x = RandomActivations(B, T, D, 35);
    // A step of n new rows per sequence uploads the queries, n rows of K and
    // V per sequence (with their scales for int8) and the block table's
    // span ((B - 1) * pages + max_pages i32).
    const int64_t row =
        G * d * static_cast<int64_t>(DTypeSize(dtype)) + (dtype == DType::kI8 ? G * 4 : 0);
    auto step = [&](int64_t t0, int64_t n, int64_t rows_uploaded) {
      const int64_t before = (*device)->uploaded_bytes();
      const std::vector<float> got = Step(device->get(), &*device_cache, x, B, T, t0, n);
      const std::vector<float> want = Step(host->get(), &*host_cache, x, B, T, t0, n);
      EXPECT_EQ(got, want) << DTypeName(dtype) << " tokens [" << t0 << ", " << t0 + n << ")";
      const int64_t table = 4 * ((B - 1) * pages + (*device)->problem().max_pages());
      EXPECT_EQ((*device)->uploaded_bytes() - before,
                4 * B * n * H * d + 2 * rows_uploaded * row + table)
          << DTypeName(dtype) << " tokens [" << t0 << ", " << t0 + n << ")";
    };
    step(0, 18, B * 18);  // prefill across a page boundary
    for (int64_t t = 18; t < 21; ++t) step(t, 1, B);
    // Sequence 1 forks sequence 0's 21 tokens: nothing to upload for it (the
    // pages are mirrored); the next step copies the shared page 1 for
    // sequence 0, whose tokens 16..21 are then new to the mirror.
    ASSERT_TRUE(device_cache->Fork(0, 1, 21).ok());
    ASSERT_TRUE(host_cache->Fork(0, 1, 21).ok());
    step(21, 1, (21 - 16 + 1) + 1);
    for (int64_t t = 22; t < 26; ++t) step(t, 1, B);
    EXPECT_EQ((*host)->uploaded_bytes(), 0);
  }
}

// Out of pages: ResourceExhausted naming the pages needed and free, and the
// cache is left as it was.
TEST(PagedDecodeCacheTest, OutOfPages) {
  auto layer =
      MultiHeadAttention::Create(LayerConfig(4, 2, 8, true, "reference"), {}, GlobalRegistry());
  ASSERT_TRUE(layer.ok());
  const int64_t B = 2, T = 40, D = 32;
  auto cache = (*layer)->NewPagedCache(B, kPage, 3);
  ASSERT_TRUE(cache.ok());
  const std::vector<float> x = RandomActivations(B, T, D, 36);
  Step(layer->get(), &*cache, x, B, T, 0, 10);  // a page each, one free
  std::vector<float> y(B * 10 * D);
  const absl::Status s = (*layer)->ForwardCached(TokenSlice(x.data(), B, T, D, 10, 10), &*cache,
                                                 layer_test::ActivationView(y.data(), B, 10, D));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("appending 10 tokens to 2 sequences needs 2 new pages of 16 "
                                   "tokens, 1 of 3 are free"));
  EXPECT_EQ(cache->length(0), 10);
  EXPECT_EQ(cache->length(1), 10);
  EXPECT_EQ(cache->free_pages(), 1);
  Step(layer->get(), &*cache, x, B, T, 10, 6);  // still fits its pages
}

}  // namespace
}  // namespace attnkit
