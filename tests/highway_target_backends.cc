#include "tests/highway_target_backends.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/blas/blas_backend.h"
#include "backends/blas/scalar_engine.h"
#include "backends/builtin.h"
#include "backends/highway/highway_backend.h"
#include "backends/highway/sdpa.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "tests/backend_test_env.h"

namespace attnkit {
namespace testing_env {

std::vector<std::tuple<std::string, size_t>> BackendGridCases(size_t grid_size) {
  const std::set<std::string>& reduced = ReducedGridBackends();
  std::vector<std::tuple<std::string, size_t>> cases;
  for (const std::string& name : BackendNames()) {
    const size_t stride = reduced.count(name) != 0 ? kReducedStride : 1;
    for (size_t i = 0; i < grid_size; i += stride) cases.emplace_back(name, i);
  }
  return cases;
}

const std::set<std::string>& ReducedGridBackends() {
  static const auto* names = [] {
    auto* added = new std::set<std::string>;
    auto add = [added](std::unique_ptr<Backend> backend) {
      const std::string name = backend->Name();
      const absl::Status s = GlobalRegistry().Register(LinkedThroughCAbi(std::move(backend)));
      if (s.ok()) {
        added->insert(name);
      } else {
        ADD_FAILURE() << s;
      }
    };
    const std::vector<int64_t> targets = AvailableFlashTargets();
    for (size_t t = 1; t < targets.size(); ++t) {  // targets[0] is the dispatched one
      HighwayOptions options;
      options.target = hwy::TargetName(targets[t]);
      options.name = absl::StrCat("highway-", options.target);
      add(MakeHighwayBackend(options));
    }
    BlasOptions scalar;
    scalar.engine = blas::MakeScalarEngine();
    add(MakeBlasBackend(scalar));
    return added;
  }();
  return *names;
}

}  // namespace testing_env
}  // namespace attnkit
