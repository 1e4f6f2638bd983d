// The matmul providers against a double-precision Y = X W^T + b: the Highway
// kernel on every compiled target (sizes from 0 to a few vectors, K past the
// block size, misaligned starts, non-tight row strides), then every provider
// through the registry.
#include <cmath>
#include <random>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/tests/hwy_gtest.h"
#include "ops/hwy_matmul-inl.h"

#ifndef ATTNKIT_OPS_MATMUL_TEST_ONCE_
#define ATTNKIT_OPS_MATMUL_TEST_ONCE_
namespace attnkit {
namespace testing_matmul {

struct Case {
  int64_t m, n, k;
  int64_t x_offset;  // floats: misaligns X
  int64_t ldx_pad, ldy_pad;
  bool bias;
};

inline std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (int64_t m : {1, 3, 4, 5, 9}) {
    for (int64_t n : {1, 2, 3, 7, 50}) {
      for (int64_t k : {0, 1, 7, 16, 33, 64, 513, 1030}) {
        cases.push_back({m, n, k, (m + n) % 3, n % 2, k % 3, (m + k) % 2 == 1});
      }
    }
  }
  return cases;
}

// Runs `linear` on a case and returns the largest error relative to the
// bound 4 * 2^-24 * sum_k |x w| (+ |b|), which fp32 accumulation meets.
template <typename Fn>
double WorstRelativeError(const Case& c, Fn linear) {
  std::mt19937 rng(static_cast<uint32_t>(c.m * 1000003 + c.n * 1009 + c.k));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t ldx = c.k + c.ldx_pad, ldy = c.n + c.ldy_pad;
  std::vector<float> xbuf(c.x_offset + c.m * ldx + 1), w(c.n * c.k), b(c.n), y(c.m * ldy, -7.0f);
  for (float& v : xbuf) v = u(rng);
  for (float& v : w) v = u(rng);
  for (float& v : b) v = u(rng);
  const float* x = xbuf.data() + c.x_offset;
  linear(x, ldx, w.data(), c.bias ? b.data() : nullptr, c.m, c.n, c.k, y.data(), ldy);
  double worst = 0;
  for (int64_t r = 0; r < c.m; ++r) {
    for (int64_t j = 0; j < c.n; ++j) {
      double want = c.bias ? b[j] : 0.0, mag = c.bias ? std::fabs(b[j]) : 0.0;
      for (int64_t i = 0; i < c.k; ++i) {
        want += double(x[r * ldx + i]) * w[j * c.k + i];
        mag += std::fabs(double(x[r * ldx + i]) * w[j * c.k + i]);
      }
      const double bound = 4 * std::ldexp(1.0, -24) * (mag + 1e-30) * std::max<int64_t>(1, c.k);
      worst = std::max(worst, std::fabs(y[r * ldy + j] - want) / bound);
    }
    for (int64_t j = c.n; j < ldy; ++j) {
      if (y[r * ldy + j] != -7.0f) return 1e9;  // wrote into the row padding
    }
  }
  return worst;
}

}  // namespace testing_matmul
}  // namespace attnkit
#endif  // ATTNKIT_OPS_MATMUL_TEST_ONCE_

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {

void TestLinearEveryShape() {
  for (const testing_matmul::Case& c : testing_matmul::Cases()) {
    const double err = testing_matmul::WorstRelativeError(c, Linear);
    EXPECT_LE(err, 1.0) << "m " << c.m << " n " << c.n << " k " << c.k << " on "
                        << hwy::TargetName(HWY_TARGET);
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "ops/matmul.h"

namespace attnkit {

HWY_BEFORE_TEST(HwyMatmulTargetTest);
HWY_EXPORT_AND_TEST_P(HwyMatmulTargetTest, TestLinearEveryShape);

class MatmulProviderTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MatmulProviderTest, MatchesDoublePrecision) {
  auto provider = FindMatmul(GetParam());
  ASSERT_TRUE(provider.ok()) << provider.status();
  EXPECT_EQ((*provider)->Name(), GetParam());
  for (const testing_matmul::Case& c : testing_matmul::Cases()) {
    const double err = testing_matmul::WorstRelativeError(
        c, [&](const float* x, int64_t ldx, const float* w, const float* b, int64_t m, int64_t n,
               int64_t k, float* y,
               int64_t ldy) { (*provider)->Linear(x, ldx, w, b, m, n, k, y, ldy); });
    EXPECT_LE(err, 1.0) << "m " << c.m << " n " << c.n << " k " << c.k;
  }
}

INSTANTIATE_TEST_SUITE_P(AllProviders, MatmulProviderTest, ::testing::ValuesIn(MatmulNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(MatmulRegistryTest, ProviderGoesWithBackend) {
  EXPECT_EQ(MatmulForBackend("reference").Name(), "reference");
  EXPECT_EQ(MatmulForBackend("reference-plugin").Name(), "reference");
  EXPECT_EQ(MatmulForBackend("highway").Name(), "highway");
  EXPECT_EQ(MatmulForBackend("blas").Name(), "blas");
  EXPECT_EQ(MatmulForBackend("cuda").Name(), kDefaultMatmul);
  EXPECT_EQ(FindMatmul("eigen").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace attnkit
#endif  // HWY_ONCE
