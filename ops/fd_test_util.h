// Central finite differences for the gradient tests of the trainable layers:
// each element of each parameter is moved by +-eps, the loss recomputed, and
// (L(p + eps) - L(p - eps)) / (2 eps) compared with the analytic gradient.
#ifndef ATTNKIT_OPS_FD_TEST_UTIL_H_
#define ATTNKIT_OPS_FD_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ops/parameter.h"

namespace attnkit {
namespace fd_test {

struct FdResult {
  int64_t checked = 0;
  // max over elements of |analytic - fd| / (atol + rtol * |fd|); <= 1 passes.
  double worst_ratio = 0;
  std::string worst;        // "name[i]: analytic a, fd f"
  double max_abs_grad = 0;  // the largest |fd|, to show the test is not vacuous
};

// `params`' grad arrays hold the analytic gradients (they are read before any
// loss call and not changed). `loss` recomputes the loss from the current
// values; every value is restored after its two evaluations.
FdResult CheckGradients(const std::vector<ParamRef>& params, const std::function<double()>& loss,
                        float eps, double atol, double rtol);

}  // namespace fd_test
}  // namespace attnkit

#endif  // ATTNKIT_OPS_FD_TEST_UTIL_H_
