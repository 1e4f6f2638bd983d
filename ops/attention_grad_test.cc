// The gradients of MultiHeadAttention::Backward and TransformerBlock::Backward
// against central finite differences of L = sum(dy * y) (every weight, bias,
// gain and input element), on the reference and highway backends, with GQA,
// MQA and MHA, causal and unmasked; plus accumulation and state errors.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/builtin.h"
#include "gtest/gtest.h"
#include "ops/fd_test_util.h"
#include "ops/layer_test_util.h"
#include "ops/multi_head_attention.h"
#include "ops/transformer_block.h"

namespace attnkit {
namespace {

// The FD step, and the bound each element must meet: |analytic - fd| <=
// kAtol + kRtol |fd|. With f32 forwards L carries rounding noise of ~1e-6
// (|L| ~ 1), which the difference quotient divides by 2 eps = 2e-2: ~5e-5;
// the truncation error eps^2 f'''/6 is smaller. Measured worst: 3e-5 (block).
constexpr float kEps = 1e-2f;
constexpr double kAtol = 1e-4, kRtol = 1e-2;

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

TensorView View(std::vector<float>& v, int64_t B, int64_t T, int64_t D) {
  return ContiguousView(v.data(), DType::kF32, {B, T, D});
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

struct LayerCase {
  int64_t heads, kv_heads;
  bool causal, bias;
  int64_t value_dim = 0;  // > 0: V's and O's own head dim (Wv, Wo follow it)
};

class AttentionGradTest : public ::testing::TestWithParam<std::string> {};

TEST_P(AttentionGradTest, LayerMatchesFiniteDifferences) {
  const int64_t B = 2, T = 5, D = 16;
  for (const LayerCase& c : {LayerCase{4, 2, true, true}, LayerCase{4, 1, true, false},
                             LayerCase{4, 4, false, true}, LayerCase{4, 2, true, true, 6}}) {
    SCOPED_TRACE(::testing::Message() << "H " << c.heads << " Hkv " << c.kv_heads << " causal "
                                      << c.causal << " bias " << c.bias << " Ev " << c.value_dim);
    LayerOptions lo;
    lo.bias = c.bias;
    lo.seed = 7;
    AttentionConfig config =
        layer_test::LayerConfig(c.heads, c.kv_heads, D / c.heads, c.causal, GetParam());
    config.set_value_head_dim(c.value_dim);
    auto layer = MultiHeadAttention::Create(config, lo, GlobalRegistry());
    ASSERT_TRUE(layer.ok()) << layer.status();
    MultiHeadAttention& l = **layer;
    std::vector<float> x = Random(B * T * D, 1), dy = Random(B * T * D, 2), y(B * T * D),
                       y2(B * T * D), dx(B * T * D);
    ASSERT_TRUE(l.ForwardTrain(View(x, B, T, D), View(y, B, T, D)).ok());
    EXPECT_EQ(l.backend()->Name(), GetParam());
    // ForwardTrain computes what Forward computes.
    ASSERT_TRUE(l.Forward(View(x, B, T, D), View(y2, B, T, D)).ok());
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], y2[i], 1e-6) << i;
    ASSERT_TRUE(l.ZeroGradients().ok());
    ASSERT_TRUE(l.Backward(View(dy, B, T, D), View(dx, B, T, D)).ok());
    EXPECT_EQ(l.last_backward_run().backend, GetParam());

    auto params = l.Parameters("");
    ASSERT_TRUE(params.ok());
    std::vector<ParamRef> all = *params;
    all.push_back({"x", x.data(), dx.data(), B * T * D, false});
    const auto loss = [&]() {
      EXPECT_TRUE(l.Forward(View(x, B, T, D), View(y2, B, T, D)).ok());
      return Dot(dy, y2);
    };
    const fd_test::FdResult r = fd_test::CheckGradients(all, loss, kEps, kAtol, kRtol);
    EXPECT_LE(r.worst_ratio, 1.0) << r.worst << " (" << r.checked << " checked)";
    EXPECT_GT(r.max_abs_grad, 0.1) << "gradients too small for the test to mean anything";
    std::printf("[fd] layer %s H%d/%d causal %d bias %d: %d elements, worst ratio %.3f (%s)\n",
                GetParam().c_str(), int(c.heads), int(c.kv_heads), c.causal, c.bias, int(r.checked),
                r.worst_ratio, r.worst.c_str());
  }
}

// Weight gradients add up over calls; dx is overwritten and may be dy.
TEST_P(AttentionGradTest, GradientsAccumulateAndDxMayBeDy) {
  const int64_t B = 1, T = 4, D = 16;
  auto layer = MultiHeadAttention::Create(layer_test::LayerConfig(4, 2, 4, true, GetParam()),
                                          LayerOptions{}, GlobalRegistry());
  ASSERT_TRUE(layer.ok()) << layer.status();
  MultiHeadAttention& l = **layer;
  std::vector<float> x = Random(B * T * D, 3), y(B * T * D), dy = Random(B * T * D, 4),
                     dx(B * T * D, 123.0f);
  EXPECT_EQ(l.Backward(View(dy, B, T, D), View(dx, B, T, D)).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(l.ForwardTrain(View(x, B, T, D), View(y, B, T, D)).ok());
  ASSERT_TRUE(l.Backward(View(dy, B, T, D), View(dx, B, T, D)).ok());
  const auto* g = static_cast<const float*>(l.gradients().wq.data());
  const std::vector<float> once(g, g + 16 * 16);
  std::vector<float> inplace = dy;
  ASSERT_TRUE(l.Backward(View(inplace, B, T, D), View(inplace, B, T, D)).ok());
  // Twice the gradient, up to f32 rounding (the second call adds into the first).
  double scale = 0;
  for (float v : once) scale = std::max(scale, double(std::fabs(v)));
  for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(g[i], 2 * once[i], 1e-5 * scale) << i;
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_FLOAT_EQ(inplace[i], dx[i]);
  std::vector<float> wrong(2 * T * D);
  EXPECT_EQ(l.Backward(View(wrong, 2, T, D), View(wrong, 2, T, D)).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(l.ZeroGradients().ok());
  for (size_t i = 0; i < once.size(); ++i) EXPECT_EQ(g[i], 0.0f);
}

TEST_P(AttentionGradTest, BlockMatchesFiniteDifferences) {
  const int64_t B = 2, T = 5, D = 16;
  BlockOptions bo;
  bo.attention.bias = true;
  bo.attention.seed = 11;
  bo.mlp_hidden = 24;
  auto block = TransformerBlock::Create(layer_test::LayerConfig(4, 2, 4, true, GetParam()), bo,
                                        GlobalRegistry());
  ASSERT_TRUE(block.ok()) << block.status();
  TransformerBlock& blk = **block;
  std::vector<float> x = Random(B * T * D, 5), dy = Random(B * T * D, 6), y(B * T * D),
                     y2(B * T * D), dx(B * T * D);
  ASSERT_TRUE(blk.ForwardTrain(View(x, B, T, D), View(y, B, T, D)).ok());
  ASSERT_TRUE(blk.Forward(View(x, B, T, D), View(y2, B, T, D)).ok());
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], y2[i], 1e-6) << i;
  // Forward does not keep training state: Backward now needs ForwardTrain.
  EXPECT_EQ(blk.Backward(View(dy, B, T, D), View(dx, B, T, D)).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(blk.ForwardTrain(View(x, B, T, D), View(y, B, T, D)).ok());
  ASSERT_TRUE(blk.ZeroGradients().ok());
  ASSERT_TRUE(blk.Backward(View(dy, B, T, D), View(dx, B, T, D)).ok());

  auto params = blk.Parameters("");
  ASSERT_TRUE(params.ok());
  std::vector<ParamRef> all = *params;
  int64_t n = 0;
  for (const ParamRef& p : all) n += p.size;
  EXPECT_EQ(n, blk.NumParameters());
  all.push_back({"x", x.data(), dx.data(), B * T * D, false});
  const auto loss = [&]() {
    EXPECT_TRUE(blk.Forward(View(x, B, T, D), View(y2, B, T, D)).ok());
    return Dot(dy, y2);
  };
  const fd_test::FdResult r = fd_test::CheckGradients(all, loss, kEps, kAtol, kRtol);
  EXPECT_LE(r.worst_ratio, 1.0) << r.worst << " (" << r.checked << " checked)";
  EXPECT_GT(r.max_abs_grad, 0.1);
  std::printf("[fd] block %s: %d elements, worst ratio %.3f (%s)\n", GetParam().c_str(),
              int(r.checked), r.worst_ratio, r.worst.c_str());
}

INSTANTIATE_TEST_SUITE_P(Backends, AttentionGradTest, ::testing::Values("reference", "highway"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace attnkit
