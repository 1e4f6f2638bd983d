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
  if (b.Available().ok() && CheckCapabilities(b.Caps(), p).ok()) {
    ADD_FAILURE() << b.Name() << " refuses " << p.Id()
                  << " although its capabilities cover it: " << supported;
  }
  return supported;
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

// Fails the run when a test whose parameter is a required backend ends
// skipped, whatever skip site it took (CheckRunnable already fails the case
// itself; this catches the suites' own GTEST_SKIPs).
class RequiredSkipListener : public ::testing::EmptyTestEventListener {
 public:
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.value_param() == nullptr || !info.result()->Skipped()) return;
    std::string param = info.value_param();
    if (param.size() >= 2 && param.front() == '"' && param.back() == '"') {
      param = param.substr(1, param.size() - 2);
    }
    if (!IsRequired(param)) return;
    std::fprintf(stderr, "FAILED: %s.%s skipped required backend %s\n", info.test_suite_name(),
                 info.name(), param.c_str());
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
