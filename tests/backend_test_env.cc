#include "tests/backend_test_env.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/builtin.h"
#include "gtest/gtest.h"

namespace attnkit {
namespace testing_env {
namespace {

struct Counts {
  int passed = 0, failed = 0, skipped = 0;
  double max_bound_fraction = -1;  // -1: no comparison recorded
  std::map<std::string, int> skip_reasons;
};

std::mutex& SummaryMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}

std::map<std::string, Counts>& Summary() {
  static auto* summary = new std::map<std::string, Counts>;
  return *summary;
}

}  // namespace

std::vector<std::string> BackendNames() { return GlobalRegistry().Names(); }

std::string SafeName(const std::string& name) {
  std::string out = name;
  for (char& c : out) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return out;
}

void Record(const std::string& backend, Outcome outcome, const std::string& skip_reason) {
  std::lock_guard<std::mutex> lock(SummaryMutex());
  Counts& c = Summary()[backend];
  switch (outcome) {
    case Outcome::kPassed:
      ++c.passed;
      break;
    case Outcome::kFailed:
      ++c.failed;
      break;
    case Outcome::kSkipped:
      ++c.skipped;
      ++c.skip_reasons[skip_reason];
      break;
  }
}

absl::Status CheckRunnable(const Backend& b, const AttentionProblem& p) {
  const absl::Status supported = b.Supports(p);
  if (supported.ok()) return supported;
  if (IsRequired(b.Name()) && !b.Available().ok()) {
    ADD_FAILURE() << b.Name() << " is named in ATTNKIT_REQUIRE_BACKENDS but skips " << p.Id()
                  << ", unavailable: " << supported.message();
  }
  const absl::Status claimed = CheckCapabilities(b.Caps(), p);
  if (!claimed.ok()) {
    NoteUnclaimedCase(claimed);
  } else if (b.Available().ok()) {
    ADD_FAILURE() << b.Name() << " refuses " << p.Id()
                  << " although its capabilities cover it: " << supported;
  }
  return supported;
}

namespace {
constexpr char kBackendProperty[] = "backend";
constexpr char kUnclaimedProperty[] = "unclaimed_case";
}  // namespace

void RecordTestBackend(const std::string& backend) {
  ::testing::Test::RecordProperty(kBackendProperty, backend);
}

void NoteUnclaimedCase(const absl::Status& why) {
  ::testing::Test::RecordProperty(kUnclaimedProperty,
                                  why.message().empty() ? "unclaimed" : std::string(why.message()));
}

void RecordBoundFraction(const std::string& backend, double fraction) {
  std::lock_guard<std::mutex> lock(SummaryMutex());
  Counts& c = Summary()[backend];
  c.max_bound_fraction = std::max(c.max_bound_fraction, fraction);
}

bool RunsOrRecordsSkip(const std::string& backend, const AttentionProblem& p,
                       std::string* skip_reason) {
  auto b = GlobalRegistry().Find(backend);
  if (!b.ok()) {
    ADD_FAILURE() << b.status();
    *skip_reason = std::string(b.status().message());
    return false;
  }
  const absl::Status s = CheckRunnable(**b, p);
  if (s.ok()) return true;
  *skip_reason = std::string(s.message());
  Record(backend, Outcome::kSkipped, *skip_reason);
  return false;
}

std::vector<std::string>& PluginPathsStore() {
  static auto* paths = new std::vector<std::string>;
  return *paths;
}

const std::vector<std::string>& PluginPaths() { return PluginPathsStore(); }

bool LoadPluginsFromArgs(int* argc, char** argv) {
  bool ok = true;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    constexpr char kFlag[] = "--plugin=";
    if (std::strncmp(argv[i], kFlag, sizeof(kFlag) - 1) == 0) {
      PluginPathsStore().push_back(argv[i] + sizeof(kFlag) - 1);
      const absl::Status s = GlobalRegistry().LoadPlugin(argv[i] + sizeof(kFlag) - 1);
      if (!s.ok()) {
        std::fprintf(stderr, "FATAL: %s\n", std::string(s.message()).c_str());
        ok = false;
      }
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  const std::vector<std::string> names = BackendNames();
  for (const std::string& required : RequiredBackends()) {
    if (std::find(names.begin(), names.end(), required) == names.end()) {
      std::fprintf(stderr,
                   "FATAL: ATTNKIT_REQUIRE_BACKENDS names '%s', which is not registered; "
                   "registered: %s\n",
                   required.c_str(), absl::StrJoin(names, ", ").c_str());
      ok = false;
    }
  }
  return ok;
}

namespace {

// The value of test property `key` in `r`; "" when it has none.
std::string Property(const ::testing::TestResult& r, const char* key) {
  for (int i = 0; i < r.test_property_count(); ++i) {
    if (std::strcmp(r.GetTestProperty(i).key(), key) == 0) return r.GetTestProperty(i).value();
  }
  return "";
}

// The backend a test exercises: its "backend" property (BackendParamTest),
// else its parameter when that is a plain string (a suite over names that
// does not derive from BackendParamTest); "" for neither.
std::string TestBackend(const ::testing::TestInfo& info) {
  std::string backend = Property(*info.result(), kBackendProperty);
  if (!backend.empty() || info.value_param() == nullptr) return backend;
  const std::string param = info.value_param();
  if (param.size() >= 2 && param.front() == '"' && param.back() == '"') {
    return param.substr(1, param.size() - 2);
  }
  return "";
}

// Fails the run when a test of a required backend ends skipped, whatever
// skip site it took (CheckRunnable already fails the case itself when the
// backend is unavailable; this catches the suites' own GTEST_SKIPs). A test
// that noted a case its backend's capabilities do not claim may skip.
class RequiredSkipListener : public ::testing::EmptyTestEventListener {
 public:
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (!info.result()->Skipped()) return;
    const std::string backend = TestBackend(info);
    if (backend.empty() || !IsRequired(backend)) return;
    if (!Property(*info.result(), kUnclaimedProperty).empty()) return;
    std::fprintf(stderr, "FAILED: %s.%s skipped required backend %s\n", info.test_suite_name(),
                 info.name(), backend.c_str());
    ++required_skips_;
  }
  int required_skips() const { return required_skips_; }

 private:
  int required_skips_ = 0;
};

RequiredSkipListener* g_required_skips = nullptr;

}  // namespace

void InstallRequiredSkipListener() {
  if (g_required_skips != nullptr) return;
  g_required_skips = new RequiredSkipListener;
  ::testing::UnitTest::GetInstance()->listeners().Append(g_required_skips);  // owns it
}

int RequiredSkips() { return g_required_skips == nullptr ? 0 : g_required_skips->required_skips(); }

void PrintSummary() {
  std::lock_guard<std::mutex> lock(SummaryMutex());
  if (Summary().empty()) return;
  std::printf("\n=== attnkit backend summary (cases run / passed / failed / skipped) ===\n");
  for (const auto& [name, c] : Summary()) {
    std::printf("%-20s run %5d  passed %5d  failed %5d  skipped %5d", name.c_str(),
                c.passed + c.failed, c.passed, c.failed, c.skipped);
    if (c.max_bound_fraction >= 0) std::printf("  max error/bound %.3f", c.max_bound_fraction);
    std::printf("\n");
    for (const auto& [reason, n] : c.skip_reasons) {
      std::printf("    skipped %4d: %s\n", n, reason.c_str());
    }
  }
}

}  // namespace testing_env
}  // namespace attnkit
