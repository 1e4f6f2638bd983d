#include "ops/adam.h"

#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace attnkit {

absl::StatusOr<Adam> Adam::Create(std::vector<ParamRef> params, const AdamOptions& options) {
  const struct {
    const char* name;
    float value;
    bool ok;
    const char* rule;
  } checks[] = {
      {"lr", options.lr, options.lr > 0.0f, "> 0"},
      {"beta1", options.beta1, options.beta1 >= 0.0f && options.beta1 < 1.0f, "in [0, 1)"},
      {"beta2", options.beta2, options.beta2 >= 0.0f && options.beta2 < 1.0f, "in [0, 1)"},
      {"eps", options.eps, options.eps > 0.0f, "> 0"},
      {"weight_decay", options.weight_decay, options.weight_decay >= 0.0f, ">= 0"},
  };
  for (const auto& c : checks) {
    if (!c.ok || !std::isfinite(c.value)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("Adam %s (%g) must be finite and %s", c.name, c.value, c.rule));
    }
  }
  Adam adam;
  for (const ParamRef& p : params) {
    if (p.size < 0 || (p.size > 0 && (p.value == nullptr || p.grad == nullptr))) {
      return absl::InvalidArgumentError(
          absl::StrFormat("parameter '%s' (size %d) needs value and grad storage", p.name, p.size));
    }
    adam.m_.emplace_back(p.size, 0.0f);
    adam.v_.emplace_back(p.size, 0.0f);
  }
  adam.params_ = std::move(params);
  adam.options_ = options;
  return adam;
}

int64_t Adam::NumParameters() const {
  int64_t n = 0;
  for (const ParamRef& p : params_) n += p.size;
  return n;
}

void Adam::Step() {
  ++t_;
  const AdamOptions& o = options_;
  const double c1 = 1.0 - std::pow(double(o.beta1), double(t_));
  const double c2 = 1.0 - std::pow(double(o.beta2), double(t_));
  const float step = static_cast<float>(o.lr / c1);
  const float inv_sqrt_c2 = static_cast<float>(1.0 / std::sqrt(c2));
  for (size_t k = 0; k < params_.size(); ++k) {
    const ParamRef& p = params_[k];
    float* m = m_[k].data();
    float* v = v_[k].data();
    const float decay = p.decay ? o.lr * o.weight_decay : 0.0f;
    for (int64_t i = 0; i < p.size; ++i) {
      const float g = p.grad[i];
      m[i] = o.beta1 * m[i] + (1.0f - o.beta1) * g;
      v[i] = o.beta2 * v[i] + (1.0f - o.beta2) * g * g;
      // lr * m_hat / (sqrt(v_hat) + eps), with the corrections folded in.
      p.value[i] -= step * m[i] / (std::sqrt(v[i]) * inv_sqrt_c2 + o.eps) + decay * p.value[i];
    }
  }
}

}  // namespace attnkit
