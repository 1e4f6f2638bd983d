// Linear's backward products against fp64 sums: the Highway kernels
// (hwy_matmul-inl.h LinearGradInput / LinearGradWeight) on every compiled
// target this CPU supports, then every provider (MatmulProvider::
// LinearGradInput / LinearGradWeight) through the registry. K from 0 past
// four vectors of the widest target, N past the 4-row dW tile, M and N of 0,
// misaligned starts, padded row strides, both accumulate modes, with and
// without a bias gradient, and no write outside the outputs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul_grad_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/tests/hwy_gtest.h"
#include "ops/hwy_matmul-inl.h"

#ifndef ATTNKIT_OPS_MATMUL_GRAD_TEST_ONCE_
#define ATTNKIT_OPS_MATMUL_GRAD_TEST_ONCE_
namespace attnkit {
namespace testing_matmul_grad {

struct Shape {
  int64_t m, n, k;
  int64_t offset;  // floats before every buffer's first element: misaligned starts
};

// k covers 0, the scalar tail alone, one and several vectors of 4, 8 and 16
// lanes, and the 4-vector blocks of dX with tails; n the 4-row dW tile, its
// 1-row remainder and none.
inline std::vector<Shape> Shapes() {
  std::vector<Shape> out;
  for (int64_t m : {0, 1, 3, 8}) {
    for (int64_t n : {0, 1, 3, 4, 5, 9, 33}) {
      for (int64_t k : {0, 1, 3, 7, 8, 15, 16, 17, 33, 63, 64, 65, 100, 129}) {
        out.push_back({m, n, k, (m + n + k) % 4});
      }
    }
  }
  return out;
}

// Floats after each output buffer that no kernel may write.
constexpr int64_t kGuard = 19;

inline std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

inline std::string Describe(const Shape& s) {
  return "m " + std::to_string(s.m) + " n " + std::to_string(s.n) + " k " + std::to_string(s.k) +
         " offset " + std::to_string(s.offset);
}

// "" when |got - want| <= 4 * 2^-24 * (sum of |terms| + |start|) * max(1, terms),
// the bound fp32 accumulation meets; else what went wrong.
inline std::string CheckClose(const std::string& what, double got, double want, double mag,
                              int64_t terms) {
  const double bound = 4 * std::ldexp(1.0, -24) * (mag + 1e-30) * std::max<int64_t>(1, terms);
  if (std::fabs(got - want) <= bound) return "";
  char text[128];
  std::snprintf(text, sizeof(text), " = %.9g, want %.9g (bound %.3g)", got, want, bound);
  return what + text;
}

// Runs grad_input, dX [M, K] (row stride K + 2) (+)= dY [M, N] (row stride
// N + 1) W [N, K], and returns "" or the first failure: an element off the
// fp64 sum, or a write into dX's row padding, before its start or after it.
template <typename Fn>
std::string GradInputFailure(const Shape& s, bool accumulate, Fn grad_input) {
  const int64_t ldy = s.n + 1, ldx = s.k + 2, o = s.offset;
  const std::vector<float> dy_buf = Random(o + s.m * ldy, 1), w_buf = Random(o + s.n * s.k, 2);
  std::vector<float> dx_buf = Random(o + s.m * ldx + kGuard, 3);
  const std::vector<float> start = dx_buf;
  const float* dy = dy_buf.data() + o;
  const float* w = w_buf.data() + o;
  grad_input(dy, ldy, w, s.m, s.n, s.k, dx_buf.data() + o, ldx, accumulate);
  const std::string where = Describe(s) + (accumulate ? " accumulate" : " overwrite") + ": ";
  for (int64_t at = 0; at < static_cast<int64_t>(dx_buf.size()); ++at) {
    const int64_t r = (at - o) / ldx, i = (at - o) % ldx;
    const bool inside = at >= o && r < s.m && i < s.k;
    if (!inside) {
      if (dx_buf[at] != start[at]) return where + "wrote outside dX at float " + std::to_string(at);
      continue;
    }
    double want = accumulate ? start[at] : 0.0, mag = std::fabs(want);
    for (int64_t c = 0; c < s.n; ++c) {
      want += double(dy[r * ldy + c]) * w[c * s.k + i];
      mag += std::fabs(double(dy[r * ldy + c]) * w[c * s.k + i]);
    }
    const std::string failure = CheckClose(
        "dX[" + std::to_string(r) + "," + std::to_string(i) + "]", dx_buf[at], want, mag, s.n);
    if (!failure.empty()) return where + failure;
  }
  return "";
}

// Runs grad_weight, dW [N, K] += dY^T X for dY [M, N] (row stride N + 3) and
// X [M, K] (row stride K + 1), and dbias [N] += the column sums of dY when
// `with_bias` (else a null dbias). Returns "" or the first failure: an
// element off the fp64 sum, or a write past dW or dbias.
template <typename Fn>
std::string GradWeightFailure(const Shape& s, bool with_bias, Fn grad_weight) {
  const int64_t ldy = s.n + 3, ldx = s.k + 1, o = s.offset;
  const std::vector<float> dy_buf = Random(o + s.m * ldy, 4), x_buf = Random(o + s.m * ldx, 5);
  std::vector<float> dw_buf = Random(o + s.n * s.k + kGuard, 6);
  std::vector<float> db_buf = Random(o + s.n + kGuard, 7);
  const std::vector<float> dw0 = dw_buf, db0 = db_buf;
  const float* dy = dy_buf.data() + o;
  const float* x = x_buf.data() + o;
  grad_weight(dy, ldy, x, ldx, s.m, s.n, s.k, dw_buf.data() + o,
              with_bias ? db_buf.data() + o : nullptr);
  const std::string where = Describe(s) + (with_bias ? " with dbias" : " without dbias") + ": ";
  for (int64_t at = 0; at < static_cast<int64_t>(dw_buf.size()); ++at) {
    if (at < o || at >= o + s.n * s.k) {
      if (dw_buf[at] != dw0[at]) return where + "wrote outside dW at float " + std::to_string(at);
      continue;
    }
    const int64_t c = (at - o) / s.k, i = (at - o) % s.k;
    double want = dw0[at], mag = std::fabs(want);
    for (int64_t r = 0; r < s.m; ++r) {
      want += double(dy[r * ldy + c]) * x[r * ldx + i];
      mag += std::fabs(double(dy[r * ldy + c]) * x[r * ldx + i]);
    }
    const std::string failure = CheckClose(
        "dW[" + std::to_string(c) + "," + std::to_string(i) + "]", dw_buf[at], want, mag, s.m);
    if (!failure.empty()) return where + failure;
  }
  for (int64_t at = 0; at < static_cast<int64_t>(db_buf.size()); ++at) {
    if (!with_bias || at < o || at >= o + s.n) {
      if (db_buf[at] != db0[at])
        return where + "wrote outside dbias at float " + std::to_string(at);
      continue;
    }
    const int64_t c = at - o;
    double want = db0[at], mag = std::fabs(want);
    for (int64_t r = 0; r < s.m; ++r) {
      want += dy[r * ldy + c];
      mag += std::fabs(dy[r * ldy + c]);
    }
    const std::string failure =
        CheckClose("dbias[" + std::to_string(c) + "]", db_buf[at], want, mag, s.m);
    if (!failure.empty()) return where + failure;
  }
  return "";
}

}  // namespace testing_matmul_grad
}  // namespace attnkit
#endif  // ATTNKIT_OPS_MATMUL_GRAD_TEST_ONCE_

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {

void TestLinearGradInputEveryShape() {
  for (const testing_matmul_grad::Shape& s : testing_matmul_grad::Shapes()) {
    for (bool accumulate : {false, true}) {
      const std::string failure =
          testing_matmul_grad::GradInputFailure(s, accumulate, LinearGradInput);
      EXPECT_TRUE(failure.empty()) << failure << " on " << hwy::TargetName(HWY_TARGET);
    }
  }
}

void TestLinearGradWeightEveryShape() {
  for (const testing_matmul_grad::Shape& s : testing_matmul_grad::Shapes()) {
    for (bool with_bias : {false, true}) {
      const std::string failure =
          testing_matmul_grad::GradWeightFailure(s, with_bias, LinearGradWeight);
      EXPECT_TRUE(failure.empty()) << failure << " on " << hwy::TargetName(HWY_TARGET);
    }
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "ops/matmul.h"

namespace attnkit {

HWY_BEFORE_TEST(HwyMatmulGradTargetTest);
HWY_EXPORT_AND_TEST_P(HwyMatmulGradTargetTest, TestLinearGradInputEveryShape);
HWY_EXPORT_AND_TEST_P(HwyMatmulGradTargetTest, TestLinearGradWeightEveryShape);

class MatmulGradTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MatmulGradTest, GradInputMatchesDoublePrecision) {
  auto provider = FindMatmul(GetParam());
  ASSERT_TRUE(provider.ok()) << provider.status();
  const MatmulProvider& mm = **provider;
  for (const testing_matmul_grad::Shape& s : testing_matmul_grad::Shapes()) {
    for (bool accumulate : {false, true}) {
      const std::string failure = testing_matmul_grad::GradInputFailure(
          s, accumulate,
          [&](const float* dy, int64_t ldy, const float* w, int64_t m, int64_t n, int64_t k,
              float* dx, int64_t ldx,
              bool acc) { mm.LinearGradInput(dy, ldy, w, m, n, k, dx, ldx, acc); });
      EXPECT_TRUE(failure.empty()) << GetParam() << " " << failure;
    }
  }
}

TEST_P(MatmulGradTest, GradWeightAccumulatesAndSumsBias) {
  auto provider = FindMatmul(GetParam());
  ASSERT_TRUE(provider.ok()) << provider.status();
  const MatmulProvider& mm = **provider;
  for (const testing_matmul_grad::Shape& s : testing_matmul_grad::Shapes()) {
    for (bool with_bias : {false, true}) {
      const std::string failure = testing_matmul_grad::GradWeightFailure(
          s, with_bias,
          [&](const float* dy, int64_t ldy, const float* x, int64_t ldx, int64_t m, int64_t n,
              int64_t k, float* dw,
              float* dbias) { mm.LinearGradWeight(dy, ldy, x, ldx, m, n, k, dw, dbias); });
      EXPECT_TRUE(failure.empty()) << GetParam() << " " << failure;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllProviders, MatmulGradTest, ::testing::ValuesIn(MatmulNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace attnkit
#endif  // HWY_ONCE
