// A backend suite of each parameter shape (a tuple, a struct with a backend
// field, a plain name) whose tests skip as $ATTNKIT_PROBE_SKIP says, run by
// required_skips_test.sh with and without $ATTNKIT_REQUIRE_BACKENDS:
//   own        every test GTEST_SKIPs by itself (a required backend's test
//              must then fail the run, whatever its parameter's shape);
//   unclaimed  every test asks CheckRunnable about a causal problem, which
//              "probe-f32" does not claim (a skip allowed when required);
//   unset      no test skips.
#include <cstdlib>
#include <memory>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "backends/builtin.h"
#include "gtest/gtest.h"
#include "tests/backend_test_env.h"

namespace attnkit {
namespace {

// Claims the defaults of Capabilities (f32, no mask): a causal problem is a
// case it does not claim. Never runs.
class ProbeBackend : public Backend {
 public:
  std::string Name() const override { return "probe-f32"; }
  std::string Description() const override { return "required_skip_probe's backend"; }
  Capabilities Caps() const override { return Capabilities(); }

 protected:
  absl::Status ForwardImpl(const AttentionProblem&, const AttentionArgs&, RunInfo*) override {
    return absl::InternalError("the probe backend never runs");
  }
};

const bool kProbeRegistered = [] {
  GlobalRegistry().Register(std::make_unique<ProbeBackend>(), "required_skip_probe").IgnoreError();
  return true;
}();

// Skips (or not) as $ATTNKIT_PROBE_SKIP says, on `backend`.
void Act(const std::string& backend) {
  const char* env = std::getenv("ATTNKIT_PROBE_SKIP");
  const std::string mode = env == nullptr ? "" : env;
  if (mode == "own") GTEST_SKIP() << "the probe's own skip";
  if (mode == "unclaimed") {
    AttentionProblem p = BasicProblem(1, 1, 1, 2, 2, 8);
    p.mask = MaskKind::kCausal;
    auto b = GlobalRegistry().Find(backend);
    ASSERT_TRUE(b.ok()) << b.status();
    const absl::Status runnable = testing_env::CheckRunnable(**b, p);
    if (!runnable.ok()) GTEST_SKIP() << runnable;
  }
}

const std::vector<std::string> kBackends = {"reference", "probe-f32"};

class TupleProbe : public testing_env::BackendParamTest<std::tuple<std::string, int>> {};
TEST_P(TupleProbe, Acts) { Act(std::get<0>(GetParam())); }
INSTANTIATE_TEST_SUITE_P(Probe, TupleProbe,
                         ::testing::Combine(::testing::ValuesIn(kBackends), ::testing::Values(7)),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
                           return absl::StrCat(testing_env::SafeName(std::get<0>(info.param)), "_",
                                               std::get<1>(info.param));
                         });

struct StructCase {
  int grid_index;
  std::string backend;
};
const std::string& BackendOfParam(const StructCase& c) { return c.backend; }

class StructProbe : public testing_env::BackendParamTest<StructCase> {};
TEST_P(StructProbe, Acts) { Act(GetParam().backend); }
INSTANTIATE_TEST_SUITE_P(Probe, StructProbe,
                         ::testing::Values(StructCase{3, "reference"}, StructCase{3, "probe-f32"}),
                         [](const ::testing::TestParamInfo<StructCase>& info) {
                           return testing_env::SafeName(info.param.backend);
                         });

// A plain name without BackendParamTest: recognised by its parameter.
class StringProbe : public ::testing::TestWithParam<std::string> {};
TEST_P(StringProbe, Acts) { Act(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Probe, StringProbe, ::testing::ValuesIn(kBackends),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return testing_env::SafeName(info.param);
                         });

}  // namespace
}  // namespace attnkit
