#include "tests/required_backends.h"

#include <cstdlib>

#include "absl/strings/str_split.h"

namespace attnkit {
namespace testing_env {

const std::set<std::string>& RequiredBackends() {
  static const auto* required = [] {
    auto* names = new std::set<std::string>;
    if (const char* env = std::getenv("ATTNKIT_REQUIRE_BACKENDS")) {
      for (absl::string_view n : absl::StrSplit(env, ',', absl::SkipWhitespace())) {
        names->insert(std::string(n));
      }
    }
    return names;
  }();
  return *required;
}

}  // namespace testing_env
}  // namespace attnkit
