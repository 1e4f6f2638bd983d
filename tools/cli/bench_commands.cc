// peak, compare and tune: the commands that measure this machine.
#include <thread>

#include "absl/strings/str_format.h"
#include "backends/auto_select.h"
#include "benchmarks/compare.h"
#include "benchmarks/machine.h"
#include "benchmarks/report_svg.h"
#include "benchmarks/suite.h"
#include "benchmarks/tune.h"
#include "core/config_io.h"
#include "core/problem_config.h"
#include "core/status_macros.h"
#include "tools/cli/commands.h"

namespace attnkit {

int ThreadCount(const CliOptions& options) {
  if (options.threads > 0) return options.threads;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

absl::Status PeakCommand(const CliOptions& options, std::ostream& out) {
  const int threads = ThreadCount(options);
  std::string how;
  const MachineLimits l = LoadOrMeasureLimits(threads, options.refresh, &how);
  out << absl::StrFormat("machine limits, %s, %d threads (%s)\n", l.cpu_model(), threads, how);
  const MachineFingerprint machine = Fingerprint(threads);
  for (const std::string& target : machine.highway_targets()) {
    auto it = l.fma_gflops().find(target);
    if (it != l.fma_gflops().end()) {
      out << absl::StrFormat("  peak FMA %-8s %8.1f GFLOP/s\n", target, it->second);
    }
  }
  out << absl::StrFormat("  streaming read   %8.1f GB/s\n", l.read_gbps());
  out << absl::StrFormat("  OpenBLAS sgemm   %8.1f GFLOP/s (2048^3, %s kernel)\n", l.sgemm_gflops(),
                         l.openblas_core());
  return absl::OkStatus();
}

absl::Status CompareCommand(const BackendRegistry& registry, const CliOptions& options,
                            std::ostream& out, std::ostream& progress) {
  std::vector<AttentionProblem> problems;
  if (!options.config.empty()) {
    ATTNKIT_ASSIGN_OR_RETURN(const AttentionConfig config, LoadCliConfig(options));
    ATTNKIT_ASSIGN_OR_RETURN(AttentionProblem p, ProblemFromConfig(config));
    problems.push_back(std::move(p));
  } else {
    ATTNKIT_ASSIGN_OR_RETURN(problems,
                             LoadSuite(options.suite.empty() ? "standard" : options.suite));
  }
  CompareReport baseline;
  if (!options.baseline.empty()) {
    ATTNKIT_ASSIGN_OR_RETURN(const std::string json, ReadFile(options.baseline));
    ATTNKIT_ASSIGN_OR_RETURN(baseline, ReportFromJson(json, options.baseline));
  }
  CompareOptions compare;
  compare.backends = options.backends;
  compare.threads = ThreadCount(options);
  compare.progress = &progress;
  ATTNKIT_ASSIGN_OR_RETURN(CompareReport report, MeasureAndCompare(registry, problems, compare));
  if (!options.baseline.empty()) ApplyBaseline(baseline, &report);

  std::vector<std::pair<std::string, std::string>> files;
  if (!options.json.empty()) {
    ATTNKIT_ASSIGN_OR_RETURN(std::string json, ReportToJson(report));
    files.emplace_back(options.json, std::move(json));
  }
  if (!options.svg.empty()) files.emplace_back(options.svg, ReportToSvg(report));
  ATTNKIT_RETURN_IF_ERROR(WriteFilesAtomically(files));
  out << FormatCompareTable(report);
  for (const auto& file : files) out << "wrote " << file.first << "\n";

  int wrong = 0;
  for (const ProblemResult& p : report.problems()) {
    for (const BackendResult& r : p.results())
      wrong += r.status() == "wrong" || r.status() == "error";
  }
  if (wrong > 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%d measurement(s) failed the reference check or errored", wrong));
  }
  return absl::OkStatus();
}

absl::Status TuneCommand(const BackendRegistry& registry, const CliOptions& options,
                         std::ostream& out, std::ostream& progress) {
  const int threads = ThreadCount(options);
  std::string how;
  const MachineLimits limits = LoadOrMeasureLimits(threads, /*refresh=*/true, &how);
  CompareOptions compare;
  compare.backends = options.backends;
  compare.threads = threads;
  compare.progress = &progress;
  ATTNKIT_ASSIGN_OR_RETURN(const TuneRecord record,
                           RunTune(registry, compare, Fingerprint(threads), limits));
  const std::string path = TuneRecordPath(threads);
  ATTNKIT_RETURN_IF_ERROR(SaveTuneRecord(path, record));
  out << "shape classes (by q_len): " << ShapeClassBoundaries() << "\n";
  for (const TuneEntry& e : record.entries()) {
    out << absl::StrFormat("%-14s kv %-5s %s\n", e.shape_class(), e.kv_dtype(), e.detail());
  }
  out << "saved " << path << "; --backend=auto now uses it on this machine with " << threads
      << " threads\n";
  return absl::OkStatus();
}

}  // namespace attnkit
