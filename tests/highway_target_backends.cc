#include "tests/highway_target_backends.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/builtin.h"
#include "backends/highway/highway_backend.h"
#include "backends/highway/sdpa.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"

namespace attnkit {
namespace testing_env {

const std::set<std::string>& HighwayTargetBackends() {
  static const auto* names = [] {
    auto* added = new std::set<std::string>;
    const std::vector<int64_t> targets = AvailableFlashTargets();
    for (size_t t = 1; t < targets.size(); ++t) {  // targets[0] is the dispatched one
      HighwayOptions options;
      options.target = hwy::TargetName(targets[t]);
      options.name = absl::StrCat("highway-", options.target);
      const absl::Status s =
          GlobalRegistry().Register(LinkedThroughCAbi(MakeHighwayBackend(options)));
      if (s.ok()) {
        added->insert(options.name);
      } else {
        ADD_FAILURE() << s;
      }
    }
    return added;
  }();
  return *names;
}

}  // namespace testing_env
}  // namespace attnkit
