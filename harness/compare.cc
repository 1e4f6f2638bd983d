#include "harness/compare.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/auto_select.h"
#include "backends/reference/reference_backend.h"
#include "core/fast_compute.h"
#include "core/problem_config.h"
#include "core/status_macros.h"
#include "harness/execute.h"
#include "harness/grad_check.h"
#include "harness/grad_data.h"
#include "harness/machine.h"
#include "harness/problem_data.h"
#include "harness/text_fit.h"
#include "io/config_io.h"
#include "io/proto_json.h"
#include "ops/cost.h"
#include "oracle/compare.h"
#include "oracle/reference_backward.h"
#include "platform/machine_info.h"
#include "platform/version.h"

namespace attnkit {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Checks then times one backend on one problem: the forward, or with
// `backward` the backward pass (after a checked forward gives its O and lse).
BackendResult Measure(Backend* backend, const AttentionProblem& p, const ProblemData& data,
                      const CompareOptions& options, const BackwardInputs* backward = nullptr) {
  BackendResult r;
  r.set_backend(backend->Name());
  // "unavailable": the backend cannot run on this machine at all;
  // "unsupported": it runs here but refuses this problem.
  const absl::Status available = backend->Available();
  const absl::Status supported = available.ok() ? backend->Supports(p) : available;
  if (!supported.ok()) {
    r.set_status(available.ok() ? "unsupported" : "unavailable");
    r.set_detail(std::string(supported.message()));
    return r;
  }
  auto placed = PlacedProblem::Place(backend, data);
  if (!placed.ok()) {
    r.set_status("error");
    r.set_detail(std::string(placed.status().message()));
    return r;
  }
  // The first run is the check: a wrong backend is never reported as fast.
  PoisonOutputs(data);
  RunInfo info;
  auto start = Clock::now();
  absl::Status s = placed->Forward(p, &info);
  if (s.ok()) s = placed->DownloadOutputs(data);
  const double first_seconds = SecondsSince(start);
  r.set_kernel(info.kernel);
  if (!s.ok()) {
    r.set_status("error");
    r.set_detail(std::string(s.message()));
    return r;
  }
  const Comparison c = CompareSampledRows(p, data.args(), options.check_rows);
  r.set_max_abs_err(c.max_abs_err);
  if (!c.ok()) {
    r.set_status("wrong");
    r.set_detail(c.first_failure);
    return r;
  }
  // What is timed: the forward, or the backward pass from this forward's O.
  std::function<absl::Status()> timed = [&] {
    absl::Status st = placed->Forward(p, &info);
    return st.ok() ? backend->Synchronize() : st;
  };
  double checked_seconds = first_seconds;
  if (backward != nullptr) {
    const GradCheck g = CheckBackward(backend, p, data, *backward);
    r.set_kernel(g.kernel);
    r.set_max_abs_err(g.comparison.max_abs_err);
    if (g.status != "pass") {
      r.set_status(g.status == "fail" ? "wrong" : g.status);
      r.set_detail(g.status == "fail" ? "backward: " + g.detail : g.detail);
      return r;
    }
    checked_seconds = g.seconds;
    // Host backends read the host tensors in place; a device backend's
    // timing includes its copies (RunBackwardOnBackend places them per call).
    timed = [&] {
      return backend->UsesHostMemory()
                 ? backend->Backward(p, data.args(), backward->grads.args(), &info)
                 : RunBackwardOnBackend(backend, p, data, backward->grads, &info);
    };
  }
  std::vector<double> samples;
  if (checked_seconds >= options.budget_seconds) {
    samples.push_back(checked_seconds);  // too slow to repeat within the budget
  } else {
    const auto begin = Clock::now();
    while (static_cast<int>(samples.size()) < options.max_runs) {
      start = Clock::now();
      s = timed();
      samples.push_back(SecondsSince(start));
      if (!s.ok()) {
        r.set_status("error");
        r.set_detail(std::string(s.message()));
        return r;
      }
      const double elapsed = SecondsSince(begin);
      const bool enough =
          static_cast<int>(samples.size()) >= options.min_runs && elapsed >= options.min_seconds;
      if (enough || elapsed >= options.budget_seconds) break;
    }
  }
  r.set_status("ok");
  r.set_runs(static_cast<int>(samples.size()));
  r.set_median_s(Median(samples));
  r.set_min_s(*std::min_element(samples.begin(), samples.end()));
  return r;
}

// The auto row: what `auto` chooses for p, and what choosing per call
// costs. The machine is too noisy to time auto apart from the backend it
// picks and compare the two, so they are timed in alternation (an auto call:
// selection then the chosen backend; a direct call) and the auto row is the
// chosen backend's own row scaled by that ratio: its `vs best` is then the
// choice (was the fastest backend picked?) times the per-call overhead.
BackendResult MeasureAuto(const BackendRegistry& registry, const AttentionProblem& p,
                          const ProblemData& data, const CompareOptions& options,
                          const ProblemResult& measured) {
  BackendResult r;
  r.set_backend(kAutoRowName);
  auto selection = SelectBackend(registry, "auto", p, options.threads);
  if (!selection.ok()) {
    r.set_status("unsupported");
    r.set_detail(std::string(selection.status().message()));
    return r;
  }
  Backend* chosen = selection->backend;
  // The chosen backend's row, measured above (or now, when --backends left it out).
  BackendResult base;
  for (const BackendResult& b : measured.results()) {
    if (b.backend() == chosen->Name()) base = b;
  }
  if (base.backend().empty()) base = Measure(chosen, p, data, options);
  if (base.status() != "ok") {
    r.set_status(base.status());
    r.set_detail(absl::StrCat("chose ", chosen->Name(), ": ", base.detail()));
    return r;
  }
  auto placed = PlacedProblem::Place(chosen, data);
  if (!placed.ok()) {
    r.set_status("error");
    r.set_detail(std::string(placed.status().message()));
    return r;
  }
  std::vector<double> via_auto, direct;
  RunInfo info;
  const auto begin = Clock::now();
  absl::Status s;
  while (static_cast<int>(via_auto.size()) < options.max_runs) {
    auto start = Clock::now();
    auto again = SelectBackend(registry, "auto", p, options.threads);
    s = again.ok() ? placed->Forward(p, &info) : again.status();
    if (s.ok()) s = chosen->Synchronize();
    via_auto.push_back(SecondsSince(start));
    start = Clock::now();
    if (s.ok()) s = placed->Forward(p, &info);
    if (s.ok()) s = chosen->Synchronize();
    direct.push_back(SecondsSince(start));
    if (!s.ok()) break;
    const double elapsed = SecondsSince(begin);
    const bool enough =
        static_cast<int>(via_auto.size()) >= options.min_runs && elapsed >= options.min_seconds;
    if (enough || elapsed >= options.budget_seconds) break;
  }
  if (!s.ok()) {
    r.set_status("error");
    r.set_detail(std::string(s.message()));
    return r;
  }
  const double overhead = Median(via_auto) / Median(direct);
  r.set_status("ok");
  r.set_kernel(base.kernel());
  r.set_runs(static_cast<int>(via_auto.size()));
  r.set_median_s(base.median_s() * overhead);
  r.set_min_s(base.min_s() * overhead);
  r.set_max_abs_err(base.max_abs_err());
  r.set_detail(absl::StrFormat("chose %s (per-call selection x%.3f over calling it directly)",
                               chosen->Name(), overhead));
  return r;
}

// GFLOP/s, GB/s and the % of the limit that applies, from the median.
// compute_peak: the problem's compute limit (ComputeLimitOf).
void SetRates(const CostReport& cost, const MachineLimits& limits, bool memory_bound,
              double compute_peak, BackendResult* r) {
  r->set_gflops(cost.useful_flops / r->median_s() * 1e-9);
  r->set_gbps(double(cost.bytes_moved) / r->median_s() * 1e-9);
  if (memory_bound && limits.read_gbps() > 0) {
    r->set_pct_of_limit(100.0 * r->gbps() / limits.read_gbps());
  } else if (compute_peak > 0) {
    r->set_pct_of_limit(100.0 * r->gflops() / compute_peak);
  }
}

// The compute limit of p's products: the bf16 dot-product peak where Q.K
// may multiply bf16 (MayFlushBF16Products: bf16 K with bf16 Q, or FAST) and
// the CPU has it (twice the f32 FMA's multiply-adds an instruction), else
// the f32 FMA peak.
struct ComputeLimit {
  double gflops;
  const char* name;  // ProblemResult::compute_limit
};
ComputeLimit ComputeLimitOf(const AttentionProblem& p, const MachineLimits& limits) {
  if (MayFlushBF16Products(p) && !p.backward && limits.peak_bf16_dot_gflops() > 0) {
    return {limits.peak_bf16_dot_gflops(), "bf16 dot-product peak"};
  }
  return {limits.peak_fma_gflops(), "peak FMA"};
}

}  // namespace

absl::StatusOr<CompareReport> RunCompare(const BackendRegistry& registry,
                                         const std::vector<AttentionProblem>& problems,
                                         const CompareOptions& options,
                                         const MachineFingerprint& machine,
                                         const MachineLimits& limits) {
  ATTNKIT_ASSIGN_OR_RETURN(const std::vector<Backend*> backends,
                           registry.FindAll(options.backends));
  for (Backend* b : backends) ATTNKIT_RETURN_IF_ERROR(b->SetNumThreads(options.threads));

  CompareReport report;
  *report.mutable_machine() = machine;
  *report.mutable_limits() = limits;
  report.set_flop_convention(
      "useful FLOPs = 4 * head_dim * (query, key) pairs not blocked by the mask or padding "
      "(QK^T and PV, multiply-add = 2 FLOPs), 2.5x that for the backward pass of _bwd problems "
      "(which alone they time); GB/s counts Q, K, V and O (and dO, dQ, dK, dV) read or written "
      "once");
  report.set_created_at(NowUtc());
  report.mutable_attnkit()->set_version(AttnkitVersion());
  report.mutable_attnkit()->set_commit(AttnkitCommit());
  const double balance = limits.read_gbps() > 0 ? limits.peak_fma_gflops() / limits.read_gbps() : 0;

  int index = 0;
  for (const AttentionProblem& p : problems) {
    ++index;
    ProblemResult* pr = report.add_problems();
    pr->set_name(p.name.empty() ? p.Id() : p.name);
    pr->set_id(p.Id());
    pr->set_compute(std::string(ComputeModeName(p.compute)));
    const ComputeLimit compute_limit = ComputeLimitOf(p, limits);
    pr->set_compute_limit(compute_limit.name);
    *pr->mutable_config() = ConfigForReport(ConfigFromProblem(p));
    const CostReport cost = ComputeCost(p);
    pr->set_useful_flops(cost.useful_flops);
    pr->set_bytes(double(cost.bytes_moved));
    pr->set_memory_bound(cost.useful_flops / double(cost.bytes_moved) < balance);
    pr->set_fits_in_llc(limits.llc_bytes() > 0 && cost.bytes_moved <= limits.llc_bytes());
    ATTNKIT_ASSIGN_OR_RETURN(const ProblemData data, ProblemData::Random(p, p.seed));
    std::unique_ptr<BackwardInputs> backward;
    if (p.backward) {
      if (options.progress != nullptr) {
        *options.progress << absl::StrFormat("[%d/%d] %-38s fp64 reference gradients...\n", index,
                                             problems.size(), pr->name());
        options.progress->flush();
      }
      ATTNKIT_ASSIGN_OR_RETURN(BackwardInputs inputs, MakeBackwardInputs(p, data));
      backward = std::make_unique<BackwardInputs>(std::move(inputs));
    }
    for (Backend* b : backends) {
      BackendResult r = Measure(b, p, data, options, backward.get());
      if (r.status() == "ok") {
        SetRates(cost, limits, pr->memory_bound(), compute_limit.gflops, &r);
      }
      if (options.progress != nullptr) {
        *options.progress << absl::StrFormat(
            "[%d/%d] %-38s %-18s %s\n", index, problems.size(), pr->name(), r.backend(),
            r.status() == "ok" ? absl::StrFormat("%.3f ms", r.median_s() * 1e3) : r.status());
        options.progress->flush();
      }
      *pr->add_results() = r;
    }
    if (options.auto_row && !p.backward) {  // auto selects forward backends
      BackendResult r = MeasureAuto(registry, p, data, options, *pr);
      if (r.status() == "ok") {
        SetRates(cost, limits, pr->memory_bound(), compute_limit.gflops, &r);
      }
      *pr->add_results() = r;
    }
    // Speed-ups against the reference and the best backend that passed
    // (auto is measured against the best, never counted as it).
    double best = 0, reference = 0;
    for (const BackendResult& r : pr->results()) {
      if (r.status() != "ok" || r.backend() == kAutoRowName) continue;
      if (best == 0 || r.median_s() < best) best = r.median_s();
      if (r.backend() == kReferenceBackendName) reference = r.median_s();
    }
    for (BackendResult& r : *pr->mutable_results()) {
      if (r.status() != "ok") continue;
      r.set_speedup_vs_best(best / r.median_s());
      if (reference > 0) r.set_speedup_vs_reference(reference / r.median_s());
    }
  }
  return report;
}

void ApplyBaseline(const CompareReport& baseline, CompareReport* report) {
  std::map<std::pair<std::string, std::string>, double> before;
  for (const ProblemResult& p : baseline.problems()) {
    for (const BackendResult& r : p.results()) {
      if (r.status() == "ok") before[{p.id(), r.backend()}] = r.median_s();
    }
  }
  for (ProblemResult& p : *report->mutable_problems()) {
    for (BackendResult& r : *p.mutable_results()) {
      auto it = before.find({p.id(), r.backend()});
      if (it == before.end() || r.status() != "ok") continue;
      r.set_baseline_median_s(it->second);
      r.set_slower_than_baseline(r.median_s() > 1.10 * it->second);
    }
  }
}

std::string FormatCompareTable(const CompareReport& report, bool wide) {
  const MachineLimits& l = report.limits();
  std::string out = WrapWords(
      absl::StrFormat(
          "machine: %s, %d threads; limits: peak FMA %.1f GFLOP/s (%s)%s, read %.1f "
          "GB/s, OpenBLAS sgemm %.1f GFLOP/s (%s kernel)",
          report.machine().cpu_model(), l.threads(), l.peak_fma_gflops(), l.best_target(),
          l.peak_bf16_dot_gflops() > 0
              ? absl::StrFormat(", bf16 dot products %.1f GFLOP/s", l.peak_bf16_dot_gflops())
              : "",
          l.read_gbps(), l.sgemm_gflops(), l.openblas_core()),
      kTerminalColumns);
  absl::StrAppend(&out,
                  WrapWords(absl::StrCat("FLOPs: ", report.flop_convention()), kTerminalColumns));
  // Default: at most kTerminalColumns per line (kernels and reasons
  // shortened, min ms and GB/s left out); wide: everything, whole.
  const auto fit = [wide](const std::string& s, size_t width) {
    return wide ? s : FitWidth(s, width);
  };

  // A backend refused by every problem for one reason (e.g. no GPU) is said
  // once, not once per problem.
  std::map<std::string, std::set<std::string>> refusals;
  std::map<std::string, int> refused_count;
  size_t kernel_width = 6, name_width = 7;
  for (const ProblemResult& p : report.problems()) {
    for (const BackendResult& r : p.results()) {
      kernel_width = std::max(kernel_width, r.kernel().size());
      name_width = std::max(name_width, r.backend().size());
      if (r.status() == "unsupported" || r.status() == "unavailable") {
        refusals[r.backend()].insert(absl::StrCat(r.status(), ": ", r.detail()));
        ++refused_count[r.backend()];
      }
    }
  }
  std::set<std::string> everywhere;
  for (const auto& [backend, reasons] : refusals) {
    if (refused_count[backend] == report.problems_size() && reasons.size() == 1) {
      everywhere.insert(backend);
      absl::StrAppend(
          &out, fit(absl::StrCat("not run: ", backend, ": ", *reasons.begin()), kTerminalColumns),
          "\n");
    }
  }
  const int nw = static_cast<int>(name_width);
  // Default columns: 2 + name + median 11 + GFLOP/s 9 + %limit 8 + vs ref 9
  // + vs best 8 + check 14, then the kernel in what is left.
  const int fixed = 2 + nw + 11 + 9 + 8 + 9 + 8 + 14 + 1;
  const int kw = wide ? static_cast<int>(kernel_width)
                      : std::max(8, static_cast<int>(kTerminalColumns) - fixed);
  for (const ProblemResult& p : report.problems()) {
    absl::StrAppend(
        &out, "\n",
        WrapWords(absl::StrFormat(
                      "%s  [%s]  %.3g GFLOP useful, %.3g MB moved, %s", p.name(), p.id(),
                      p.useful_flops() * 1e-9, p.bytes() * 1e-6,
                      p.memory_bound()
                          ? (p.fits_in_llc() ? "memory-bound: % of read bandwidth (but it fits "
                                               "in the last-level cache: warm calls may beat it)"
                                             : "memory-bound: % of read bandwidth")
                          : "compute-bound: % of " +
                                (p.compute_limit().empty() ? "peak FMA" : p.compute_limit())),
                  kTerminalColumns));
    if (wide) {
      absl::StrAppendFormat(&out, "  %-*s %-*s %10s %10s %8s %7s %7s %8s %7s  %s\n", nw, "backend",
                            kw, "kernel", "median ms", "min ms", "GFLOP/s", "GB/s", "%limit",
                            "vs ref", "vs best", "check");
    } else {
      absl::StrAppendFormat(&out, "  %-*s %10s %8s %7s %8s %7s  %-12s %s\n", nw, "backend",
                            "median ms", "GFLOP/s", "%limit", "vs ref", "vs best", "check",
                            "kernel");
    }
    for (const BackendResult& r : p.results()) {
      if (everywhere.count(r.backend())) continue;
      if (r.status() != "ok") {
        const std::string line =
            absl::StrFormat("  %-*s %s: %s%s", nw, r.backend(),
                            r.status() == "wrong" ? "WRONG (not timed)" : r.status(), r.detail(),
                            r.kernel().empty() ? "" : absl::StrCat(" [", r.kernel(), "]"));
        absl::StrAppend(&out, fit(line, kTerminalColumns), "\n");
        continue;
      }
      std::string vs_ref =
          r.speedup_vs_reference() > 0 ? absl::StrFormat("%.1fx", r.speedup_vs_reference()) : "-";
      std::string flag;
      if (r.baseline_median_s() > 0) {
        flag = absl::StrFormat("  %s baseline %.3f ms",
                               r.slower_than_baseline() ? "SLOWER than" : "vs",
                               r.baseline_median_s() * 1e3);
      }
      // The auto row names its choice where a backend names its kernel.
      const std::string kernel = r.backend() == kAutoRowName
                                     ? absl::StrCat(r.detail(), " [", r.kernel(), "]")
                                     : r.kernel();
      const std::string check = absl::StrFormat("ok (%.1e)", r.max_abs_err());
      if (wide) {
        absl::StrAppendFormat(
            &out, "  %-*s %-*s %10.3f %10.3f %8.1f %7.1f %6.1f%% %8s %7.2f  %s%s\n", nw,
            r.backend(), kw, kernel, r.median_s() * 1e3, r.min_s() * 1e3, r.gflops(), r.gbps(),
            r.pct_of_limit(), vs_ref, r.speedup_vs_best(), check, flag);
      } else {
        absl::StrAppendFormat(&out, "  %-*s %10.3f %8.1f %6.1f%% %8s %7.2f  %-12s %s%s\n", nw,
                              r.backend(), r.median_s() * 1e3, r.gflops(), r.pct_of_limit(), vs_ref,
                              r.speedup_vs_best(), check, FitWidth(kernel, static_cast<size_t>(kw)),
                              flag);
      }
    }
  }
  return out;
}

absl::StatusOr<CompareReport> MeasureAndCompare(const BackendRegistry& registry,
                                                const std::vector<AttentionProblem>& problems,
                                                const CompareOptions& options) {
  std::ostream null_stream(nullptr);
  std::ostream& progress = options.progress != nullptr ? *options.progress : null_stream;
  progress << "measuring machine limits...\n";
  std::string how;
  const MachineLimits limits = LoadOrMeasureLimits(options.threads, /*refresh=*/true, &how);
  progress << "machine limits " << how << "\n";
  return RunCompare(registry, problems, options, Fingerprint(options.threads), limits);
}

absl::StatusOr<std::string> ReportToJson(const CompareReport& report) {
  return ProtoToJson(report);
}

absl::StatusOr<CompareReport> ReportFromJson(const std::string& json, const std::string& source) {
  CompareReport report;
  const absl::Status parsed = ProtoFromJson(json, "its JSON", &report, /*ignore_unknown=*/true);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not an attnkit compare report; ", parsed.message()));
  }
  return report;
}

}  // namespace attnkit
