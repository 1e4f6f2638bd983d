// The backward conformance suite: every registered backend (built in and
// plugin) x every problem of the backward grid (tests/grad_conformance_grid.h).
// Each case runs the backend's own forward (its O and LSE are what its
// backward reads), then its Backward with dO from GradData::Random, and
// compares dQ, dK, dV (and dBias) with the fp64 reference backward through
// CompareGradients. Highway runs once more on every other Highway target this
// CPU supports (reduced grid).
//
// Skips and failures:
//  - a backend without a backward pass (Caps().backward.supported false) has
//    every case skipped with its reason, even when ATTNKIT_REQUIRE_BACKENDS
//    names it (the variable asks that a backend's claims be exercised; this
//    one claims none);
//  - a backend with one must not refuse (SupportsBackward) a case its
//    Caps().backward covers; a refusal it may make is a skip with its reason,
//    and a failure when ATTNKIT_REQUIRE_BACKENDS names it and it is
//    unavailable (a case the capabilities do not claim may be skipped);
//  - one claiming backward.deterministic must give the same bits when run
//    again; rows that see no key must give exactly 0 in dQ.
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "backends/builtin.h"
#include "core/mask.h"
#include "gtest/gtest.h"
#include "harness/checked_run.h"
#include "harness/execute.h"
#include "harness/grad_data.h"
#include "harness/problem_data.h"
#include "oracle/compare_grad.h"
#include "oracle/reference_backward.h"
#include "tests/backend_test_env.h"
#include "tests/grad_conformance_grid.h"
#include "tests/highway_target_backends.h"
#include "tests/required_backends.h"

namespace attnkit {
namespace {

using testing_env::Outcome;

const std::vector<GradCase>& Grid() {
  static const auto* grid = new std::vector<GradCase>(GradConformanceGrid());
  return *grid;
}

// The reference gradients of a grid case, computed once and shared by every
// backend (inputs and dO are regenerated from the same seed).
const ReferenceGradients& Oracle(size_t index, const ProblemData& data, const GradData& grads) {
  static std::mutex mu;
  static auto* cache = new std::map<size_t, ReferenceGradients>;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(index);
  if (it == cache->end()) {
    it = cache
             ->emplace(index, ComputeReferenceBackward(Grid()[index].problem, data.args(),
                                                       grads.d_o.view()))
             .first;
  }
  return it->second;
}

// OK when the test runs the backward of `p` on `b`; otherwise the reason to
// skip, after adding a failure where the rules in the file comment say so.
absl::Status CheckBackwardRunnable(const Backend& b, const AttentionProblem& p) {
  const absl::Status supported = b.SupportsBackward(p);
  if (supported.ok()) return testing_env::CheckRunnable(b, p);  // and its forward
  const Capabilities caps = b.Caps();
  if (!caps.backward.supported) {
    const absl::Status available = b.Available();
    const absl::Status none = absl::UnimplementedError(
        absl::StrCat("no backward pass (Caps().backward.supported is false)",
                     available.ok() ? "" : "; unavailable: ", available.message()));
    testing_env::NoteUnclaimedCase(none);
    return none;
  }
  if (testing_env::IsRequired(b.Name()) && !b.Available().ok()) {
    ADD_FAILURE() << b.Name() << " is named in ATTNKIT_REQUIRE_BACKENDS but skips the backward of "
                  << p.Id() << ", unavailable: " << supported.message();
  }
  const absl::Status claimed = CheckBackwardCapabilities(caps, p);
  if (!claimed.ok()) {
    testing_env::NoteUnclaimedCase(claimed);
  } else if (b.Available().ok()) {
    ADD_FAILURE() << b.Name() << " refuses the backward of " << p.Id()
                  << " although its capabilities cover it: " << supported;
  }
  return supported;
}

// True when query row (b, h, i) sees no key: its structured range is empty,
// or the dense mask blocks, or the bias is -inf at, every key in it. Worked
// out from the inputs, not from the reference.
bool RowSeesNoKey(const AttentionProblem& p, const AttentionArgs& a, int64_t b, int64_t h,
                  int64_t i) {
  const KeyRange keys = VisibleKeys(p.mask_params(b), i, p.KvLength(b));
  for (int64_t j = keys.begin; j < keys.end; ++j) {
    const bool masked =
        p.blocked_mask &&
        static_cast<const uint8_t*>(a.blocked_mask.data)[a.blocked_mask.Offset(b, h, i, j)];
    const bool minus_inf = p.additive_bias && a.bias.LoadF32(a.bias.Offset(b, h, i, j)) ==
                                                  -std::numeric_limits<float>::infinity();
    if (!masked && !minus_inf) return false;
  }
  return true;
}

// dQ must be exactly 0 (either sign) in every row that sees no key; adds a
// failure naming the first element that is not and returns false then.
bool ExpectZeroDqInBlockedRows(const AttentionProblem& p, const AttentionArgs& a,
                               const TensorView& dq, const std::string& who) {
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.num_heads; ++h) {
      for (int64_t i = 0; i < p.q_len; ++i) {
        if (!RowSeesNoKey(p, a, b, h, i)) continue;
        for (int64_t c = 0; c < p.head_dim; ++c) {
          const float got = dq.LoadF32(dq.Offset(b, h, i, c));
          if (got != 0.0f) {
            ADD_FAILURE() << who << " on " << p.name << ": dq[" << b << "," << h << "," << i << ","
                          << c << "] = " << got << " in a row that sees no key (must be 0)";
            return false;
          }
        }
      }
    }
  }
  return true;
}

std::string Bytes(const Tensor& t) {
  if (t.view().empty()) return "";
  return std::string(static_cast<const char*>(t.data()),
                     t.view().SpanElements() * DTypeSize(t.view().dtype));
}

std::string GradBytes(const GradData& g) {
  return Bytes(g.dq) + Bytes(g.dk) + Bytes(g.dv) + Bytes(g.dbias);
}

// A backend that claims a deterministic backward gives the same bits when
// run again on the same inputs, O and LSE.
void ExpectSameBitsOnRerun(Backend* backend, const AttentionProblem& p, const ProblemData& data,
                           const GradData& grads) {
  const std::string first = GradBytes(grads);
  PoisonGradients(grads);
  const absl::Status run = RunBackwardOnBackend(backend, p, data, grads, nullptr);
  ASSERT_TRUE(run.ok()) << run;
  EXPECT_TRUE(GradBytes(grads) == first)
      << backend->Name() << " claims a deterministic backward but a second run of " << p.name
      << " gave different bits";
}

class GradConformanceTest : public testing_env::BackendParamTest<std::tuple<std::string, size_t>> {
};

TEST_P(GradConformanceTest, MatchesReferenceBackward) {
  const std::string& backend_name = std::get<0>(GetParam());
  const size_t index = std::get<1>(GetParam());
  const GradCase& gc = Grid()[index];
  const AttentionProblem& p = gc.problem;
  auto backend = GlobalRegistry().Find(backend_name);
  ASSERT_TRUE(backend.ok()) << backend.status();

  const absl::Status runnable = CheckBackwardRunnable(**backend, p);
  if (!runnable.ok()) {
    testing_env::Record(backend_name, Outcome::kSkipped, std::string(runnable.message()));
    GTEST_SKIP() << runnable;
  }
  auto data = GradCaseData(gc);
  ASSERT_TRUE(data.ok()) << data.status();
  // The backend's own forward: its O and LSE are the backward's inputs.
  PoisonOutputs(*data);
  const absl::Status forward = RunOnBackend(*backend, p, *data, nullptr);
  if (!forward.ok()) {
    testing_env::Record(backend_name, Outcome::kFailed);
    FAIL() << backend_name << " forward failed on " << p.name << ": " << forward;
  }
  const Capabilities caps = (*backend)->Caps();
  const bool with_dbias = gc.with_dbias && caps.backward.bias_grad;
  auto grads = GradData::Random(p, p.seed, with_dbias);
  ASSERT_TRUE(grads.ok()) << grads.status();
  // Twice when a gradient must come out NaN (harness/checked_run.h).
  const CheckedRun run =
      RunBackwardAndCompare(*backend, p, *data, *grads, Oracle(index, *data, *grads));
  if (!run.run.ok()) {
    testing_env::Record(backend_name, Outcome::kFailed);
    FAIL() << backend_name << " backward failed on " << p.name << ": " << run.run;
  }
  const Comparison& c = run.comparison;
  EXPECT_TRUE(c.ok()) << backend_name << " [" << run.info.kernel << "] on " << p.name
                      << (with_dbias ? " (with dbias)" : "") << ": " << c.mismatches << " of "
                      << c.checked << " gradient elements outside the bound (largest "
                      << c.max_bound << ", error/bound up to " << c.max_bound_fraction << ")"
                      << (c.non_finite ? ", non-finite gradient" : "") << "; max abs error "
                      << c.max_abs_err << "; first: " << c.first_failure;
  const bool zero_dq = ExpectZeroDqInBlockedRows(p, data->args(), grads->dq.view(), backend_name);
  testing_env::Record(backend_name, c.ok() && zero_dq ? Outcome::kPassed : Outcome::kFailed);
  testing_env::RecordBoundFraction(backend_name, c.max_bound_fraction);
  if (caps.backward.deterministic) ExpectSameBitsOnRerun(*backend, p, *data, *grads);
}

INSTANTIATE_TEST_SUITE_P(AllBackends, GradConformanceTest,
                         ::testing::ValuesIn(testing_env::BackendGridCases(Grid().size())),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, size_t>>& info) {
                           return absl::StrCat(testing_env::SafeName(std::get<0>(info.param)), "_",
                                               Grid()[std::get<1>(info.param)].problem.name);
                         });

TEST(GradConformanceGridTest, IsSmallAndVaried) {
  const auto& grid = Grid();
  EXPECT_GE(grid.size(), 60u);
  // The variant cases, 8 all-bf16 ones again under FAST, the saturated
  // softcaps, the non-finite ones (two with sinks and ALiBi) and Ev != E.
  EXPECT_LE(grid.size(), 140u) << "the suite runs on every backend and Highway target";
  int fast = 0;
  for (const GradCase& c : grid) fast += c.problem.fast() ? 1 : 0;
  EXPECT_GE(fast, 6) << "FAST training steps (core/fast_compute.h FastRoundsGradOperands)";
  std::set<int64_t> group_sizes, head_dims, q_lens, kv_lens;
  std::set<std::pair<int64_t, int64_t>> value_dim_pairs;  // (E, Ev) of Ev != E cases
  std::set<std::string> names;
  std::set<DType> dtypes, kv_dtypes;
  std::set<MaskKind> masks;
  std::set<Layout> layouts;
  std::set<Broadcast> broadcasts;
  int causal_tl_short_q = 0, causal_tl_long_q = 0, causal_br_short_q = 0, causal_br_long_q = 0;
  int empty_sequence = 0, padded_sequence = 0, dense_blocked_row = 0, bias_blocked_row = 0;
  int dbias = 0, bias_without_dbias = 0, softcap = 0, saturated_softcap = 0, custom_scale = 0,
      structured_blocked = 0;
  for (const GradCase& c : grid) {
    const AttentionProblem& p = c.problem;
    EXPECT_TRUE(ValidateProblem(p).ok()) << p.name;
    EXPECT_TRUE(names.insert(p.name).second) << "duplicate case name " << p.name;
    EXPECT_TRUE(p.return_lse) << p.name << ": the backward pass reads the LSE";
    EXPECT_FALSE(p.is_paged() || p.is_ragged() || p.kv_dtype == DType::kI8) << p.name;
    EXPECT_TRUE(!c.with_dbias || p.additive_bias) << p.name;
    group_sizes.insert(p.group_size());
    if (!p.has_value_dim()) head_dims.insert(p.head_dim);
    if (p.has_value_dim()) value_dim_pairs.insert({p.head_dim, p.value_dim()});
    q_lens.insert(p.q_len);
    kv_lens.insert(p.kv_len);
    dtypes.insert(p.dtype);
    kv_dtypes.insert(p.kv_dtype);
    masks.insert(p.mask);
    layouts.insert(p.layout);
    if (p.additive_bias) broadcasts.insert(c.broadcast);
    if (p.mask == MaskKind::kCausal) {
      int& n = p.alignment == Alignment::kTopLeft
                   ? (p.q_len < p.kv_len ? causal_tl_short_q : causal_tl_long_q)
                   : (p.q_len < p.kv_len ? causal_br_short_q : causal_br_long_q);
      n += p.q_len != p.kv_len ? 1 : 0;
    }
    for (int64_t b = 0; b < p.batch; ++b) {
      if (!p.has_kv_lengths()) continue;
      empty_sequence += p.kv_lengths[b] == 0 ? 1 : 0;
      padded_sequence += p.kv_lengths[b] > 0 && p.kv_lengths[b] < p.kv_len ? 1 : 0;
      for (int64_t i = 0; i < p.q_len; ++i) {
        structured_blocked +=
            p.kv_lengths[b] > 0 && VisibleKeys(p.mask_params(b), i, p.KvLength(b)).empty();
      }
    }
    if (!p.has_kv_lengths()) {
      for (int64_t i = 0; i < p.q_len; ++i) {
        structured_blocked += VisibleKeys(p.mask_params(), i, p.kv_len).empty() ? 1 : 0;
      }
    }
    dense_blocked_row += c.block_last_row && p.blocked_mask ? 1 : 0;
    bias_blocked_row += c.block_last_row && !p.blocked_mask && p.additive_bias ? 1 : 0;
    dbias += c.with_dbias ? 1 : 0;
    bias_without_dbias += p.additive_bias && !c.with_dbias ? 1 : 0;
    softcap += p.softcap > 0 ? 1 : 0;
    saturated_softcap += p.softcap > 0 && p.scale >= 1.5f * p.softcap ? 1 : 0;
    custom_scale += p.scale != BasicProblem(1, 1, 1, 1, 1, p.head_dim).scale ? 1 : 0;
    // The case data applies the broadcast views and the blocked row.
    auto data = GradCaseData(c);
    ASSERT_TRUE(data.ok()) << data.status();
    if (c.broadcast != Broadcast::kNone) {
      EXPECT_TRUE(data->bias.view().strides[0] == 0 || data->bias.view().strides[1] == 0) << p.name;
    }
    if (c.block_last_row) {
      EXPECT_TRUE(RowSeesNoKey(p, data->args(), p.batch - 1, p.num_heads - 1, p.q_len - 1))
          << p.name;
    }
  }
  EXPECT_EQ(group_sizes, (std::set<int64_t>{1, 2, 4}));
  int nonfinite = 0;
  for (const GradCase& c : grid) nonfinite += c.problem.nonfinite_inputs > 0;
  EXPECT_GE(nonfinite, 3) << "NaN/Inf inputs under causal, windowed+bias and dense masks";
  EXPECT_EQ(head_dims, (std::set<int64_t>{16, 23, 40, 64, 80, 128}));
  // Ev above and below E, and MLA's prefill dims (192 / 128).
  EXPECT_EQ(value_dim_pairs,
            (std::set<std::pair<int64_t, int64_t>>{{24, 40}, {64, 16}, {192, 128}, {32, 56}}));
  for (int64_t t : {1, 37, 101, 300}) EXPECT_TRUE(q_lens.count(t)) << "Tq " << t;
  for (int64_t t : {1, 37, 101, 300}) EXPECT_TRUE(kv_lens.count(t)) << "Tk " << t;
  const std::set<DType> floats = {DType::kF32, DType::kBF16, DType::kF16};
  EXPECT_EQ(dtypes, floats);
  EXPECT_EQ(kv_dtypes, floats);
  EXPECT_EQ(masks.size(), 3u);
  EXPECT_EQ(layouts.size(), 2u);
  EXPECT_TRUE(broadcasts.count(Broadcast::kNone) && broadcasts.count(Broadcast::kHeads) &&
              broadcasts.count(Broadcast::kBatchAndHeads));
  EXPECT_GT(causal_tl_short_q, 0);
  EXPECT_GT(causal_tl_long_q, 0);
  EXPECT_GT(causal_br_short_q, 0);
  EXPECT_GT(causal_br_long_q, 0);
  EXPECT_GT(empty_sequence, 0);
  EXPECT_GT(padded_sequence, 0);
  EXPECT_GT(structured_blocked, 0) << "rows a bottom-right mask leaves without keys";
  EXPECT_GT(dense_blocked_row, 0);
  EXPECT_GT(bias_blocked_row, 0);
  EXPECT_GT(dbias, 0);
  EXPECT_GT(softcap, 0);
  EXPECT_GT(saturated_softcap, 0) << "scores past tanh's last few ulps below 1 (issue 33)";
  EXPECT_GT(custom_scale, 0);
  EXPECT_GT(bias_without_dbias, 0) << "gradients through a bias whose dBias is not asked";
}

}  // namespace
}  // namespace attnkit
