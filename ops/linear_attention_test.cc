// Linear attention conformance: the O(T) fp32 implementation against the
// quadratic fp64 definition over a grid of shapes, GQA ratios, causal and
// not, both layouts; then that it is not softmax attention, and bad input.
#include "ops/linear_attention.h"

#include <cmath>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/problem.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "oracle/reference.h"

namespace attnkit {
namespace {

struct Case {
  LinearAttentionProblem p;
  Layout layout;
};

std::vector<Case> Grid() {
  std::vector<Case> cases;
  const int64_t heads[][2] = {{1, 1}, {4, 2}, {4, 1}, {3, 3}};
  const int64_t lens[][2] = {{1, 1}, {9, 9}, {1, 17}, {5, 12}, {12, 5}, {130, 130}};
  for (const auto& hg : heads) {
    for (const auto& qk : lens) {
      for (int64_t d : {1, 16, 40}) {
        for (bool causal : {false, true}) {
          for (Layout layout : {Layout::kBHTD, Layout::kBTHD}) {
            LinearAttentionProblem p;
            p.batch = (d == 16) ? 2 : 1;
            p.num_heads = hg[0];
            p.num_kv_heads = hg[1];
            p.q_len = qk[0];
            p.kv_len = qk[1];
            p.head_dim = d;
            p.causal = causal;
            cases.push_back({p, layout});
          }
        }
      }
    }
  }
  return cases;
}

// q, k, v uniform in [-2, 2] (both branches of elu), o poisoned with NaN.
struct Data {
  Tensor q, k, v, o;
  LinearAttentionArgs args() const { return {q.view(), k.view(), v.view(), o.view()}; }
};

Data MakeData(const LinearAttentionProblem& p, Layout layout, uint64_t seed) {
  Data data;
  data.q = *Tensor::Attention(DType::kF32, layout, p.batch, p.num_heads, p.q_len, p.head_dim);
  data.k = *Tensor::Attention(DType::kF32, layout, p.batch, p.num_kv_heads, p.kv_len, p.head_dim);
  data.v = *Tensor::Attention(DType::kF32, layout, p.batch, p.num_kv_heads, p.kv_len, p.head_dim);
  data.o = *Tensor::Attention(DType::kF32, layout, p.batch, p.num_heads, p.q_len, p.head_dim);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (const Tensor* t : {&data.q, &data.k, &data.v}) {
    ForEachOffset(t->view(), [&](int64_t off) { static_cast<float*>(t->data())[off] = u(rng); });
  }
  ForEachOffset(data.o.view(),
                [&](int64_t off) { static_cast<float*>(data.o.data())[off] = std::nanf(""); });
  return data;
}

class LinearAttentionConformance : public ::testing::TestWithParam<Case> {};

TEST_P(LinearAttentionConformance, MatchesFp64Definition) {
  const LinearAttentionProblem& p = GetParam().p;
  const Data data = MakeData(p, GetParam().layout, 7);
  LinearAttention op;
  ASSERT_TRUE(op.Forward(p, data.args()).ok());
  const std::vector<double> ref = LinearAttentionReference(p, data.args());
  // Outputs are convex combinations of values in [-2, 2]; fp32 sums of up to
  // d and Tk terms.
  const double tol = 2.0 * 4e-7 * double(p.head_dim + p.kv_len) + 1e-6;
  const TensorView& o = data.o.view();
  double worst = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.num_heads; ++h)
      for (int64_t i = 0; i < p.q_len; ++i)
        for (int64_t c = 0; c < p.head_dim; ++c) {
          const double got = o.LoadF32(o.Offset(b, h, i, c));
          const double want = ref[((b * p.num_heads + h) * p.q_len + i) * p.head_dim + c];
          ASSERT_TRUE(std::isfinite(got)) << "b " << b << " h " << h << " i " << i;
          worst = std::max(worst, std::fabs(got - want));
        }
  EXPECT_LE(worst, tol);
}

INSTANTIATE_TEST_SUITE_P(Grid, LinearAttentionConformance, ::testing::ValuesIn(Grid()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return absl::StrCat(info.param.p.Id(), "_",
                                               LayoutName(info.param.layout), "_", info.index);
                         });

// Rows that see no key (causal, Tq > Tk) are zeros, like softmax attention's.
TEST(LinearAttentionTest, RowsWithoutKeysAreZero) {
  LinearAttentionProblem p;
  p.q_len = 5;
  p.kv_len = 3;
  p.head_dim = 4;
  p.causal = true;
  const Data data = MakeData(p, Layout::kBHTD, 3);
  LinearAttention op;
  ASSERT_TRUE(op.Forward(p, data.args()).ok());
  const auto* o = static_cast<const float*>(data.o.data());
  for (int64_t c = 0; c < 2 * p.head_dim; ++c) EXPECT_EQ(o[c], 0.0f);  // rows 0 and 1
  EXPECT_NE(o[2 * p.head_dim], 0.0f);
}

// Same inputs, different function: linear attention is not softmax attention.
TEST(LinearAttentionTest, IsNotSoftmaxAttention) {
  LinearAttentionProblem p;
  p.num_heads = 2;
  p.q_len = p.kv_len = 16;
  p.head_dim = 8;
  const Data data = MakeData(p, Layout::kBHTD, 5);
  LinearAttention op;
  ASSERT_TRUE(op.Forward(p, data.args()).ok());
  // The same shapes as the linear problem, K/V heads included.
  const AttentionProblem s =
      BasicProblem(p.batch, p.num_heads, p.num_kv_heads, p.q_len, p.kv_len, p.head_dim);
  AttentionArgs args;
  args.q = data.q.view();
  args.k = data.k.view();
  args.v = data.v.view();
  const ReferenceResult softmax = ComputeReference(s, args);
  double diff = 0;
  for (size_t i = 0; i < softmax.o.size(); ++i) {
    diff = std::max(diff, std::fabs(softmax.o[i] - static_cast<const float*>(data.o.data())[i]));
  }
  EXPECT_GT(diff, 0.1);
}

TEST(LinearAttentionTest, BadInputNamesTheValues) {
  LinearAttentionProblem p;
  p.num_heads = 6;
  p.num_kv_heads = 4;
  EXPECT_THAT(std::string(ValidateLinearAttention(p).message()),
              ::testing::HasSubstr("num_heads (6) must be a multiple of num_kv_heads (4)"));
  p.num_kv_heads = 3;
  p.head_dim = 0;
  EXPECT_THAT(std::string(ValidateLinearAttention(p).message()),
              ::testing::HasSubstr("head_dim (0) must be >= 1"));
  p.head_dim = 4;
  LinearAttentionProblem other = p;
  other.q_len = 2;
  const Data data = MakeData(other, Layout::kBHTD, 1);
  LinearAttention op;
  EXPECT_THAT(std::string(op.Forward(p, data.args()).message()),
              ::testing::HasSubstr("q must be f32 [1, 6, 1, 4]"));
}

}  // namespace
}  // namespace attnkit
