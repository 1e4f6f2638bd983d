// Shared set-up for the suites that run on every registered backend: plugins
// named on the command line (--plugin=PATH) are loaded into the global
// registry before the parameterised tests are generated, and a summary of
// what ran and what was skipped is printed at the end.
#ifndef ATTNKIT_TESTS_BACKEND_TEST_ENV_H_
#define ATTNKIT_TESTS_BACKEND_TEST_ENV_H_

#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "core/backend.h"
#include "core/problem.h"
#include "gtest/gtest.h"
#include "tests/required_backends.h"

namespace attnkit {
namespace testing_env {

// Names of every backend in GlobalRegistry() after plugins are loaded.
std::vector<std::string> BackendNames();

// gtest-safe form of a backend name ("reference-plugin" -> "reference_plugin").
std::string SafeName(const std::string& name);

// Records an outcome for the end-of-run summary.
enum class Outcome { kPassed, kFailed, kSkipped };
void Record(const std::string& backend, Outcome outcome, const std::string& skip_reason = "");
// Keeps the largest error/bound fraction seen for `backend` (the summary
// prints it: how close the backend runs to failing the oracle).
void RecordBoundFraction(const std::string& backend, double fraction);

// Returns OK when the test should run `p` on `b`. Otherwise returns the
// reason to skip, after adding a test failure if `b` refuses a case that its
// Caps() claim to cover while it is available, or if `b` is required; a
// refusal of a case the Caps() do not claim is noted (NoteUnclaimedCase).
absl::Status CheckRunnable(const Backend& b, const AttentionProblem& p);

// Names the backend the current test exercises: the test property "backend"
// (also in the XML report), which the required-skip listener reads.
void RecordTestBackend(const std::string& backend);
// Notes on the current test (property "unclaimed_case") that its backend
// refused a case its capabilities do not claim, for `why`: a skip a backend
// named in $ATTNKIT_REQUIRE_BACKENDS may take.
void NoteUnclaimedCase(const absl::Status& why);

// The backend of a suite's parameter: the name itself, or a tuple's first
// element. A suite over another type declares BackendOfParam(const Type&)
// in the namespace of Type (found by argument-dependent lookup).
inline const std::string& BackendOfParam(const std::string& name) { return name; }
template <typename... Rest>
const std::string& BackendOfParam(const std::tuple<std::string, Rest...>& param) {
  return std::get<0>(param);
}

// Base of every suite parameterised over backends: records the test's
// backend (RecordTestBackend) in the constructor, before SetUp and the body,
// so whichever skip a test takes, the listener knows whose it was.
template <typename Param>
class BackendParamTest : public ::testing::TestWithParam<Param> {
 protected:
  BackendParamTest() { RecordTestBackend(BackendOfParam(this->GetParam())); }
};

// CheckRunnable for the backend named `backend`; when it refuses, records
// the skip and stores the reason in *skip_reason. True when the test runs.
bool RunsOrRecordsSkip(const std::string& backend, const AttentionProblem& p,
                       std::string* skip_reason);

// For main(): loads --plugin= arguments (removing them from argv) and fails
// loudly if any plugin does not load or a backend named in
// $ATTNKIT_REQUIRE_BACKENDS is not registered;
// returns false on failure.
bool LoadPluginsFromArgs(int* argc, char** argv);
// The --plugin= paths LoadPluginsFromArgs saw, in order.
const std::vector<std::string>& PluginPaths();
void PrintSummary();

// After InitGoogleTest: counts tests of a required backend (the "backend"
// property of a BackendParamTest, or a plain backend-name parameter) that
// ended skipped through any GTEST_SKIP, unless the test noted an unclaimed
// case (NoteUnclaimedCase); main() fails the run when RequiredSkips() > 0.
void InstallRequiredSkipListener();
int RequiredSkips();

}  // namespace testing_env
}  // namespace attnkit

#endif  // ATTNKIT_TESTS_BACKEND_TEST_ENV_H_
