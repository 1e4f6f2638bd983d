// $ATTNKIT_REQUIRE_BACKENDS=a,b: backends a test run must exercise. A named
// backend that is unavailable fails every case it skips, so a suite run on a
// GPU machine cannot pass by skipping the GPU backends. A case its
// capabilities do not claim (cuda-cublas and paged K/V, FAST over int8) is
// skipped as for any backend; refusing a case they do claim fails anywhere.
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
