// The conformance suite: every registered backend (built in and plugin) x
// every problem of the grid, compared with the fp64 reference, and highway
// once more on every other Highway target this CPU supports (reduced grid).
// A backend that refuses a case says why through Supports(); the case is
// skipped, counted and reported, and refusing a case its Caps() cover is a
// failure.
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "backends/builtin.h"
#include "gtest/gtest.h"
#include "harness/checked_run.h"
#include "harness/execute.h"
#include "harness/problem_data.h"
#include "oracle/compare.h"
#include "oracle/reference.h"
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

class ConformanceTest : public testing_env::BackendParamTest<std::tuple<std::string, size_t>> {};

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
  // Twice when a row must come out NaN (harness/checked_run.h).
  const CheckedRun run = RunAndCompare(*backend, p, *data, Oracle(index, *data));
  if (!run.run.ok()) {
    testing_env::Record(backend_name, Outcome::kFailed);
    FAIL() << backend_name << " failed on " << p.name
           << (run.sentinel_run ? " (run from the sentinel)" : "") << ": " << run.run;
  }
  const Comparison& c = run.comparison;
  testing_env::Record(backend_name, c.ok() ? Outcome::kPassed : Outcome::kFailed);
  EXPECT_TRUE(c.ok()) << backend_name << " [" << run.info.kernel << "] on " << p.name << ": "
                      << c.mismatches << " of " << c.checked << " outside the bound (largest "
                      << c.max_bound << ", error/bound up to " << c.max_bound_fraction << ")"
                      << (c.non_finite ? ", non-finite output" : "") << "; max abs error "
                      << c.max_abs_err << "; first: " << c.first_failure;
  testing_env::RecordBoundFraction(backend_name, c.max_bound_fraction);
  if ((*backend)->Caps().deterministic) ExpectSameBitsOnRerun(*backend, p, *data);
}

// The highway backend once more per Highway target this CPU supports besides
// the dispatched one (tests/highway_target_backends.h).
INSTANTIATE_TEST_SUITE_P(AllBackends, ConformanceTest,
                         ::testing::ValuesIn(testing_env::BackendGridCases(Grid().size())),
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

// The serving family: every page size, shared pages, ragged batches with a
// sequence without queries and one without keys, packed and paged, and int8
// K/V under each query dtype, dense, paged and ragged.
TEST(ConformanceGridTest, CoversPagingRaggedAndInt8) {
  std::set<int64_t> page_sizes;
  std::set<DType> int8_query_dtypes;
  int shared = 0, ragged_packed = 0, ragged_paged = 0, no_queries = 0, no_keys = 0;
  int int8_dense = 0, int8_paged = 0, int8_ragged = 0, paged_prefill = 0, serving = 0;
  for (const AttentionProblem& p : Grid()) {
    if (!p.is_paged() && !p.is_ragged() && p.kv_dtype != DType::kI8) continue;
    if (p.fast()) continue;  // the FAST twins: CoversFastCompute
    ++serving;
    if (p.is_paged()) {
      page_sizes.insert(p.page_size);
      int64_t needed = 0;
      for (int64_t b = 0; b < p.batch; ++b) {
        needed += (p.KvLength(b) + p.page_size - 1) / p.page_size;
      }
      shared += needed > p.num_pages ? 1 : 0;
      paged_prefill += p.q_len > 1 && !p.is_ragged() && p.mask == MaskKind::kCausal ? 1 : 0;
    }
    if (p.is_ragged()) {
      (p.is_paged() ? ragged_paged : ragged_packed)++;
      for (int64_t b = 0; b < p.batch; ++b) {
        no_queries += p.QLength(b) == 0 && p.KvLength(b) > 0 ? 1 : 0;
        no_keys += p.QLength(b) > 0 && p.KvLength(b) == 0 ? 1 : 0;
      }
    }
    if (p.kv_dtype == DType::kI8) {
      int8_query_dtypes.insert(p.dtype);
      if (p.is_ragged()) {
        ++int8_ragged;
      } else {
        (p.is_paged() ? int8_paged : int8_dense)++;
      }
    }
  }
  EXPECT_EQ(page_sizes, (std::set<int64_t>{16, 32, 64, 128, 256}));
  EXPECT_GT(shared, 0) << "pages shared between sequences";
  EXPECT_GT(paged_prefill, 0);
  EXPECT_GT(ragged_packed, 0);
  EXPECT_GT(ragged_paged, 0);
  EXPECT_GT(no_queries, 0);
  EXPECT_GT(no_keys, 0);
  EXPECT_GT(int8_dense, 0);
  EXPECT_GT(int8_paged, 0);
  EXPECT_GT(int8_ragged, 0);
  EXPECT_EQ(int8_query_dtypes, (std::set<DType>{DType::kF32, DType::kF16, DType::kBF16}));
  EXPECT_GE(serving, 50);
  EXPECT_LE(serving, 80) << "the serving family runs on every backend and Highway target";
}

// FAST twins: each is an EXACT problem of the grid with compute FAST (same
// inputs), over 16-bit or int8 K/V only (with f32 K/V FAST is EXACT), under
// every query type, K/V type, mask and serving feature, decode over a long
// cache included, so each backend runs every mode its capabilities claim.
TEST(ConformanceGridTest, CoversFastCompute) {
  std::map<std::string, const AttentionProblem*> exact;
  for (const AttentionProblem& p : Grid()) {
    if (!p.fast()) exact[p.name] = &p;
  }
  std::set<std::pair<DType, DType>> types;
  std::set<MaskKind> masks;
  int fast = 0, paged = 0, ragged = 0, padded = 0, dense = 0, bias = 0, softcap = 0, bthd = 0;
  int64_t max_decode_kv = 0;
  for (const AttentionProblem& p : Grid()) {
    if (!p.fast()) continue;
    ++fast;
    EXPECT_NE(p.kv_dtype, DType::kF32) << p.name << ": FAST is EXACT over f32 K/V";
    EXPECT_TRUE(absl::EndsWith(p.Id(), "_fast")) << p.Id();
    const std::string twin = p.name.substr(0, p.name.size() - std::string("_fast").size());
    ASSERT_TRUE(exact.count(twin)) << p.name << " has no EXACT twin";
    AttentionProblem same = *exact[twin];
    same.compute = ComputeMode::kFast;
    same.name = p.name;
    EXPECT_EQ(same.Id(), p.Id()) << "the twin differs only in compute";
    EXPECT_EQ(same.seed, p.seed);
    types.insert({p.dtype, p.kv_dtype});
    masks.insert(p.mask);
    paged += p.is_paged() ? 1 : 0;
    ragged += p.is_ragged() ? 1 : 0;
    padded += p.has_kv_lengths() && !p.is_ragged() ? 1 : 0;
    dense += p.blocked_mask ? 1 : 0;
    bias += p.additive_bias ? 1 : 0;
    softcap += p.softcap > 0 ? 1 : 0;
    bthd += p.layout == Layout::kBTHD ? 1 : 0;
    if (p.q_len == 1) max_decode_kv = std::max(max_decode_kv, p.kv_len);
  }
  const DType kF32 = DType::kF32, kF16 = DType::kF16, kBF16 = DType::kBF16, kI8 = DType::kI8;
  const DType kE4M3 = DType::kF8E4M3, kE5M2 = DType::kF8E5M2;
  EXPECT_EQ(types, (std::set<std::pair<DType, DType>>{{kF16, kF16},
                                                      {kBF16, kBF16},
                                                      {kF32, kF16},
                                                      {kF32, kBF16},
                                                      {kF32, kI8},
                                                      {kF16, kI8},
                                                      {kBF16, kI8},
                                                      {kF32, kE4M3},
                                                      {kF32, kE5M2},
                                                      {kBF16, kE4M3},
                                                      {kBF16, kE5M2}}));
  EXPECT_EQ(masks,
            (std::set<MaskKind>{MaskKind::kNone, MaskKind::kCausal, MaskKind::kSlidingWindow}));
  EXPECT_GT(paged, 0);
  EXPECT_GT(ragged, 0);
  EXPECT_GT(padded, 0);
  EXPECT_GT(dense, 0);
  EXPECT_GT(bias, 0);
  EXPECT_GT(softcap, 0);
  EXPECT_GT(bthd, 0);
  EXPECT_GE(max_decode_kv, 4097) << "a FAST decode over a long cache (split-K)";
  EXPECT_GE(fast, 150);
  EXPECT_LE(fast, 360) << "FAST twins keep the suite's time within about a fifth more";
}

// NaN and Inf inputs: each such case has rows that read one (so it runs
// twice, harness/checked_run.h) and rows that do not, under every dtype.
TEST(ConformanceGridTest, CoversNonFiniteInputs) {
  std::set<DType> dtypes;
  int cases = 0;
  for (const AttentionProblem& p : Grid()) {
    if (p.nonfinite_inputs == 0) continue;
    ++cases;
    dtypes.insert(p.kv_dtype);
    auto data = ProblemData::Random(p, p.seed);
    ASSERT_TRUE(data.ok()) << data.status();
    const ReferenceResult ref = ComputeReference(p, data->args());
    int64_t nan_rows = 0;
    for (double lse : ref.lse) nan_rows += std::isnan(lse) ? 1 : 0;
    EXPECT_TRUE(HasNaNRows(ref)) << p.name << ": no row reads a NaN or Inf";
    EXPECT_LT(nan_rows, static_cast<int64_t>(ref.lse.size())) << p.name << ": every row does";
  }
  EXPECT_GE(cases, 4);
  EXPECT_EQ(dtypes, (std::set<DType>{DType::kF32, DType::kF16, DType::kBF16}));
}

}  // namespace
}  // namespace attnkit
