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
#include "harness/paired_read.h"
#include "harness/problem_data.h"
#include "harness/text_fit.h"
#include "io/config_io.h"
#include "io/proto_json.h"
#include "ops/cost.h"
#include "oracle/compare.h"
#include "oracle/reference_backward.h"
#include "platform/machine_info.h"
#include "platform/median.h"
#include "platform/version.h"

namespace attnkit {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Checks then times one backend on one problem: the forward, or with
// `backward` the backward pass (after a checked forward gives its O and lse).
// With `read` (a memory-bound problem), each timed call is followed by a
// pass of the read loop, whose median and spread become the limit.
BackendResult Measure(Backend* backend, const AttentionProblem& p, const ProblemData& data,
                      const CompareOptions& options, const BackwardInputs* backward = nullptr,
                      PairedReadLoop* read = nullptr) {
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
  std::vector<double> samples, reads;
  if (checked_seconds >= options.budget_seconds) {
    samples.push_back(checked_seconds);  // too slow to repeat within the budget
    if (read != nullptr) reads.push_back(read->TimeOnePass());
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
      if (read != nullptr) reads.push_back(read->TimeOnePass());
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
  r.set_max_s(*std::max_element(samples.begin(), samples.end()));
  if (!reads.empty()) {  // GB/s of the read loop: median, slowest, fastest pass
    const double gb = static_cast<double>(read->bytes()) * 1e-9;
    r.set_read_loop_gbps(gb / Median(reads));
    r.set_read_loop_min_gbps(gb / *std::max_element(reads.begin(), reads.end()));
    r.set_read_loop_max_gbps(gb / *std::min_element(reads.begin(), reads.end()));
  }
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
  r.set_max_s(base.max_s() * overhead);
  r.set_max_abs_err(base.max_abs_err());
  // Its read loop: the chosen backend's (paired with its rounds).
  r.set_read_loop_gbps(base.read_loop_gbps());
  r.set_read_loop_min_gbps(base.read_loop_min_gbps());
  r.set_read_loop_max_gbps(base.read_loop_max_gbps());
  r.set_detail(absl::StrFormat("chose %s (per-call selection x%.3f over calling it directly)",
                               chosen->Name(), overhead));
  return r;
}

// The compute limit of p's products: where Q.K may multiply bf16
// (MayFlushBF16Products: bf16 K with bf16 Q, or FAST), the AMX bf16 peak
// where the CPU has AMX, else the bf16 dot-product peak where it has
// AVX512_BF16 (twice the f32 FMA's multiply-adds an instruction), else the
// f32 FMA peak; each with its lowest pass over the run. A training step
// counts as bf16 only under FAST (FastRoundsGradOperands: all five of its
// products may be bf16; under EXACT three of them multiply f32 P and dX).
struct ComputeLimit {
  double gflops;
  double min_gflops;
  const char* name;  // ProblemResult::compute_limit
};
ComputeLimit ComputeLimitOf(const AttentionProblem& p, const MachineLimits& limits) {
  const bool bf16_products = MayFlushBF16Products(p) && (!p.backward || FastRoundsGradOperands(p));
  if (bf16_products && limits.peak_amx_bf16_gflops() > 0) {
    return {limits.peak_amx_bf16_gflops(), limits.peak_amx_bf16_min_gflops(), "bf16 AMX peak"};
  }
  if (bf16_products && limits.peak_bf16_dot_gflops() > 0) {
    return {limits.peak_bf16_dot_gflops(), limits.peak_bf16_dot_min_gflops(),
            "bf16 dot-product peak"};
  }
  return {limits.peak_fma_gflops(), limits.peak_fma_min_gflops(), "peak FMA"};
}

// GFLOP/s, GB/s and the % of the limit that applies, from the median, with
// the range the limit's spread allows. Memory-bound: the paired read loop
// (Measure), else the read bandwidth measured with the limits.
void SetRates(const CostReport& cost, const MachineLimits& limits, bool memory_bound,
              const ComputeLimit& compute, BackendResult* r) {
  r->set_gflops(cost.useful_flops / r->median_s() * 1e-9);
  r->set_gbps(double(cost.bytes_moved) / r->median_s() * 1e-9);
  double rate = r->gflops();
  if (r->read_loop_gbps() > 0) r->set_pct_of_read_loop(100.0 * r->gbps() / r->read_loop_gbps());
  r->set_paired_read(memory_bound && r->read_loop_gbps() > 0);
  if (r->paired_read()) {
    rate = r->gbps();
    r->set_limit_used(r->read_loop_gbps());
    r->set_limit_min(r->read_loop_min_gbps());
    r->set_limit_max(r->read_loop_max_gbps());
  } else if (memory_bound) {
    rate = r->gbps();
    r->set_limit_used(limits.read_gbps());
    r->set_limit_min(limits.read_gbps_min());
    r->set_limit_max(limits.read_gbps_max());
  } else {
    r->set_limit_used(compute.gflops);
    r->set_limit_min(compute.min_gflops);
    r->set_limit_max(compute.gflops);
  }
  if (r->limit_used() <= 0) return;
  r->set_pct_of_limit(100.0 * rate / r->limit_used());
  // A missing spread (older cached limits) is no spread.
  const double lo = r->limit_min() > 0 ? r->limit_min() : r->limit_used();
  const double hi = r->limit_max() > 0 ? r->limit_max() : r->limit_used();
  r->set_pct_of_limit_low(100.0 * rate / hi);
  r->set_pct_of_limit_high(100.0 * rate / lo);
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
      "useful FLOPs = 2 * (head_dim + value_head_dim) * (query, key) pairs not blocked by the "
      "mask or padding (QK^T and PV, multiply-add = 2 FLOPs; 4 * head_dim when they are equal), "
      "2 * (3 head_dim + 2 value_head_dim) per pair for the backward pass of _bwd problems "
      "(which alone they time; 2.5x the forward's when equal); GB/s counts Q, K, V and O (and dO, "
      "dQ, dK, dV) read or written "
      "once");
  report.set_created_at(NowUtc());
  report.mutable_attnkit()->set_version(AttnkitVersion());
  report.mutable_attnkit()->set_commit(AttnkitCommit());
  const double balance = limits.read_gbps() > 0 ? limits.peak_fma_gflops() / limits.read_gbps() : 0;
  // The limits as the run goes: peak passes raise the peaks (maxima) and
  // widen their spread; every result is rated against the final figures.
  MachineLimits& run_limits = *report.mutable_limits();
  std::unique_ptr<PairedReadLoop> read_loop;
  if (options.paired_read) read_loop = std::make_unique<PairedReadLoop>(options.threads);
  std::vector<CostReport> costs;

  int index = 0;
  for (const AttentionProblem& p : problems) {
    ++index;
    if (options.peak_passes) AddPeakPass(options.threads, &run_limits);
    ProblemResult* pr = report.add_problems();
    pr->set_name(p.name.empty() ? p.Id() : p.name);
    pr->set_id(p.Id());
    pr->set_compute(std::string(ComputeModeName(p.compute)));
    pr->set_compute_limit(ComputeLimitOf(p, run_limits).name);
    *pr->mutable_config() = ConfigForReport(ConfigFromProblem(p));
    const CostReport cost = ComputeCost(p);
    costs.push_back(cost);
    pr->set_useful_flops(cost.useful_flops);
    pr->set_bytes(double(cost.bytes_moved));
    const double intensity = cost.useful_flops / double(cost.bytes_moved);  // FLOP/byte
    pr->set_memory_bound(intensity < balance);
    pr->set_fits_in_llc(limits.llc_bytes() > 0 && cost.bytes_moved <= limits.llc_bytes());
    // Within twice the balance point a noisy read figure can flip the
    // verdict (a decode of int8 K/V sits near it): pair a read loop, and
    // decide with its figures after the run.
    PairedReadLoop* read = nullptr;
    if (intensity < 2 * balance && read_loop != nullptr && read_loop->Resize(cost.bytes_moved)) {
      read = read_loop.get();
    }
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
      BackendResult r = Measure(b, p, data, options, backward.get(), read);
      if (options.progress != nullptr) {
        *options.progress << absl::StrFormat(
            "[%d/%d] %-38s %-18s %s\n", index, problems.size(), pr->name(), r.backend(),
            r.status() == "ok" ? absl::StrFormat("%.3f ms", r.median_s() * 1e3) : r.status());
        options.progress->flush();
      }
      *pr->add_results() = r;
    }
    if (options.auto_row && !p.backward) {  // auto selects forward backends
      *pr->add_results() = MeasureAuto(registry, p, data, options, *pr);
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
  if (options.peak_passes) AddPeakPass(options.threads, &run_limits);
  // Rates against the final limits. A compute-bound result over 100 % of its
  // limit means the peak was measured low: take longer passes (up to three
  // rounds) and rate again; what still exceeds it is reported with a note.
  auto rate_all = [&]() -> bool {
    bool over = false;
    for (int i = 0; i < report.problems_size(); ++i) {
      ProblemResult* pr = report.mutable_problems(i);
      const ComputeLimit compute = ComputeLimitOf(problems[static_cast<size_t>(i)], run_limits);
      // Paired: memory-bound when its intensity is below the balance of the
      // final peak and the read loop's median over the backends' rounds.
      std::vector<double> paired;
      for (const BackendResult& r : pr->results()) {
        if (r.status() == "ok" && r.read_loop_gbps() > 0) paired.push_back(r.read_loop_gbps());
      }
      if (!paired.empty()) {
        pr->set_memory_bound(pr->useful_flops() / pr->bytes() < compute.gflops / Median(paired));
      }
      for (BackendResult& r : *pr->mutable_results()) {
        if (r.status() != "ok") continue;
        SetRates(costs[static_cast<size_t>(i)], run_limits, pr->memory_bound(), compute, &r);
        over = over || (!pr->memory_bound() && r.pct_of_limit() > 100.0);
      }
    }
    return over;
  };
  bool over = rate_all();
  for (int round = 0; over && options.peak_passes && round < 3; ++round) {
    if (options.progress != nullptr) {
      *options.progress << "a result exceeds its compute peak: measuring the peak again...\n";
    }
    AddPeakPass(options.threads, &run_limits, /*trials=*/4);
    over = rate_all();
  }
  for (ProblemResult& pr : *report.mutable_problems()) {
    for (BackendResult& r : *pr.mutable_results()) {
      if (r.status() != "ok" || r.pct_of_limit() <= 100.0) continue;
      if (pr.memory_bound()) {
        r.set_limit_note(absl::StrFormat(
            "faster than %s over the same %.3g MB: part of the data stayed in the caches "
            "(last-level cache %.3g MB) between calls, or the kernel reads fewer bytes than the "
            "count assumes",
            r.paired_read() ? "a read loop timed in the same rounds" : "the machine's read loop",
            pr.bytes() * 1e-6, static_cast<double>(run_limits.llc_bytes()) * 1e-6));
      } else {
        const std::string limit = pr.compute_limit().empty() ? "peak FMA" : pr.compute_limit();
        r.set_limit_note(
            options.peak_passes
                ? absl::StrFormat(
                      "over the %s re-measured after the run (%d passes, highest %.1f GFLOP/s): "
                      "the kernel ran at a clock the peak loop never got (turbo with fewer busy "
                      "units), or every pass of the loop met contention",
                      limit, run_limits.peak_passes(), r.limit_used())
                : absl::StrFormat("over the %s this comparison was given (%.1f GFLOP/s, not "
                                  "re-measured): limits from another machine or moment",
                                  limit, r.limit_used()));
      }
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
  // Peaks: the highest of the run's passes, the lowest after it.
  const bool spread = l.peak_passes() > 1;
  std::string out = WrapWords(
      absl::StrFormat(
          "machine: %s, %d threads; limits: peak FMA %.1f GFLOP/s (%s%s)%s, read %.1f "
          "GB/s%s, OpenBLAS sgemm %.1f GFLOP/s (%s kernel)",
          report.machine().cpu_model(), l.threads(), l.peak_fma_gflops(), l.best_target(),
          spread ? absl::StrFormat("; highest of %d passes over the run, lowest %.1f",
                                   l.peak_passes(), l.peak_fma_min_gflops())
                 : "",
          absl::StrCat(
              l.peak_bf16_dot_gflops() > 0
                  ? absl::StrFormat(", bf16 dot products %.1f GFLOP/s%s", l.peak_bf16_dot_gflops(),
                                    spread ? absl::StrFormat(" (lowest pass %.1f)",
                                                             l.peak_bf16_dot_min_gflops())
                                           : "")
                  : "",
              l.peak_amx_bf16_gflops() > 0
                  ? absl::StrFormat(", bf16 AMX tiles %.1f GFLOP/s%s", l.peak_amx_bf16_gflops(),
                                    spread ? absl::StrFormat(" (lowest pass %.1f)",
                                                             l.peak_amx_bf16_min_gflops())
                                           : "")
                  : ""),
          l.read_gbps(),
          l.read_passes() > 0
              ? absl::StrFormat(" (passes %.1f-%.1f)", l.read_gbps_min(), l.read_gbps_max())
              : "",
          l.sgemm_gflops(), l.openblas_core()),
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
    // Memory-bound with a paired read loop: its GB/s over the backends'
    // rounds (the lowest slowest pass to the highest fastest one).
    double read_lo = 0, read_hi = 0;
    for (const BackendResult& r : p.results()) {
      if (r.status() != "ok" || !r.paired_read()) continue;
      read_lo = read_lo == 0 ? r.limit_min() : std::min(read_lo, r.limit_min());
      read_hi = std::max(read_hi, r.limit_max());
    }
    const std::string memory_limit =
        read_hi > 0 ? absl::StrFormat(
                          "memory-bound: %% of a read loop over its bytes, one pass after each "
                          "call (paired; %.1f-%.1f GB/s)",
                          read_lo, read_hi)
                    : "memory-bound: % of read bandwidth";
    absl::StrAppend(
        &out, "\n",
        WrapWords(absl::StrFormat(
                      "%s  [%s]  %.3g GFLOP useful, %.3g MB moved, %s", p.name(), p.id(),
                      p.useful_flops() * 1e-9, p.bytes() * 1e-6,
                      p.memory_bound()
                          ? (p.fits_in_llc()
                                 ? memory_limit + " (but it fits in the last-level cache: warm "
                                                  "calls may beat it)"
                                 : memory_limit)
                          : "compute-bound: % of " +
                                (p.compute_limit().empty() ? "peak FMA" : p.compute_limit())),
                  kTerminalColumns));
    if (wide) {
      absl::StrAppendFormat(&out, "  %-*s %-*s %10s %10s %8s %7s %7s %13s %6s %8s %7s  %s\n", nw,
                            "backend", kw, "kernel", "median ms", "min ms", "GFLOP/s", "GB/s",
                            "%limit", "limit spread", "%read", "vs ref", "vs best", "check");
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
        // The %limit the limit's spread allows (its fastest to slowest pass).
        const std::string range =
            absl::StrFormat("%.1f-%.1f%%", r.pct_of_limit_low(), r.pct_of_limit_high());
        // %read: against the paired read loop, where there was one.
        const std::string read =
            r.read_loop_gbps() > 0 ? absl::StrFormat("%.1f%%", r.pct_of_read_loop()) : "-";
        absl::StrAppendFormat(
            &out, "  %-*s %-*s %10.3f %10.3f %8.1f %7.1f %6.1f%% %13s %6s %8s %7.2f  %s%s\n", nw,
            r.backend(), kw, kernel, r.median_s() * 1e3, r.min_s() * 1e3, r.gflops(), r.gbps(),
            r.pct_of_limit(), range, read, vs_ref, r.speedup_vs_best(), check, flag);
      } else {
        absl::StrAppendFormat(&out, "  %-*s %10.3f %8.1f %6.1f%% %8s %7.2f  %-12s %s%s\n", nw,
                              r.backend(), r.median_s() * 1e3, r.gflops(), r.pct_of_limit(), vs_ref,
                              r.speedup_vs_best(), check, FitWidth(kernel, static_cast<size_t>(kw)),
                              flag);
      }
      if (!r.limit_note().empty()) {
        absl::StrAppend(
            &out, WrapWords(absl::StrCat("    ", r.backend(), ": over 100 %: ", r.limit_note()),
                            kTerminalColumns));
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
  CompareOptions tracked = options;
  tracked.peak_passes = true;
  return RunCompare(registry, problems, tracked, Fingerprint(options.threads), limits);
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
