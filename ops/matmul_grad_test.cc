// Linear's backward products (MatmulProvider::LinearGradInput and
// LinearGradWeight) on every provider against fp64 sums: odd sizes, k and n
// of 0, padded row strides, both accumulate modes, bias gradients, and no
// write outside the rows.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ops/matmul.h"

namespace attnkit {
namespace {

struct Shape {
  int64_t m, n, k;
};

std::vector<Shape> Shapes() {
  std::vector<Shape> out;
  for (int64_t m : {1, 3, 8}) {
    for (int64_t n : {0, 1, 5, 33}) {
      for (int64_t k : {0, 1, 7, 64}) out.push_back({m, n, k});
    }
  }
  return out;
}

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// |got - want| <= 4 * 2^-24 * (sum of |terms| + |start|) * max(1, terms).
bool Close(double got, double want, double mag, int64_t terms) {
  return std::fabs(got - want) <=
         4 * std::ldexp(1.0, -24) * (mag + 1e-30) * std::max<int64_t>(1, terms);
}

class MatmulGradTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MatmulGradTest, GradInputMatchesDoublePrecision) {
  const MatmulProvider& mm = **FindMatmul(GetParam());
  for (const Shape& s : Shapes()) {
    for (bool accumulate : {false, true}) {
      const int64_t ldy = s.n + 1, ldx = s.k + 2;
      const std::vector<float> dy = Random(s.m * ldy, 1), w = Random(s.n * s.k, 2);
      std::vector<float> dx = Random(s.m * ldx, 3);
      const std::vector<float> start = dx;
      mm.LinearGradInput(dy.data(), ldy, w.data(), s.m, s.n, s.k, dx.data(), ldx, accumulate);
      for (int64_t r = 0; r < s.m; ++r) {
        for (int64_t i = 0; i < ldx; ++i) {
          const int64_t at = r * ldx + i;
          if (i >= s.k) {  // the row padding is untouched
            EXPECT_EQ(dx[at], start[at]) << "wrote padding at " << r << "," << i;
            continue;
          }
          double want = accumulate ? start[at] : 0.0, mag = std::fabs(want);
          for (int64_t c = 0; c < s.n; ++c) {
            want += double(dy[r * ldy + c]) * w[c * s.k + i];
            mag += std::fabs(double(dy[r * ldy + c]) * w[c * s.k + i]);
          }
          EXPECT_TRUE(Close(dx[at], want, mag, s.n))
              << "m " << s.m << " n " << s.n << " k " << s.k << " acc " << accumulate << ": "
              << dx[at] << " vs " << want;
        }
      }
    }
  }
}

TEST_P(MatmulGradTest, GradWeightAccumulatesAndSumsBias) {
  const MatmulProvider& mm = **FindMatmul(GetParam());
  for (const Shape& s : Shapes()) {
    const int64_t ldy = s.n + 3, ldx = s.k + 1;
    const std::vector<float> dy = Random(s.m * ldy, 4), x = Random(s.m * ldx, 5);
    std::vector<float> dw = Random(s.n * s.k, 6), db = Random(s.n, 7);
    const std::vector<float> dw0 = dw, db0 = db;
    mm.LinearGradWeight(dy.data(), ldy, x.data(), ldx, s.m, s.n, s.k, dw.data(), db.data());
    for (int64_t c = 0; c < s.n; ++c) {
      for (int64_t i = 0; i < s.k; ++i) {
        double want = dw0[c * s.k + i], mag = std::fabs(want);
        for (int64_t r = 0; r < s.m; ++r) {
          want += double(dy[r * ldy + c]) * x[r * ldx + i];
          mag += std::fabs(double(dy[r * ldy + c]) * x[r * ldx + i]);
        }
        EXPECT_TRUE(Close(dw[c * s.k + i], want, mag, s.m))
            << "m " << s.m << " n " << s.n << " k " << s.k << ": " << dw[c * s.k + i] << " vs "
            << want;
      }
      double want = db0[c], mag = std::fabs(want);
      for (int64_t r = 0; r < s.m; ++r) {
        want += dy[r * ldy + c];
        mag += std::fabs(dy[r * ldy + c]);
      }
      EXPECT_TRUE(Close(db[c], want, mag, s.m)) << "bias " << c;
    }
    // Without a bias pointer only dW changes.
    std::vector<float> dw2 = dw0;
    mm.LinearGradWeight(dy.data(), ldy, x.data(), ldx, s.m, s.n, s.k, dw2.data(), nullptr);
    for (size_t i = 0; i < dw2.size(); ++i) EXPECT_FLOAT_EQ(dw2[i], dw[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(AllProviders, MatmulGradTest, ::testing::ValuesIn(MatmulNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace attnkit
