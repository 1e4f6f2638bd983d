// The comparison harness: wrong backends are reported as wrong and never
// timed, baselines mark slowdowns, reports survive JSON, the suite loads, and
// auto selection follows a tuning record.
#include <cstdlib>

#include "backends/auto_select.h"
#include "backends/reference/reference_backend.h"
#include "benchmarks/compare.h"
#include "benchmarks/report_svg.h"
#include "benchmarks/suite.h"
#include "core/machine_info.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace attnkit {
namespace {

using ::testing::HasSubstr;

// The reference with every output scaled by 1.01: plausible, fast, wrong.
class SlightlyWrongBackend : public Backend {
 public:
  std::string Name() const override { return "slightly-wrong"; }
  std::string Description() const override { return "test double"; }
  Capabilities Caps() const override { return reference_->Caps(); }

 protected:
  absl::Status ForwardImpl(const AttentionProblem& p, const AttentionArgs& a,
                           RunInfo* info) override {
    absl::Status s = reference_->Forward(p, a, info);
    ForEachOffset(a.o, [&](int64_t off) {
      StoreFromF32(a.o.data, a.o.dtype, off, 1.01f * a.o.LoadF32(off));
    });
    return s;
  }

 private:
  std::unique_ptr<Backend> reference_ = MakeReferenceBackend();
};

AttentionProblem Small() {
  AttentionProblem p = BasicProblem(1, 4, 2, 33, 33, 16);
  p.name = "small";
  p.mask = MaskKind::kCausal;
  p.seed = 3;
  return p;
}

MachineLimits FakeLimits() {
  MachineLimits l;
  l.set_threads(1);
  l.set_peak_fma_gflops(100);
  l.set_read_gbps(10);
  return l;
}

CompareReport RunSmall() {
  static BackendRegistry* registry = [] {
    auto* r = new BackendRegistry;
    r->Register(MakeReferenceBackend()).IgnoreError();
    r->Register(std::make_unique<SlightlyWrongBackend>()).IgnoreError();
    return r;
  }();
  CompareOptions options;
  options.min_seconds = 0.01;
  auto report = RunCompare(*registry, {Small()}, options, MachineFingerprint(), FakeLimits());
  EXPECT_TRUE(report.ok()) << report.status();
  return *report;
}

TEST(CompareTest, WrongBackendsAreReportedAndNotTimed) {
  const CompareReport report = RunSmall();
  ASSERT_EQ(report.problems_size(), 1);
  const ProblemResult& p = report.problems(0);
  ASSERT_EQ(p.results_size(), 2);
  EXPECT_EQ(p.results(0).status(), "ok");
  EXPECT_GT(p.results(0).median_s(), 0);
  EXPECT_GE(p.results(0).runs(), 3);
  EXPECT_DOUBLE_EQ(p.results(0).speedup_vs_reference(), 1.0);
  EXPECT_EQ(p.results(1).status(), "wrong");
  EXPECT_EQ(p.results(1).median_s(), 0);
  EXPECT_THAT(FormatCompareTable(report), HasSubstr("WRONG (not timed)"));
  EXPECT_GT(p.useful_flops(), 0);
}

TEST(CompareTest, BaselineMarksSlowdownsAndJsonRoundTrips) {
  CompareReport report = RunSmall();
  CompareReport baseline = report;
  baseline.mutable_problems(0)->mutable_results(0)->set_median_s(
      report.problems(0).results(0).median_s() / 2);
  ApplyBaseline(baseline, &report);
  EXPECT_TRUE(report.problems(0).results(0).slower_than_baseline());
  EXPECT_THAT(FormatCompareTable(report), HasSubstr("SLOWER than baseline"));
  auto json = ReportToJson(report);
  ASSERT_TRUE(json.ok());
  EXPECT_THAT(*json, HasSubstr("\"flop_convention\""));
  auto back = ReportFromJson(*json, "report.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->problems(0).results(0).median_s(), report.problems(0).results(0).median_s());
  EXPECT_THAT(std::string(ReportFromJson("{nope", "x.json").status().message()),
              HasSubstr("x.json: not an attnkit compare report"));
}

TEST(CompareTest, SvgDrawsOneBarPerPassingResult) {
  const std::string svg = ReportToSvg(RunSmall());
  EXPECT_THAT(svg, HasSubstr("<svg"));
  EXPECT_THAT(svg, HasSubstr("<title>reference on small"));
  EXPECT_THAT(svg, HasSubstr(">wrong<"));
  EXPECT_THAT(svg, HasSubstr("</svg>"));
}

TEST(SuiteTest, StandardSuiteLoads) {
  auto suite = LoadSuite("standard");
  ASSERT_TRUE(suite.ok()) << suite.status();
  EXPECT_EQ(suite->size(), 9u);
  for (const AttentionProblem& p : *suite) EXPECT_FALSE(p.name.empty());
  EXPECT_EQ(LoadSuite("huge").status().code(), absl::StatusCode::kNotFound);
}

TEST(AutoSelectTest, FollowsTheTuningRecordWhenPresent) {
  setenv("ATTNKIT_CACHE_DIR", (::testing::TempDir() + "/cache").c_str(), 1);
  AttentionProblem p = Small();
  AutoOrder order = AutoOrderFor(p);
  EXPECT_THAT(order.source, HasSubstr("static order"));
  TuneRecord record;
  record.set_cpu_model(CpuModel());
  record.set_measured_at("today");
  TuneEntry* e = record.add_entries();
  e->set_shape_class(ShapeClass(p));
  e->add_order("reference");
  ASSERT_TRUE(SaveTuneRecord(TuneRecordPath(), record).ok());
  order = AutoOrderFor(p);
  EXPECT_EQ(order.order.front(), "reference");
  EXPECT_THAT(order.source, HasSubstr("tuning record"));
  BackendRegistry r;
  ASSERT_TRUE(r.Register(MakeReferenceBackend()).ok());
  auto s = SelectBackend(r, "auto", p);
  ASSERT_TRUE(s.ok());
  EXPECT_THAT(s->reason, HasSubstr("order from the tuning record"));
  EXPECT_EQ(ShapeClass(p), "short_prefill");
  p.q_len = 1;
  EXPECT_EQ(ShapeClass(p), "decode");
}

}  // namespace
}  // namespace attnkit
