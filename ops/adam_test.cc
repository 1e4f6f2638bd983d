// Adam against the update written out in double precision (bias correction,
// decoupled weight decay on decay = true parameters only), convergence on a
// quadratic, and option validation.
#include "ops/adam.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace attnkit {
namespace {

using ::testing::HasSubstr;

TEST(AdamTest, MatchesTheUpdateRuleWithBiasCorrection) {
  std::vector<float> w = {0.5f, -1.0f, 2.0f}, gw(3), b = {0.25f}, gb(1);
  AdamOptions o;
  o.lr = 0.1f;
  o.beta1 = 0.8f;
  o.beta2 = 0.9f;
  o.eps = 1e-6f;
  o.weight_decay = 0.5f;
  auto adam =
      Adam::Create({{"w", w.data(), gw.data(), 3, true}, {"b", b.data(), gb.data(), 1, false}}, o);
  ASSERT_TRUE(adam.ok()) << adam.status();
  EXPECT_EQ(adam->NumParameters(), 4);
  // The same in double, written as the papers do.
  std::vector<double> p = {0.5, -1.0, 2.0, 0.25}, m(4, 0.0), v(4, 0.0);
  const bool decay[] = {true, true, true, false};
  for (int t = 1; t <= 5; ++t) {
    const double grads[] = {0.3 * t, -0.2, 1.5 / t, -0.7};
    for (int i = 0; i < 3; ++i) gw[i] = static_cast<float>(grads[i]);
    gb[0] = static_cast<float>(grads[3]);
    adam->Step();
    for (int i = 0; i < 4; ++i) {
      m[i] = 0.8 * m[i] + 0.2 * grads[i];
      v[i] = 0.9 * v[i] + 0.1 * grads[i] * grads[i];
      const double mh = m[i] / (1 - std::pow(0.8, t)), vh = v[i] / (1 - std::pow(0.9, t));
      p[i] -= 0.1 * (mh / (std::sqrt(vh) + 1e-6) + (decay[i] ? 0.5 * p[i] : 0.0));
    }
    EXPECT_EQ(adam->steps(), t);
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(w[i], p[i], 1e-5) << "step " << t << " w" << i;
    EXPECT_NEAR(b[0], p[3], 1e-5) << "step " << t;
  }
  // The first step moves each parameter by lr against its gradient's sign
  // (m_hat / sqrt(v_hat) = g / |g|): the bias correction at work.
  std::vector<float> z = {1.0f}, gz = {1e-3f};
  auto first = Adam::Create({{"z", z.data(), gz.data(), 1, false}}, AdamOptions{});
  ASSERT_TRUE(first.ok());
  first->Step();
  EXPECT_NEAR(z[0], 1.0f - 1e-3f, 1e-6);
}

TEST(AdamTest, MinimisesAQuadratic) {
  // f(x) = sum (x_i - c_i)^2 / 2, gradient x - c.
  const std::vector<float> c = {3.0f, -2.0f, 0.5f, 10.0f};
  std::vector<float> x(4, 0.0f), g(4);
  AdamOptions o;
  o.lr = 0.1f;
  auto adam = Adam::Create({{"x", x.data(), g.data(), 4, true}}, o);
  ASSERT_TRUE(adam.ok());
  for (int step = 0; step < 2000; ++step) {
    for (int i = 0; i < 4; ++i) g[i] = x[i] - c[i];
    adam->Step();
  }
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(x[i], c[i], 1e-2) << i;
}

TEST(AdamTest, RefusesBadOptionsByName) {
  std::vector<float> x(1), g(1);
  const std::vector<ParamRef> params = {{"x", x.data(), g.data(), 1, true}};
  AdamOptions o;
  o.lr = 0.0f;
  EXPECT_THAT(std::string(Adam::Create(params, o).status().message()),
              HasSubstr("lr (0) must be finite and > 0"));
  o = AdamOptions{};
  o.beta2 = 1.0f;
  EXPECT_THAT(std::string(Adam::Create(params, o).status().message()),
              HasSubstr("beta2 (1) must be finite and in [0, 1)"));
  o = AdamOptions{};
  o.weight_decay = -1.0f;
  EXPECT_THAT(std::string(Adam::Create(params, o).status().message()),
              HasSubstr("weight_decay (-1)"));
  o = AdamOptions{};
  o.eps = NAN;
  EXPECT_FALSE(Adam::Create(params, o).ok());
  EXPECT_THAT(
      std::string(
          Adam::Create({{"y", nullptr, g.data(), 1, true}}, AdamOptions{}).status().message()),
      HasSubstr("parameter 'y'"));
}

}  // namespace
}  // namespace attnkit
