// The conformance suite: every registered backend (built in and plugin) x
// every problem of the grid, compared with the fp64 reference, and highway
// once more on every other Highway target this CPU supports (reduced grid).
// A backend that refuses a case says why through Supports(); the case is
// skipped, counted and reported, and refusing a case its Caps() cover is a
// failure.
#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "backends/builtin.h"
#include "core/compare.h"
#include "core/execute.h"
#include "core/problem_data.h"
#include "core/reference.h"
#include "gtest/gtest.h"
#include "tests/backend_test_env.h"
#include "tests/conformance_grid.h"
#include "tests/highway_target_backends.h"

namespace attnkit {
namespace {

using testing_env::Outcome;

const std::vector<AttentionProblem>& Grid() {
  static const auto* grid = new std::vector<AttentionProblem>(ConformanceGrid());
  return *grid;
}

// The reference result of a grid problem, computed once and shared by every
// backend (the inputs are regenerated from the same seed).
const ReferenceResult& Oracle(size_t index, const ProblemData& data) {
  static std::mutex mu;
  static auto* cache = new std::map<size_t, ReferenceResult>;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(index);
  if (it == cache->end()) {
    it = cache->emplace(index, ComputeReference(Grid()[index], data.args())).first;
  }
  return it->second;
}

std::string Bytes(const Tensor& t) {
  if (t.view().empty()) return "";
  return std::string(static_cast<const char*>(t.data()),
                     t.view().SpanElements() * DTypeSize(t.view().dtype));
}

// A backend that claims determinism gives the same bits when run again.
void ExpectSameBitsOnRerun(Backend* backend, const AttentionProblem& p, const ProblemData& data) {
  const std::string o = Bytes(data.o), lse = Bytes(data.lse);
  PoisonOutputs(data);
  const absl::Status run = RunOnBackend(backend, p, data, nullptr);
  ASSERT_TRUE(run.ok()) << run;
  EXPECT_TRUE(Bytes(data.o) == o && Bytes(data.lse) == lse)
      << backend->Name() << " claims to be deterministic but a second run of " << p.name
      << " gave different bits";
}

class ConformanceTest : public ::testing::TestWithParam<std::tuple<std::string, size_t>> {};

TEST_P(ConformanceTest, MatchesReference) {
  const std::string& backend_name = std::get<0>(GetParam());
  const size_t index = std::get<1>(GetParam());
  const AttentionProblem& p = Grid()[index];
  auto backend = GlobalRegistry().Find(backend_name);
  ASSERT_TRUE(backend.ok()) << backend.status();

  const absl::Status runnable = testing_env::CheckRunnable(**backend, p);
  if (!runnable.ok()) {
    testing_env::Record(backend_name, Outcome::kSkipped, std::string(runnable.message()));
    GTEST_SKIP() << runnable;
  }
  auto data = ProblemData::Random(p, p.seed);
  ASSERT_TRUE(data.ok()) << data.status();
  PoisonOutputs(*data);
  RunInfo info;
  const absl::Status run = RunOnBackend(*backend, p, *data, &info);
  if (!run.ok()) {
    testing_env::Record(backend_name, Outcome::kFailed);
    FAIL() << backend_name << " failed on " << p.name << ": " << run;
  }
  const Comparison c = CompareToReference(p, data->args(), Oracle(index, *data));
  testing_env::Record(backend_name, c.ok() ? Outcome::kPassed : Outcome::kFailed);
  EXPECT_TRUE(c.ok()) << backend_name << " [" << info.kernel << "] on " << p.name << ": "
                      << c.mismatches << " of " << c.checked << " outside the bound (largest "
                      << c.max_bound << ", error/bound up to " << c.max_bound_fraction << ")"
                      << (c.non_finite ? ", non-finite output" : "") << "; max abs error "
                      << c.max_abs_err << "; first: " << c.first_failure;
  testing_env::RecordBoundFraction(backend_name, c.max_bound_fraction);
  if ((*backend)->Caps().deterministic) ExpectSameBitsOnRerun(*backend, p, *data);
}

// The highway backend once more per Highway target this CPU supports besides
// the dispatched one (tests/highway_target_backends.h).
// "highway" runs the whole grid on the dispatched target; these run every
// kReducedStride-th problem, which still covers every shape and dtype pair
// but a third of the run time.
constexpr size_t kReducedStride = 3;

std::vector<std::tuple<std::string, size_t>> AllCases() {
  const std::set<std::string>& per_target = testing_env::HighwayTargetBackends();
  std::vector<std::tuple<std::string, size_t>> cases;
  for (const std::string& name : testing_env::BackendNames()) {
    const size_t stride = per_target.count(name) != 0 ? kReducedStride : 1;
    for (size_t i = 0; i < Grid().size(); i += stride) cases.emplace_back(name, i);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllBackends, ConformanceTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, size_t>>& info) {
                           return absl::StrCat(testing_env::SafeName(std::get<0>(info.param)), "_",
                                               Grid()[std::get<1>(info.param)].name);
                         });

TEST(ConformanceGridTest, IsLargeAndVaried) {
  const auto& grid = Grid();
  EXPECT_GE(grid.size(), 300u);
  std::set<int64_t> group_sizes, head_dims, q_lens;
  std::set<std::string> names;
  int fully_blocked = 0;
  int64_t max_decode_kv = 0;
  for (const AttentionProblem& p : grid) {
    EXPECT_TRUE(ValidateProblem(p).ok()) << p.name;
    EXPECT_TRUE(names.insert(p.name).second) << "duplicate case name " << p.name;
    group_sizes.insert(p.group_size());
    head_dims.insert(p.head_dim);
    q_lens.insert(p.q_len);
    EXPECT_TRUE(p.return_lse) << p.name << ": every case checks the LSE";
    if (p.q_len == 1) max_decode_kv = std::max(max_decode_kv, p.kv_len);
    for (int64_t b = 0; b < p.batch; ++b) {
      if (VisibleKeys(p.mask_params(), 0, p.KvLength(b)).empty()) ++fully_blocked;
    }
  }
  for (int64_t g : {1, 2, 3, 4, 5, 6, 7, 8}) {
    EXPECT_TRUE(group_sizes.count(g)) << "group size " << g;
  }
  for (int64_t d : {16, 80, 96, 256}) EXPECT_TRUE(head_dims.count(d)) << "head dim " << d;
  for (int64_t t : {1, 2, 7, 33, 129, 1000}) EXPECT_TRUE(q_lens.count(t)) << "T " << t;
  EXPECT_GT(fully_blocked, 0) << "the grid must contain fully blocked rows";
  EXPECT_GE(max_decode_kv, 5000) << "decode over a long cache reaches every split-K path";
}

}  // namespace
}  // namespace attnkit
