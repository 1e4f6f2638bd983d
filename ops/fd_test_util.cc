#include "ops/fd_test_util.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace attnkit {
namespace fd_test {

FdResult CheckGradients(const std::vector<ParamRef>& params, const std::function<double()>& loss,
                        float eps, double atol, double rtol) {
  std::vector<std::vector<float>> analytic;
  for (const ParamRef& p : params) analytic.emplace_back(p.grad, p.grad + p.size);
  FdResult r;
  for (size_t k = 0; k < params.size(); ++k) {
    const ParamRef& p = params[k];
    for (int64_t i = 0; i < p.size; ++i) {
      const float saved = p.value[i];
      p.value[i] = saved + eps;
      const double up = loss();
      p.value[i] = saved - eps;
      const double down = loss();
      p.value[i] = saved;
      // The step actually taken in f32, not the nominal eps.
      const double h = double(saved + eps) - double(saved - eps);
      const double fd = (up - down) / h;
      const double ratio = std::fabs(analytic[k][i] - fd) / (atol + rtol * std::fabs(fd));
      ++r.checked;
      r.max_abs_grad = std::max(r.max_abs_grad, std::fabs(fd));
      if (!(ratio <= r.worst_ratio)) {  // NaN counts as worst
        r.worst_ratio = std::isnan(ratio) ? 1e30 : ratio;
        r.worst = absl::StrFormat("%s[%d]: analytic %.7g, fd %.7g", p.name, i, analytic[k][i], fd);
      }
    }
  }
  return r;
}

}  // namespace fd_test
}  // namespace attnkit
