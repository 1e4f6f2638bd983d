#include "harness/check.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/problem_config.h"
#include "core/status_macros.h"
#include "harness/checked_run.h"
#include "harness/grad_check.h"
#include "harness/problem_data.h"
#include "harness/text_fit.h"
#include "oracle/compare.h"
#include "oracle/reference.h"
#include "platform/version.h"

namespace attnkit {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

absl::StatusOr<CheckReport> RunCheck(const BackendRegistry& registry, const AttentionConfig& config,
                                     const std::vector<std::string>& backend_names) {
  ATTNKIT_ASSIGN_OR_RETURN(const AttentionProblem p, ProblemFromConfig(config));
  ATTNKIT_ASSIGN_OR_RETURN(const std::vector<Backend*> backends, registry.FindAll(backend_names));
  ATTNKIT_ASSIGN_OR_RETURN(ProblemData data, ProblemData::Random(p, p.seed));
  CheckReport report;
  report.set_name(p.name);
  report.set_id(p.Id());
  report.set_compute(std::string(ComputeModeName(p.compute)));
  *report.mutable_config() = ConfigForReport(config);
  report.set_seed(p.seed);
  report.mutable_attnkit()->set_version(AttnkitVersion());
  report.mutable_attnkit()->set_commit(AttnkitCommit());
  const auto ref_start = std::chrono::steady_clock::now();
  const ReferenceResult ref = ComputeReference(p, data.args());
  report.set_reference_s(SecondsSince(ref_start));
  BackwardInputs backward;  // a training step's problem: dO and the reference gradients
  if (p.backward) {
    const auto grad_start = std::chrono::steady_clock::now();
    ATTNKIT_ASSIGN_OR_RETURN(backward, MakeBackwardInputs(p, data));
    report.set_reference_grad_s(SecondsSince(grad_start));
  }
  for (Backend* b : backends) {
    CheckResult* r = report.add_results();
    r->set_backend(b->Name());
    // "unavailable": the backend cannot run here at all (no GPU, bad plugin);
    // "unsupported": it works but refuses this problem.
    const absl::Status available = b->Available();
    const absl::Status supported = available.ok() ? b->Supports(p) : available;
    if (!supported.ok()) {
      r->set_status(available.ok() ? "unsupported" : "unavailable");
      r->set_detail(std::string(supported.message()));
      continue;
    }
    // Twice where a row must come out NaN (harness/checked_run.h).
    const CheckedRun run = RunAndCompare(b, p, data, ref);
    r->set_time_ms(1e3 * run.seconds);
    r->set_kernel(run.info.kernel);
    if (!run.run.ok()) {
      r->set_status("error");
      r->set_detail(std::string(run.run.message()));
      continue;
    }
    const Comparison& c = run.comparison;
    r->set_status(c.ok() ? "pass" : "fail");
    r->set_detail(c.first_failure);
    r->set_max_abs_err(c.max_abs_err);
    r->set_max_rel_err(c.max_rel_err);
    r->set_max_lse_err(c.max_lse_err);
    r->set_max_bound(c.max_bound);
    r->set_max_bound_fraction(c.max_bound_fraction);
    r->set_checked(c.checked);
    r->set_mismatches(c.mismatches);
    if (!p.backward || !c.ok()) continue;
    const GradCheck g = CheckBackward(b, p, data, backward);
    r->set_grad_status(g.status);
    r->set_grad_detail(g.detail);
    r->set_grad_kernel(g.kernel);
    r->set_grad_time_ms(1e3 * g.seconds);
    r->set_grad_max_abs_err(g.comparison.max_abs_err);
    r->set_grad_max_bound_fraction(g.comparison.max_bound_fraction);
    r->set_grad_checked(g.comparison.checked);
    r->set_grad_mismatches(g.comparison.mismatches);
  }
  return report;
}

std::string FormatCheckTable(const CheckReport& report, bool wide) {
  std::string out =
      absl::StrCat("check ", report.id(), report.name().empty() ? "" : " (" + report.name() + ")",
                   ", seed ", report.seed(), ", compute ", report.compute(), "\n");
  absl::StrAppendFormat(&out, "fp64 oracle computed in %.3f s", report.reference_s());
  const bool backward = report.config().backward();
  if (backward) {
    absl::StrAppendFormat(&out, "; its gradients in %.3f s (backward rows: dQ, dK, dV%s)",
                          report.reference_grad_s(),
                          report.config().additive_bias() ? ", dBias" : "");
  }
  absl::StrAppend(&out, "\n\n");
  // Default: 120 columns (kernels and reasons shortened); wide: whole.
  size_t kernel_width = 34, name_width = 10;  // room for "  backward"
  for (const CheckResult& r : report.results()) {
    if (wide) kernel_width = std::max(kernel_width, r.kernel().size());
    name_width = std::max(name_width, r.backend().size());
  }
  const auto fit = [wide](const std::string& s, size_t width) {
    return wide ? s : FitWidth(s, width);
  };
  const int kw = static_cast<int>(kernel_width), nw = static_cast<int>(name_width);
  // err/bound: the largest error as a fraction of the oracle's bound for
  // that element (1.0 = at the limit; see oracle/compare.h), next to the result.
  absl::StrAppendFormat(&out, "%-*s %-6s %9s %11s %11s %11s %9s  %s\n", nw, "backend", "result",
                        "err/bound", "max abs err", "max rel err", "max bound", "time ms",
                        "kernel");
  for (const CheckResult& r : report.results()) {
    if (r.status() == "unavailable" || r.status() == "unsupported") {
      absl::StrAppend(&out,
                      fit(absl::StrFormat("%-*s %s: %s", nw, r.backend(), r.status(), r.detail()),
                          kTerminalColumns),
                      "\n");
    } else if (r.status() == "error") {
      absl::StrAppend(&out,
                      fit(absl::StrFormat("%-*s %-6s %s [%s]", nw, r.backend(), "ERROR", r.detail(),
                                          r.kernel()),
                          kTerminalColumns),
                      "\n");
    } else {
      absl::StrAppendFormat(&out, "%-*s %-6s %9.3f %11.3e %11.3e %11.3e %9.2f  %s\n", nw,
                            r.backend(), r.status() == "pass" ? "pass" : "FAIL",
                            r.max_bound_fraction(), r.max_abs_err(), r.max_rel_err(), r.max_bound(),
                            r.time_ms(), fit(r.kernel(), static_cast<size_t>(kw)));
      if (r.status() != "pass") {
        absl::StrAppend(&out, fit("    first mismatch: " + r.detail(), kTerminalColumns), "\n");
      }
    }
    if (!backward || r.grad_status().empty()) continue;
    // The backward pass, under its forward's line.
    const std::string label = "  backward";
    if (r.grad_status() == "pass" || r.grad_status() == "fail") {
      absl::StrAppendFormat(&out, "%-*s %-6s %9.3f %11.3e %11s %11s %9.2f  %s\n", nw, label,
                            r.grad_status() == "pass" ? "pass" : "FAIL",
                            r.grad_max_bound_fraction(), r.grad_max_abs_err(), "", "",
                            r.grad_time_ms(), fit(r.grad_kernel(), static_cast<size_t>(kw)));
      if (r.grad_status() != "pass") {
        absl::StrAppend(&out, fit("    first mismatch: " + r.grad_detail(), kTerminalColumns),
                        "\n");
      }
    } else {
      absl::StrAppend(&out,
                      fit(absl::StrFormat("%-*s %s: %s", nw, label,
                                          r.grad_status() == "error" ? "ERROR" : r.grad_status(),
                                          r.grad_detail()),
                          kTerminalColumns),
                      "\n");
    }
  }
  return out;
}

int CountCheckFailures(const CheckReport& report) {
  int n = 0;
  for (const CheckResult& r : report.results()) {
    n += r.status() == "fail" || r.status() == "error" || r.grad_status() == "fail" ||
         r.grad_status() == "error";
  }
  return n;
}

std::vector<std::string> CheckSkips(const CheckReport& report) {
  std::vector<std::string> skipped;
  for (const CheckResult& r : report.results()) {
    if (r.status() == "unavailable" || r.status() == "unsupported") {
      skipped.push_back(absl::StrCat(r.backend(), " (", r.status(), ")"));
    } else if (r.grad_status() == "unsupported") {
      skipped.push_back(absl::StrCat(r.backend(), " (backward unsupported)"));
    }
  }
  return skipped;
}

}  // namespace attnkit
