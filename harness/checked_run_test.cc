// Planted backends that leave rows unwritten where the oracle wants NaN: one
// run from NaN-poisoned outputs passes them, RunAndCompare's second run from
// a finite fill does not; `check` (RunCheck, CheckBackward) reports them.
#include "harness/checked_run.h"

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "backends/reference/reference_backend.h"
#include "core/problem_config.h"
#include "gtest/gtest.h"
#include "harness/check.h"
#include "harness/execute.h"
#include "harness/grad_check.h"
#include "oracle/compare_grad.h"
#include "plugin/registry.h"

namespace attnkit {
namespace {

// Which rows a SkipsRows double leaves as they were before the call.
enum class Skip {
  kNaNRows,         // forward rows that read a NaN or Inf (their o is NaN)
  kBlockedRows,     // forward rows that see no key (their lse is -inf)
  kNonFiniteDkRows  // backward: dk rows [b, g, j] the NaN reached
};

// The values of row (b, x, r) of `t` ([B, X, R, d], or [B, H, Tq] for the
// lse when d == 0), or writes them back.
std::vector<float> LoadRow(const TensorView& t, int64_t b, int64_t x, int64_t r, int64_t d) {
  if (d == 0) return {static_cast<const float*>(t.data)[t.Offset(b, x, r)]};
  std::vector<float> row(static_cast<size_t>(d));
  for (int64_t c = 0; c < d; ++c) row[c] = t.LoadF32(t.Offset(b, x, r, c));
  return row;
}
void StoreRow(const TensorView& t, int64_t b, int64_t x, int64_t r, const std::vector<float>& row) {
  if (t.rank == 3) {
    static_cast<float*>(t.data)[t.Offset(b, x, r)] = row[0];
    return;
  }
  for (size_t c = 0; c < row.size(); ++c) {
    StoreFromF32(t.data, t.dtype, t.Offset(b, x, r, static_cast<int64_t>(c)), row[c]);
  }
}

// Calls `body`, then puts back every [B, X, R, d] row of `t` (and of the lse
// beside it, when given) for which `skip` holds on the new values.
absl::Status KeepRowsWhere(
    const TensorView& t, const TensorView* lse, int64_t X, int64_t R, int64_t d,
    const std::function<bool(const std::vector<float>& row, float lse)>& skip,
    const std::function<absl::Status()>& body) {
  const int64_t B = t.shape[0];
  std::vector<std::vector<float>> before, lse_before;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t x = 0; x < X; ++x) {
      for (int64_t r = 0; r < R; ++r) {
        before.push_back(LoadRow(t, b, x, r, d));
        if (lse != nullptr) lse_before.push_back(LoadRow(*lse, b, x, r, 0));
      }
    }
  }
  const absl::Status s = body();
  size_t at = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t x = 0; x < X; ++x) {
      for (int64_t r = 0; r < R; ++r, ++at) {
        const float lse_now = lse != nullptr ? LoadRow(*lse, b, x, r, 0)[0] : 0.0f;
        if (!skip(LoadRow(t, b, x, r, d), lse_now)) continue;
        StoreRow(t, b, x, r, before[at]);
        if (lse != nullptr) StoreRow(*lse, b, x, r, lse_before[at]);
      }
    }
  }
  return s;
}

// The reference backend, but for the rows `skip` names, which it leaves
// unwritten. Host memory, dense problems only.
class SkipsRows : public Backend {
 public:
  SkipsRows(std::string name, Skip skip)
      : name_(std::move(name)), skip_(skip), inner_(MakeReferenceBackend()) {}
  std::string Name() const override { return name_; }
  std::string Description() const override { return "the reference, leaving rows unwritten"; }
  Capabilities Caps() const override { return inner_->Caps(); }

 protected:
  absl::Status ForwardImpl(const AttentionProblem& p, const AttentionArgs& a,
                           RunInfo* info) override {
    const auto forward = [&] { return inner_->Forward(p, a, info); };
    if (skip_ == Skip::kNonFiniteDkRows) return forward();
    const Skip skip = skip_;
    return KeepRowsWhere(
        a.o, p.return_lse ? &a.lse : nullptr, p.num_heads, p.q_len, p.head_dim,
        [skip](const std::vector<float>& o, float lse) {
          return skip == Skip::kNaNRows ? std::isnan(o[0]) : std::isinf(lse) && lse < 0;
        },
        forward);
  }
  absl::Status BackwardImpl(const AttentionProblem& p, const AttentionArgs& a, const GradArgs& g,
                            RunInfo* info) override {
    const auto backward = [&] { return inner_->Backward(p, a, g, info); };
    if (skip_ != Skip::kNonFiniteDkRows) return backward();
    return KeepRowsWhere(
        g.dk, nullptr, p.num_kv_heads, p.kv_len, p.head_dim,
        [](const std::vector<float>& dk, float) {
          for (float x : dk) {
            if (!std::isfinite(x)) return true;
          }
          return false;
        },
        backward);
  }

 private:
  std::string name_;
  Skip skip_;
  std::unique_ptr<Backend> inner_;
};

// Causal GQA with NaN/Inf at random input elements: some rows read one
// (their o and lse must be NaN), others do not.
AttentionProblem NaNInputProblem(DType dtype) {
  AttentionProblem p = BasicProblem(1, 4, 2, 24, 24, 16);
  p.dtype = p.kv_dtype = dtype;
  p.mask = MaskKind::kCausal;
  p.return_lse = true;
  p.nonfinite_inputs = 2;
  p.seed = 5;
  p.name = "nan_inputs";
  return p;
}

// The gap: one run from NaN-poisoned outputs, as `check` and the suites made
// it, passes a backend that never writes the rows that must be NaN.
Comparison OneNaNPoisonedRun(Backend* b, const AttentionProblem& p, const ProblemData& data,
                             const ReferenceResult& ref) {
  PoisonOutputs(data);
  EXPECT_TRUE(RunOnBackend(b, p, data, nullptr).ok());
  return CompareToReference(p, data.args(), ref);
}

TEST(CheckedRunTest, SecondRunCatchesRowsThatMustBeNaNLeftUnwritten) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const AttentionProblem p = NaNInputProblem(dtype);
    auto data = ProblemData::Random(p, p.seed);
    ASSERT_TRUE(data.ok()) << data.status();
    const ReferenceResult ref = ComputeReference(p, data->args());
    ASSERT_TRUE(HasNaNRows(ref)) << "not vacuous: some row reads a NaN or Inf";
    SkipsRows planted("skips-nan-rows", Skip::kNaNRows);

    const Comparison once = OneNaNPoisonedRun(&planted, p, *data, ref);
    EXPECT_TRUE(once.ok()) << "the gap this closes: " << once.first_failure;
    ASSERT_GT(once.poisoned_rows, 0);
    ASSERT_LT(once.poisoned_rows, p.num_heads * p.q_len) << "and some rows are finite";

    const CheckedRun run = RunAndCompare(&planted, p, *data, ref);
    ASSERT_TRUE(run.run.ok()) << run.run;
    EXPECT_TRUE(run.sentinel_run);
    EXPECT_FALSE(run.comparison.ok()) << DTypeName(dtype);
    EXPECT_TRUE(absl::StrContains(run.comparison.first_failure, "pre-filled with 1234.5") &&
                absl::StrContains(run.comparison.first_failure, "must be NaN"))
        << run.comparison.first_failure;

    auto reference = MakeReferenceBackend();  // a backend that writes every row passes both
    const CheckedRun good = RunAndCompare(reference.get(), p, *data, ref);
    EXPECT_TRUE(good.ok() && good.sentinel_run) << good.run << " " << good.comparison.first_failure;
  }
}

TEST(CheckedRunTest, CheckReportsTheDoubleAsFailing) {
  BackendRegistry registry;
  ASSERT_TRUE(registry.Register(MakeReferenceBackend()).ok());
  ASSERT_TRUE(
      registry.Register(std::make_unique<SkipsRows>("skips-nan-rows", Skip::kNaNRows)).ok());
  const auto report = RunCheck(registry, ConfigFromProblem(NaNInputProblem(DType::kF32)), {});
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->results_size(), 2);
  EXPECT_EQ(report->results(0).status(), "pass") << report->results(0).detail();
  EXPECT_EQ(report->results(1).status(), "fail");
  EXPECT_TRUE(absl::StrContains(report->results(1).detail(), "pre-filled with 1234.5"))
      << report->results(1).detail();
}

// A fully blocked row must be exactly 0 with an LSE of -inf: NaN poison left
// in place fails that in the first run, so such problems need no second one.
TEST(CheckedRunTest, FullyBlockedRowsLeftUnwrittenFailTheFirstRun) {
  AttentionProblem p = BasicProblem(2, 2, 1, 8, 8, 16);
  p.kv_lengths = {8, 0};  // the second sequence's rows see no key
  p.return_lse = true;
  auto data = ProblemData::Random(p, 3);
  ASSERT_TRUE(data.ok()) << data.status();
  const ReferenceResult ref = ComputeReference(p, data->args());
  EXPECT_FALSE(HasNaNRows(ref));
  SkipsRows planted("skips-blocked-rows", Skip::kBlockedRows);
  const CheckedRun run = RunAndCompare(&planted, p, *data, ref);
  ASSERT_TRUE(run.run.ok()) << run.run;
  EXPECT_FALSE(run.sentinel_run);
  EXPECT_FALSE(run.comparison.ok());
  EXPECT_TRUE(absl::StrContains(run.comparison.first_failure, "o[1,0,0,0] = nan"))
      << run.comparison.first_failure;
}

TEST(CheckedRunTest, SecondRunCatchesGradientsThatMustBeNaNLeftUnwritten) {
  AttentionProblem p = NaNInputProblem(DType::kF32);
  auto data = ProblemData::Random(p, p.seed);
  ASSERT_TRUE(data.ok()) << data.status();
  auto reference = MakeReferenceBackend();
  ASSERT_TRUE(RunOnBackend(reference.get(), p, *data, nullptr).ok());  // O and LSE
  const auto backward = MakeBackwardInputs(p, *data);
  ASSERT_TRUE(backward.ok()) << backward.status();
  const ReferenceGradients& ref = backward->ref;
  ASSERT_TRUE(HasNonFiniteGradients(ref)) << "not vacuous";
  int64_t finite_dk = 0, nonfinite_dk = 0;
  for (double x : ref.dk) (std::isfinite(x) ? finite_dk : nonfinite_dk)++;
  ASSERT_GT(finite_dk, 0);
  ASSERT_GT(nonfinite_dk, 0);
  SkipsRows planted("skips-nan-dk-rows", Skip::kNonFiniteDkRows);
  const GradData& grads = backward->grads;

  PoisonGradients(grads);  // the gap: one NaN-poisoned run passes it
  ASSERT_TRUE(RunBackwardOnBackend(&planted, p, *data, grads, nullptr).ok());
  const Comparison once = CompareGradients(p, grads.args(), ref);
  EXPECT_TRUE(once.ok()) << "the gap this closes: " << once.first_failure;

  const CheckedRun run = RunBackwardAndCompare(&planted, p, *data, grads, ref);
  ASSERT_TRUE(run.run.ok()) << run.run;
  EXPECT_TRUE(run.sentinel_run);
  EXPECT_FALSE(run.comparison.ok());
  EXPECT_TRUE(absl::StrContains(run.comparison.first_failure, "pre-filled with 1234.5") &&
              absl::StrContains(run.comparison.first_failure, "dk["))
      << run.comparison.first_failure;

  const GradCheck check = CheckBackward(&planted, p, *data, *backward);  // `check --grad`
  EXPECT_EQ(check.status, "fail") << check.detail;
  const CheckedRun good = RunBackwardAndCompare(reference.get(), p, *data, grads, ref);
  EXPECT_TRUE(good.ok() && good.sentinel_run) << good.comparison.first_failure;
}

}  // namespace
}  // namespace attnkit
