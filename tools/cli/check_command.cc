#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/builtin.h"
#include "core/compare.h"
#include "core/execute.h"
#include "core/problem_config.h"
#include "core/problem_data.h"
#include "core/reference.h"
#include "core/status_macros.h"
#include "tools/cli/commands.h"

namespace attnkit {

absl::Status CheckCommand(const BackendRegistry& registry, const CliOptions& options,
                          std::ostream& out) {
  ATTNKIT_ASSIGN_OR_RETURN(const AttentionConfig config, LoadCliConfig(options));
  ATTNKIT_ASSIGN_OR_RETURN(const AttentionProblem p, ProblemFromConfig(config));
  ATTNKIT_ASSIGN_OR_RETURN(const std::vector<Backend*> backends,
                           registry.FindAll(options.backends));
  ATTNKIT_ASSIGN_OR_RETURN(ProblemData data, ProblemData::Random(p, p.seed));
  out << "check " << p.Id() << (p.name.empty() ? "" : " (" + p.name + ")") << ", seed " << p.seed
      << "\n";
  const auto ref_start = std::chrono::steady_clock::now();
  const ReferenceResult ref = ComputeReference(p, data.args());
  const double ref_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - ref_start).count();
  out << absl::StrFormat("fp64 oracle computed in %.3f s\n\n", ref_seconds);
  // err/bound: the largest error as a fraction of the oracle's bound for
  // that element (1.0 = at the limit; see core/compare.h).
  out << absl::StrFormat("%-18s %-34s %-6s %12s %12s %12s %9s %10s\n", "backend", "kernel",
                         "result", "max abs err", "max rel err", "max bound", "err/bound",
                         "time ms");
  int failures = 0;
  std::vector<std::string> skipped;  // backends that did not run (an error if named)
  for (Backend* b : backends) {
    // "unavailable": the backend cannot run here at all (no GPU, bad plugin);
    // "unsupported": it works but refuses this problem.
    const absl::Status available = b->Available();
    const absl::Status supported = available.ok() ? b->Supports(p) : available;
    if (!supported.ok()) {
      const char* why = available.ok() ? "unsupported" : "unavailable";
      out << absl::StrFormat("%-18s %s: %s\n", b->Name(), why, supported.message());
      skipped.push_back(absl::StrCat(b->Name(), " (", why, ")"));
      continue;
    }
    PoisonOutputs(data);
    RunInfo info;
    const auto start = std::chrono::steady_clock::now();
    const absl::Status run = RunOnBackend(b, p, data, &info);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!run.ok()) {
      ++failures;
      out << absl::StrFormat("%-18s %-34s %-6s %s\n", b->Name(), info.kernel, "ERROR",
                             run.message());
      continue;
    }
    const Comparison c = CompareToReference(p, data.args(), ref);
    if (!c.ok()) ++failures;
    out << absl::StrFormat("%-18s %-34s %-6s %12.3e %12.3e %12.3e %9.3f %10.2f\n", b->Name(),
                           info.kernel, c.ok() ? "pass" : "FAIL", c.max_abs_err, c.max_rel_err,
                           c.max_bound, c.max_bound_fraction, ms);
    if (!c.ok()) out << "    first mismatch: " << c.first_failure << "\n";
  }
  if (failures > 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%d backend(s) disagree with the reference on %s", failures, p.Id()));
  }
  return RefuseNamedSkips(options, skipped, " on " + p.Id());
}

}  // namespace attnkit
