// $ATTNKIT_REQUIRE_BACKENDS=a,b: backends a test run must exercise. For each
// named backend a skipped case is a failure, so a suite run on a GPU machine
// cannot pass by skipping the GPU backends.
#ifndef ATTNKIT_TESTS_REQUIRED_BACKENDS_H_
#define ATTNKIT_TESTS_REQUIRED_BACKENDS_H_

#include <set>
#include <string>

namespace attnkit {
namespace testing_env {

// The names in $ATTNKIT_REQUIRE_BACKENDS (comma-separated; empty when unset).
const std::set<std::string>& RequiredBackends();

inline bool IsRequired(const std::string& backend) {
  return RequiredBackends().count(backend) != 0;
}

}  // namespace testing_env
}  // namespace attnkit

#endif  // ATTNKIT_TESTS_REQUIRED_BACKENDS_H_
