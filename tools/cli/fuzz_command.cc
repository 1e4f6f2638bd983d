#include <chrono>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "io/json_writer.h"
#include "tools/cli/commands.h"
#include "tools/diff_fuzz/diff_fuzz.h"
#include "tools/diff_fuzz/grad_fuzz.h"

namespace attnkit {

absl::Status FuzzCommand(const BackendRegistry& registry, const CliOptions& options,
                         std::ostream& out) {
  ATTNKIT_RETURN_IF_ERROR(CheckAllowSkipHasBackends(options));
  ATTNKIT_ASSIGN_OR_RETURN(const std::vector<Backend*> backends,
                           registry.FindAll(options.backends));
  if (options.count < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("--count (%d) must be >= 1", options.count));
  }
  ATTNKIT_ASSIGN_OR_RETURN(const std::optional<ComputeProto> mode,
                           ParseComputeFlag(options.compute));
  FuzzOptions fuzz;
  fuzz.count = options.count;
  fuzz.seed = options.seed;
  fuzz.repro_dir = options.repro_dir;
  fuzz.compute = !mode.has_value() ? FuzzCompute::kDrawn
                 : *mode == FAST   ? FuzzCompute::kFast
                                   : FuzzCompute::kExact;
  const auto start = std::chrono::steady_clock::now();
  const bool quiet = JsonToStdout(options);  // --json=-: the report alone
  const auto say = [&](const std::string& line) {
    if (quiet) return;
    out << line << "\n";
    out.flush();
  };
  // --grad: the backward pass of random dense problems instead.
  const FuzzReport report =
      options.grad ? FuzzBackendGradients(backends, fuzz, say) : FuzzBackends(backends, fuzz, say);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  JsonWriter w;
  w.BeginObject();
  WriteBuildInfo(w);
  w.Field("seed", static_cast<int64_t>(options.seed)).Field("count", options.count);
  w.Field("pass", options.grad ? "backward" : "forward");
  w.Field("compute", !mode.has_value() ? "drawn" : *mode == FAST ? "fast" : "exact");
  w.Key("backends").BeginArray();
  for (Backend* b : backends) w.String(b->Name());
  w.EndArray();
  w.Field("problems", report.problems).Field("fast_problems", report.fast_problems);
  w.Field("runs", report.runs);
  w.Field("unsupported", report.unsupported);
  w.Key("per_backend").BeginArray();
  for (const FuzzTally& t : report.per_backend) {
    w.BeginObject().Field("backend", t.backend).Field("runs", t.runs);
    w.Field("unsupported", t.unsupported).Field("mismatches", t.mismatches).EndObject();
  }
  w.EndArray();
  w.Key("unavailable").BeginArray();
  for (const std::string& u : report.unavailable) w.String(u);
  w.EndArray();
  w.Key("mismatches").BeginArray();
  for (const FuzzFinding& f : report.findings) {
    w.BeginObject().Field("backend", f.backend).Field("message", f.message);
    w.Field("config_path", f.config_path).Field("command", f.command).EndObject();
  }
  w.EndArray();
  w.Field("seconds", seconds);
  w.EndObject();
  ATTNKIT_RETURN_IF_ERROR(EmitJson(options, w.str(), out));
  if (!quiet) {
    for (const FuzzTally& t : report.per_backend) {
      out << absl::StrFormat("  %-16s %d runs, %d unsupported, %d mismatches\n", t.backend, t.runs,
                             t.unsupported, t.mismatches);
    }
    out << absl::StrFormat(
        "fuzz%s: %d problems (%d compute fast; seed %d), %d backend runs, %d unsupported, %d "
        "unavailable backends, %d mismatches, %.1f s\n",
        options.grad ? " --grad" : "", report.problems, report.fast_problems, options.seed,
        report.runs, report.unsupported, report.unavailable.size(), report.findings.size(),
        seconds);
  }
  if (!report.findings.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%d mismatch(es); first: %s", report.findings.size(), report.findings[0].command));
  }
  // As in `check`: a backend named in --backends that cannot run is an
  // error, and so is one that declined every problem it was given (both
  // unless --allow_skip).
  ATTNKIT_RETURN_IF_ERROR(RefuseNamedSkips(options, report.unavailable, ""));
  if (options.allow_skip) return absl::OkStatus();
  return RequireNamedBackendsRan(report, options.backends);
}

}  // namespace attnkit
