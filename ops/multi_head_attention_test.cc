// The layer against the slow per-head version, cross-attention, weights from
// .npy, device staging, parameter counts and bad input. The TEST_Ps run on
// every registered backend that supports the case.
#include "ops/multi_head_attention.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backends/auto_select.h"
#include "backends/builtin.h"
#include "core/problem_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/npy.h"
#include "ops/layer_test_util.h"
#include "platform/machine_info.h"
#include "tests/backend_test_env.h"

namespace attnkit {
namespace {

using layer_test::ActivationView;
using layer_test::LayerConfig;
using layer_test::MaxAbsDiff;
using layer_test::RandomActivations;
using ::testing::HasSubstr;

class LayerTest : public testing_env::BackendParamTest<std::string> {
 protected:
  // The layer on this test's backend, or null (skip_ set) when the backend
  // does not run the layer's attention problem for these shapes.
  std::unique_ptr<MultiHeadAttention> Make(AttentionConfig c, int64_t B, int64_t Tq, int64_t Tk,
                                           const LayerOptions& options = {}) {
    c.set_backend(GetParam());
    AttentionConfig shaped = c;
    shaped.set_batch(B);
    shaped.set_q_len(Tq);
    shaped.set_kv_len(Tk);
    shaped.set_layout(BTHD);
    if (shaped.alignment() == ALIGNMENT_UNSPECIFIED) shaped.set_alignment(BOTTOM_RIGHT);
    auto p = ProblemFromConfig(shaped);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!testing_env::RunsOrRecordsSkip(GetParam(), *p, &skip_)) return nullptr;
    auto layer = MultiHeadAttention::Create(c, options, GlobalRegistry());
    EXPECT_TRUE(layer.ok()) << layer.status();
    if (!layer.ok()) return nullptr;
    EXPECT_EQ((*layer)->backend()->Name(), GetParam());
    return std::move(layer).value();
  }
  std::string skip_;
};

// y from the fused layer equals the per-head loop over weight slices; the
// reshape bug (memory [B, T, H*d] read as [B, H, T, d]) does not.
TEST_P(LayerTest, EqualsPerHeadLoopAndCatchesReshapeBug) {
  struct Case {
    int64_t heads, kv_heads, head_dim;
    bool causal, bias;
  };
  for (const Case& c :
       {Case{4, 2, 8, true, false}, Case{4, 4, 8, false, true}, Case{3, 1, 16, true, true}}) {
    const int64_t B = 2, T = 7;
    LayerOptions options;
    options.bias = c.bias;
    options.seed = 3;
    auto layer = Make(LayerConfig(c.heads, c.kv_heads, c.head_dim, c.causal, ""), B, T, T, options);
    if (layer == nullptr) GTEST_SKIP() << skip_;
    const int64_t D = layer->problem().model_dim;
    const std::vector<float> x = RandomActivations(B, T, D, 5);
    std::vector<float> y(B * T * D);
    ASSERT_TRUE(
        layer->Forward(ActivationView(x.data(), B, T, D), ActivationView(y.data(), B, T, D)).ok());
    const std::vector<double> slow = layer_test::SlowLayer(*layer, x.data(), B, T, x.data(), T);
    EXPECT_LE(MaxAbsDiff(y, slow), 1e-5) << "heads " << c.heads << "/" << c.kv_heads;
    const std::vector<double> bug = layer_test::ReshapeBugLayer(*layer, x.data(), B, T);
    EXPECT_GT(MaxAbsDiff(bug, slow), 0.05) << "the test cannot tell the reshape bug apart";
  }
}

// gpt-oss's sinks and ALiBi in the layer: y equals the per-head loop with
// them, a decode step through the KV cache gives the full forward's last
// row, and each of the two changes y (the check can fail).
TEST_P(LayerTest, SinksAndAlibiEqualPerHeadLoop) {
  const int64_t B = 2, T = 9, H = 4;
  AttentionConfig c = LayerConfig(H, 2, 8, /*causal=*/true, "");
  c.set_sinks(true);
  c.set_alibi(true);
  LayerOptions options;
  options.seed = 7;
  auto layer = Make(c, B, T, T, options);
  if (layer == nullptr) GTEST_SKIP() << skip_;
  float sinks[H] = {0.5f, 2.0f, -1.0f, 1.0f};
  ASSERT_TRUE(layer->SetWeight("sinks", ContiguousView(sinks, DType::kF32, {H})).ok());
  const int64_t D = layer->problem().model_dim;
  const std::vector<float> x = RandomActivations(B, T, D, 11);
  std::vector<float> y(B * T * D);
  ASSERT_TRUE(
      layer->Forward(ActivationView(x.data(), B, T, D), ActivationView(y.data(), B, T, D)).ok());
  const std::vector<double> slow = layer_test::SlowLayer(*layer, x.data(), B, T, x.data(), T);
  EXPECT_LE(MaxAbsDiff(y, slow), 1e-5);
  // The last token again, as a decode step after a prefill of the others.
  auto cache = layer->NewCache(B, T);
  ASSERT_TRUE(cache.ok()) << cache.status();
  std::vector<float> y_prefill(B * (T - 1) * D), y_step(B * D);
  ASSERT_TRUE(layer
                  ->ForwardCached(layer_test::TokenSlice(x.data(), B, T, D, 0, T - 1), &*cache,
                                  ActivationView(y_prefill.data(), B, T - 1, D))
                  .ok());
  ASSERT_TRUE(layer
                  ->ForwardCached(layer_test::TokenSlice(x.data(), B, T, D, T - 1, 1), &*cache,
                                  ActivationView(y_step.data(), B, 1, D))
                  .ok());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t r = 0; r < D; ++r) {
      EXPECT_NEAR(y_step[b * D + r], y[(b * T + T - 1) * D + r], 1e-5) << b << " " << r;
    }
  }
  // Without the sinks, and without ALiBi: y moves.
  float none[H] = {-1e30f, -1e30f, -1e30f, -1e30f}, flat[H] = {0, 0, 0, 0};
  std::vector<float> other(y.size());
  ASSERT_TRUE(layer->SetWeight("sinks", ContiguousView(none, DType::kF32, {H})).ok());
  ASSERT_TRUE(
      layer->Forward(ActivationView(x.data(), B, T, D), ActivationView(other.data(), B, T, D))
          .ok());
  EXPECT_GT(MaxAbsDiff(other, slow), 1e-3) << "the sinks change nothing";
  ASSERT_TRUE(layer->SetWeight("sinks", ContiguousView(sinks, DType::kF32, {H})).ok());
  ASSERT_TRUE(layer->SetWeight("alibi_slopes", ContiguousView(flat, DType::kF32, {H})).ok());
  ASSERT_TRUE(
      layer->Forward(ActivationView(x.data(), B, T, D), ActivationView(other.data(), B, T, D))
          .ok());
  EXPECT_GT(MaxAbsDiff(other, slow), 1e-3) << "ALiBi changes nothing";
}

// A value head dim of its own (MLA-like: Wv and Wo over H * Ev): y equals the
// per-head loop, cross-attention too, and decode steps through a dense and a
// paged cache (V rows of Ev) give the full forward's last rows.
TEST_P(LayerTest, ValueHeadDimEqualsPerHeadLoop) {
  const int64_t B = 2, T = 9;
  AttentionConfig c = LayerConfig(4, 2, 8, /*causal=*/true, "");
  c.set_value_head_dim(12);
  LayerOptions options;
  options.seed = 9;
  options.bias = true;
  auto layer = Make(c, B, T, T, options);
  if (layer == nullptr) GTEST_SKIP() << skip_;
  EXPECT_EQ(layer->weights().wv.view().dim(0), 2 * 12);
  EXPECT_EQ(layer->weights().wo.view().dim(1), 4 * 12);
  const int64_t D = layer->problem().model_dim;
  const std::vector<float> x = RandomActivations(B, T, D, 13);
  std::vector<float> y(B * T * D);
  ASSERT_TRUE(
      layer->Forward(ActivationView(x.data(), B, T, D), ActivationView(y.data(), B, T, D)).ok());
  const std::vector<double> slow = layer_test::SlowLayer(*layer, x.data(), B, T, x.data(), T);
  EXPECT_LE(MaxAbsDiff(y, slow), 1e-5);
  for (bool paged : {false, true}) {
    auto cache = paged ? layer->NewPagedCache(B, 16, 2) : layer->NewCache(B, T);
    ASSERT_TRUE(cache.ok()) << cache.status();
    EXPECT_EQ(cache->value_dim(), 12);
    std::vector<float> y_prefill(B * (T - 2) * D), y_step(B * D);
    ASSERT_TRUE(layer
                    ->ForwardCached(layer_test::TokenSlice(x.data(), B, T, D, 0, T - 2), &*cache,
                                    ActivationView(y_prefill.data(), B, T - 2, D))
                    .ok());
    for (int64_t t = T - 2; t < T; ++t) {
      ASSERT_TRUE(layer
                      ->ForwardCached(layer_test::TokenSlice(x.data(), B, T, D, t, 1), &*cache,
                                      ActivationView(y_step.data(), B, 1, D))
                      .ok());
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t r = 0; r < D; ++r) {
          EXPECT_NEAR(y_step[b * D + r], y[(b * T + t) * D + r], 1e-5)
              << (paged ? "paged " : "dense ") << b << " " << t << " " << r;
        }
      }
    }
  }
  // A cache made for another value head dim is refused by name.
  auto other = KVCache::Create(B, 2, T, 8, DType::kF32);
  ASSERT_TRUE(other.ok());
  std::vector<float> y1(B * D);
  const absl::Status s = layer->ForwardCached(layer_test::TokenSlice(x.data(), B, T, D, 0, 1),
                                              &*other, ActivationView(y1.data(), B, 1, D));
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("value head dim (12)"));
}

// Keys and values from a second input of another length: the score matrix is
// Tq x Tk and the values match the per-head reference.
TEST_P(LayerTest, CrossAttentionWithTqNotTk) {
  const int64_t B = 2, Tq = 5, Tk = 11;
  auto layer = Make(LayerConfig(4, 2, 8, false, ""), B, Tq, Tk);
  if (layer == nullptr) GTEST_SKIP() << skip_;
  const int64_t D = layer->problem().model_dim;
  const std::vector<float> x = RandomActivations(B, Tq, D, 7);
  const std::vector<float> ctx = RandomActivations(B, Tk, D, 8);
  std::vector<float> y(B * Tq * D);
  ASSERT_TRUE(layer
                  ->CrossForward(ActivationView(x.data(), B, Tq, D),
                                 ActivationView(ctx.data(), B, Tk, D),
                                 ActivationView(y.data(), B, Tq, D))
                  .ok());
  EXPECT_EQ(layer->problem().q_len, Tq);
  EXPECT_EQ(layer->problem().kv_len, Tk);
  const std::vector<double> slow = layer_test::SlowLayer(*layer, x.data(), B, Tq, ctx.data(), Tk);
  EXPECT_LE(MaxAbsDiff(y, slow), 1e-5);
}

// Input and output as token slices of longer buffers (rows not evenly
// strided across the batch): projections run per sequence, same result.
TEST_P(LayerTest, TokenSlicesInAndOut) {
  const int64_t B = 2, T = 9, t0 = 2, n = 5;
  auto layer = Make(LayerConfig(4, 2, 8, true, ""), B, n, n);
  if (layer == nullptr) GTEST_SKIP() << skip_;
  const int64_t D = layer->problem().model_dim;
  const std::vector<float> x = RandomActivations(B, T, D, 12);
  std::vector<float> y(B * T * D, -3.0f);
  ASSERT_TRUE(layer
                  ->Forward(layer_test::TokenSlice(x.data(), B, T, D, t0, n),
                            layer_test::TokenSlice(y.data(), B, T, D, t0, n))
                  .ok());
  std::vector<float> xs, ys;
  for (int64_t b = 0; b < B; ++b) {
    xs.insert(xs.end(), x.begin() + (b * T + t0) * D, x.begin() + (b * T + t0 + n) * D);
    ys.insert(ys.end(), y.begin() + (b * T + t0) * D, y.begin() + (b * T + t0 + n) * D);
    for (int64_t t = 0; t < T; ++t) {
      if (t >= t0 && t < t0 + n) continue;
      for (int64_t c = 0; c < D; ++c) ASSERT_EQ(y[(b * T + t) * D + c], -3.0f) << "wrote outside y";
    }
  }
  EXPECT_LE(MaxAbsDiff(ys, layer_test::SlowLayer(*layer, xs.data(), B, n, xs.data(), n)), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(AllBackends, LayerTest, ::testing::ValuesIn(testing_env::BackendNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return testing_env::SafeName(info.param);
                         });

std::unique_ptr<MultiHeadAttention> ReferenceLayer(const AttentionConfig& c,
                                                   const LayerOptions& options = {}) {
  AttentionConfig config = c;
  config.set_backend("reference");
  auto layer = MultiHeadAttention::Create(config, options, GlobalRegistry());
  EXPECT_TRUE(layer.ok()) << layer.status();
  return layer.ok() ? std::move(layer).value() : nullptr;
}

// Weights written as .npy (the PyTorch export route) load into another layer
// and give the same output bit for bit.
TEST(LayerWeightsTest, LoadsFromNpy) {
  LayerOptions options;
  options.bias = true;
  options.seed = 1;
  auto source = ReferenceLayer(LayerConfig(4, 2, 8, true, ""), options);
  options.seed = 2;
  auto target = ReferenceLayer(LayerConfig(4, 2, 8, true, ""), options);
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  const AttentionWeights& w = source->weights();
  const std::pair<const char*, const Tensor*> files[] = {
      {"wq", &w.wq}, {"wk", &w.wk}, {"wv", &w.wv}, {"wo", &w.wo},
      {"bq", &w.bq}, {"bk", &w.bk}, {"bv", &w.bv}, {"bo", &w.bo}};
  for (const auto& [name, tensor] : files) {
    ASSERT_TRUE(WriteNpy(dir + "/" + name + ".npy", tensor->view()).ok());
  }
  ASSERT_TRUE(target->LoadNpy(dir).ok());
  const int64_t B = 1, T = 6, D = 32;
  const std::vector<float> x = RandomActivations(B, T, D, 9);
  std::vector<float> y1(B * T * D), y2(B * T * D);
  ASSERT_TRUE(
      source->Forward(ActivationView(x.data(), B, T, D), ActivationView(y1.data(), B, T, D)).ok());
  ASSERT_TRUE(
      target->Forward(ActivationView(x.data(), B, T, D), ActivationView(y2.data(), B, T, D)).ok());
  EXPECT_EQ(y1, y2);

  // The wrong orientation (in, out) is refused, naming the file and both shapes.
  ASSERT_TRUE(WriteNpy(dir + "/wk.npy", ContiguousView(w.wq.data(), DType::kF32, {32, 16})).ok());
  const absl::Status s = target->LoadNpy(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("wk.npy"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("has shape [32, 16]; expected [16, 32]"));
}

// A backend that keeps data in its own memory gets it uploaded and the output
// downloaded; the layer's result is the same as on the host.
TEST(LayerDeviceTest, StagesThroughBackendMemory) {
  BackendRegistry registry;
  auto spy = std::make_unique<layer_test::SpyBackend>(/*device_mode=*/true);
  layer_test::SpyBackend* device = spy.get();
  ASSERT_TRUE(registry.Register(std::move(spy)).ok());
  AttentionConfig c = LayerConfig(4, 2, 8, true, "spy-device");
  auto layer = MultiHeadAttention::Create(c, {}, registry);
  ASSERT_TRUE(layer.ok()) << layer.status();
  const int64_t B = 2, T = 5, D = 32;
  const std::vector<float> x = RandomActivations(B, T, D, 10);
  std::vector<float> y(B * T * D);
  ASSERT_TRUE(
      (*layer)->Forward(ActivationView(x.data(), B, T, D), ActivationView(y.data(), B, T, D)).ok());
  ASSERT_EQ(device->calls().size(), 1u);
  EXPECT_NE(device->calls()[0].q.data, nullptr);
  EXPECT_LE(MaxAbsDiff(y, layer_test::SlowLayer(**layer, x.data(), B, T, x.data(), T)), 1e-5);
}

// backend "auto" chooses per call from the call's shape class: with a tuning
// record that puts "spy" first for short prefill and "spy-device" first for
// decode, a chunked prefill runs on the host spy and the decode steps on the
// device spy (whose cache mirror then uploads the prefilled rows), and the
// decoded states equal a full recompute.
TEST(LayerAutoTest, ChoosesPerCallFromTheShapeClass) {
  setenv("ATTNKIT_CACHE_DIR", (::testing::TempDir() + "/auto_cache").c_str(), 1);
  TuneRecord record;
  record.set_cpu_model(CpuModel());
  record.set_threads(1);
  for (const auto& [shape_class, first] :
       {std::pair<const char*, const char*>{"decode", "spy-device"}, {"short_prefill", "spy"}}) {
    TuneEntry* e = record.add_entries();
    e->set_shape_class(shape_class);
    e->set_kv_dtype("f32");
    e->add_order(first);
  }
  ASSERT_TRUE(SaveTuneRecord(TuneRecordPath(1), record).ok());
  BackendRegistry registry;
  auto host_spy = std::make_unique<layer_test::SpyBackend>(/*device_mode=*/false);
  auto device_spy = std::make_unique<layer_test::SpyBackend>(/*device_mode=*/true);
  layer_test::SpyBackend* host = host_spy.get();
  layer_test::SpyBackend* device = device_spy.get();
  ASSERT_TRUE(registry.Register(std::move(host_spy)).ok());
  ASSERT_TRUE(registry.Register(std::move(device_spy)).ok());
  LayerOptions options;
  options.threads = 1;
  auto layer = MultiHeadAttention::Create(LayerConfig(4, 2, 8, true, "auto"), options, registry);
  ASSERT_TRUE(layer.ok()) << layer.status();
  EXPECT_TRUE((*layer)->is_auto());
  const int64_t B = 1, P = 20, T = P + 3, D = 32;
  const std::vector<float> x = RandomActivations(B, T, D, 4);
  std::vector<float> y(B * T * D), full(B * T * D);
  auto cache = (*layer)->NewCache(B, 32);
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE((*layer)
                  ->ForwardCached(ActivationView(x.data(), B, P, D), &*cache,
                                  ActivationView(y.data(), B, P, D))
                  .ok());
  EXPECT_EQ((*layer)->backend()->Name(), "spy");
  EXPECT_THAT((*layer)->selection_reason(), HasSubstr("short_prefill order from the tuning"));
  for (int64_t t = P; t < T; ++t) {
    ASSERT_TRUE((*layer)
                    ->ForwardCached(ActivationView(x.data() + t * D, B, 1, D), &*cache,
                                    ActivationView(y.data() + t * D, B, 1, D))
                    .ok());
    EXPECT_EQ((*layer)->backend()->Name(), "spy-device");
  }
  EXPECT_EQ(host->calls().size(), 1u);
  EXPECT_EQ(device->calls().size(), 3u);
  EXPECT_GT((*layer)->uploaded_bytes(), 0);
  ASSERT_TRUE((*layer)
                  ->Forward(ActivationView(x.data(), B, T, D), ActivationView(full.data(), B, T, D))
                  .ok());
  EXPECT_LE(MaxAbsDiff(y, full), 1e-5);
}

// Model dim 512: 262,144 weights per matrix, 1,048,576 for the four, whatever
// the head count.
TEST(LayerParametersTest, IndependentOfHeadCount) {
  for (int64_t heads : {1, 8, 16}) {
    AttentionConfig c = LayerConfig(heads, heads, 512 / heads, false, "reference");
    auto layer = ReferenceLayer(c);
    ASSERT_NE(layer, nullptr);
    EXPECT_EQ(layer->weights().wq.view().NumElements(), 262144) << heads << " heads";
    EXPECT_EQ(layer->weights().wo.view().NumElements(), 262144) << heads << " heads";
    EXPECT_EQ(layer->NumParameters(), 1048576) << heads << " heads";
  }
  // GQA shrinks Wk and Wv: 8 query heads over 2 KV heads, d = 64.
  auto gqa = ReferenceLayer(LayerConfig(8, 2, 64, false, "reference"));
  EXPECT_EQ(gqa->weights().wk.view().NumElements(), 2 * 64 * 512);
  EXPECT_EQ(gqa->NumParameters(), 2 * 262144 + 2 * 65536);
}

TEST(LayerBadInputTest, ErrorsNameTheValues) {
  auto message = [](const AttentionConfig& c) {
    auto layer = MultiHeadAttention::Create(c, {}, GlobalRegistry());
    EXPECT_FALSE(layer.ok());
    EXPECT_EQ(layer.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(layer.status().message());
  };
  AttentionConfig c = LayerConfig(12, 5, 8, false, "reference");
  EXPECT_THAT(message(c), HasSubstr("num_heads (12) must be a multiple of num_kv_heads (5)"));
  c = LayerConfig(3, 3, 32, false, "reference");
  c.set_model_dim(100);
  EXPECT_THAT(message(c), HasSubstr("model_dim (100) must be divisible by num_heads (3)"));
  c = LayerConfig(4, 2, 8, false, "reference");
  c.set_dtype(BF16);
  EXPECT_THAT(message(c), HasSubstr("dtype (bf16)"));

  auto layer = ReferenceLayer(LayerConfig(4, 2, 8, false, ""));
  std::vector<float> w(32 * 32);
  const absl::Status s = layer->SetWeight("wv", ContiguousView(w.data(), DType::kF32, {32, 32}));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("wv has shape [32, 32]; expected [16, 32] = [num_kv_heads * "
                        "value_head_dim, model_dim]"));
  EXPECT_THAT(
      std::string(layer->SetWeight("bq", ContiguousView(w.data(), DType::kF32, {32})).message()),
      HasSubstr("no bias"));
  std::vector<float> x(2 * 3 * 30), y(2 * 3 * 32);
  EXPECT_THAT(
      std::string(
          layer->Forward(ActivationView(x.data(), 2, 3, 30), ActivationView(y.data(), 2, 3, 32))
              .message()),
      HasSubstr("last dim must be model_dim (32)"));
}

}  // namespace
}  // namespace attnkit
