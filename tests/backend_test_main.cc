// main() for the suites parameterised over every backend: plugins first (so
// the generated test list includes them), then gtest, then the summary.
#include <cstdio>

#include "gtest/gtest.h"
#include "tests/backend_test_env.h"

int main(int argc, char** argv) {
  if (!attnkit::testing_env::LoadPluginsFromArgs(&argc, argv)) return 1;
  testing::InitGoogleTest(&argc, argv);
  attnkit::testing_env::InstallRequiredSkipListener();
  const int result = RUN_ALL_TESTS();
  attnkit::testing_env::PrintSummary();
  if (const int skips = attnkit::testing_env::RequiredSkips(); skips > 0) {
    std::fprintf(stderr,
                 "FAILED: %d skipped test(s) of backends named in ATTNKIT_REQUIRE_BACKENDS\n",
                 skips);
    return 1;
  }
  return result;
}
