// peak, compare and tune: the commands that measure this machine.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "backends/auto_select.h"
#include "core/problem_config.h"
#include "core/status_macros.h"
#include "harness/compare.h"
#include "harness/machine.h"
#include "harness/report_svg.h"
#include "harness/suite.h"
#include "harness/tune.h"
#include "io/config_io.h"
#include "io/json_writer.h"
#include "io/proto_json.h"
#include "platform/machine_info.h"
#include "tools/cli/commands.h"

namespace attnkit {

int ThreadCount(const CliOptions& options) { return ThreadsOrEveryCore(options.threads); }

absl::Status PeakCommand(const CliOptions& options, std::ostream& json_out) {
  std::ostringstream discard;  // --json=-: the report alone
  std::ostream& out = JsonToStdout(options) ? discard : json_out;
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
  if (l.peak_bf16_dot_gflops() > 0) {
    out << absl::StrFormat("  bf16 dot products %7.1f GFLOP/s (vdpbf16ps)\n",
                           l.peak_bf16_dot_gflops());
  }
  if (l.peak_amx_bf16_gflops() > 0) {
    out << absl::StrFormat("  bf16 AMX tiles    %7.1f GFLOP/s (tdpbf16ps)\n",
                           l.peak_amx_bf16_gflops());
  }
  out << absl::StrFormat(
      "  streaming read   %8.1f GB/s (median of %d passes, spread %.1f-%.1f, over %d MiB = "
      "%s)\n",
      l.read_gbps(), l.read_passes(), l.read_gbps_min(), l.read_gbps_max(),
      l.read_buffer_bytes() >> 20,
      l.llc_bytes() > 0
          ? absl::StrFormat("%.1fx the %d MiB last-level cache",
                            double(l.read_buffer_bytes()) / l.llc_bytes(), l.llc_bytes() >> 20)
          : std::string("no last-level cache size reported"));
  out << absl::StrFormat("  OpenBLAS sgemm   %8.1f GFLOP/s (2048^3, %s kernel)\n", l.sgemm_gflops(),
                         l.openblas_core());
  return EmitJson(options, MachineLimitsJson(machine, l, how), json_out);
}

namespace {

// A baseline measured on another CPU model or with another thread count.
absl::Status CheckBaselineMachine(const CompareReport& baseline, const MachineFingerprint& here,
                                  const std::string& path) {
  const MachineFingerprint& then = baseline.machine();
  if (then.cpu_model() != here.cpu_model() || then.threads() != here.threads()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "--baseline=%s was measured on %s with %d threads; this run is %s with %d threads, so "
        "no slowdown could be told from the difference in machines. Measure the baseline here "
        "(compare --json=F with the same --threads)",
        path, then.cpu_model(), then.threads(), here.cpu_model(), here.threads()));
  }
  return absl::OkStatus();
}

// Runs argv[0] (found on PATH) with argv, no shell; its exit status, or -1
// when it could not be started.
int RunProgram(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// F.png beside F.svg when rsvg-convert (librsvg2-bin) is installed, written
// whole or not at all; the line to print.
std::string WritePngTwin(const std::string& svg_path) {
  std::string png = svg_path;
  if (absl::EndsWith(png, ".svg")) png.resize(png.size() - 4);
  png += ".png";
  const std::string tmp = png + ".tmp.png";
  const int rc = RunProgram({"rsvg-convert", "-f", "png", "-o", tmp, svg_path});
  if (rc == -1) return "no PNG twin: rsvg-convert is not installed (Debian: librsvg2-bin)";
  if (rc != 0 || std::rename(tmp.c_str(), png.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::StrCat("no PNG twin: rsvg-convert failed on ", svg_path);
  }
  return absl::StrCat("wrote ", png);
}

}  // namespace

absl::Status CompareCommand(const BackendRegistry& registry, const CliOptions& options,
                            std::ostream& out, std::ostream& progress) {
  std::vector<AttentionProblem> problems;
  // --config.* flags alone name one problem: the built-in example with them.
  if (!options.config.empty() || !options.config_flags.empty()) {
    ATTNKIT_ASSIGN_OR_RETURN(const AttentionConfig config, LoadCliConfig(options));
    ATTNKIT_ASSIGN_OR_RETURN(AttentionProblem p, ProblemFromConfig(config));
    problems.push_back(std::move(p));
  } else {
    ATTNKIT_ASSIGN_OR_RETURN(problems,
                             LoadSuite(options.suite.empty() ? "standard" : options.suite));
    if (options.grad) {  // each problem's training-step twin, where it has one
      std::vector<AttentionProblem> twins;
      for (AttentionProblem p : problems) {
        const std::string id = p.Id();
        p.backward = p.return_lse = true;
        const absl::Status valid = ValidateProblem(p);
        if (valid.ok()) {
          twins.push_back(std::move(p));
        } else {
          progress << "--grad: " << id << " is left out: " << valid.message() << "\n";
        }
      }
      problems = std::move(twins);
    }
    // --compute: every suite problem in that mode. One that cannot be (a
    // training step under FAST with Q's dtype other than K/V's), or that
    // becomes another's twin (an EXACT problem and its FAST twin in the
    // suite), is left out and said so.
    ATTNKIT_ASSIGN_OR_RETURN(const std::optional<ComputeProto> mode,
                             ParseComputeFlag(options.compute));
    if (mode.has_value()) {
      std::vector<AttentionProblem> kept;
      std::map<std::string, std::string> kept_ids;  // id -> the name kept
      for (AttentionProblem p : problems) {
        const std::string id = p.Id();
        p.compute = mode == FAST ? ComputeMode::kFast : ComputeMode::kExact;
        const absl::Status valid = ValidateProblem(p);
        const auto twin = kept_ids.find(p.Id());
        if (!valid.ok()) {
          progress << "--compute=" << options.compute << ": " << id
                   << " is left out: " << valid.message() << "\n";
        } else if (twin != kept_ids.end()) {
          progress << "--compute=" << options.compute << ": " << p.name
                   << " is left out: it is now the same problem as " << twin->second << "\n";
        } else {
          kept_ids.emplace(p.Id(), p.name);
          kept.push_back(std::move(p));
        }
      }
      problems = std::move(kept);
    }
  }
  CompareReport baseline;
  if (!options.baseline.empty()) {
    ATTNKIT_ASSIGN_OR_RETURN(const std::string json, ReadFile(options.baseline));
    ATTNKIT_ASSIGN_OR_RETURN(baseline, ReportFromJson(json, options.baseline));
    // Before measuring anything: a baseline from another machine or thread
    // count says nothing about a regression here.
    ATTNKIT_RETURN_IF_ERROR(
        CheckBaselineMachine(baseline, Fingerprint(ThreadCount(options)), options.baseline));
  }
  CompareOptions compare;
  compare.backends = options.backends;
  compare.threads = ThreadCount(options);
  compare.progress = &progress;
  ATTNKIT_ASSIGN_OR_RETURN(CompareReport report, MeasureAndCompare(registry, problems, compare));
  if (!options.baseline.empty()) ApplyBaseline(baseline, &report);

  // Every file is written, or none.
  std::vector<std::pair<std::string, std::string>> files;
  ATTNKIT_ASSIGN_OR_RETURN(const std::string json, ReportToJson(report));
  if (!options.json.empty() && !JsonToStdout(options)) files.emplace_back(options.json, json);
  if (!options.svg.empty()) files.emplace_back(options.svg, ReportToSvg(report));
  if (!options.html.empty()) files.emplace_back(options.html, ReportToHtml(report));
  ATTNKIT_RETURN_IF_ERROR(WriteFilesAtomically(files));
  std::string png_note;
  if (!options.svg.empty()) png_note = WritePngTwin(options.svg);
  if (JsonToStdout(options)) {
    out << json;
  } else {
    out << FormatCompareTable(report, options.wide);
    for (const auto& file : files) out << "wrote " << file.first << "\n";
    if (!png_note.empty()) out << png_note << "\n";
  }

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
  if (!JsonToStdout(options)) {
    out << "shape classes (by q_len): " << ShapeClassBoundaries() << "\n";
    for (const TuneEntry& e : record.entries()) {
      out << absl::StrFormat("%-14s kv %-5s %s\n", e.shape_class(), e.kv_dtype(), e.detail());
    }
    out << "saved " << path << "; --backend=auto now uses it on this machine with " << threads
        << " threads\n";
  }
  JsonWriter w;
  w.BeginObject();
  WriteBuildInfo(w);
  w.Field("shape_classes", ShapeClassBoundaries()).Field("path", path);
  w.Key("record").Raw(ProtoToJson(record));
  w.EndObject();
  ATTNKIT_RETURN_IF_ERROR(EmitJson(options, w.str(), out));
  return absl::OkStatus();
}

}  // namespace attnkit
