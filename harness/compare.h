// The comparison harness behind `attnkit compare` and `attnkit tune`: every
// backend on the same input data in one process, each output checked against
// the fp64 reference before it is timed, figures scaled by the machine's
// limits measured in the same run.
#ifndef ATTNKIT_HARNESS_COMPARE_H_
#define ATTNKIT_HARNESS_COMPARE_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/problem.h"
#include "harness/records.pb.h"
#include "plugin/registry.h"

namespace attnkit {

// The name of the row that times `auto` (CompareOptions::auto_row).
inline constexpr char kAutoRowName[] = "auto";

struct CompareOptions {
  std::vector<std::string> backends;  // empty = every registered backend
  int threads = 1;
  // Timed runs continue until both minimums are met, or the budget is spent
  // (a backend slower than the budget is timed from one run).
  double min_seconds = 0.25;
  int min_runs = 3;
  int max_runs = 100;
  double budget_seconds = 2.0;
  int64_t check_rows = 256;          // reference rows checked per problem
  std::ostream* progress = nullptr;  // one line per measurement
  // Also time `auto` per problem: a row named "auto" whose detail says what
  // it chose, timed in alternation with direct calls of that backend so that
  // its `vs best` is the choice times the per-call selection overhead, not
  // the noise between two separate measurements.
  bool auto_row = true;
  // Memory-bound problems: after each timed call of a backend, one pass of a
  // read loop over the problem's bytes on as many threads (paired_read.h);
  // %limit is the backend's median GB/s over the loop's, from the same rounds.
  bool paired_read = true;
  // Short passes of the compute peaks before each problem and after the
  // last (AddPeakPass): the report's peaks are the maxima over the run, with
  // the lowest pass as their spread; a result over 100 % of its compute
  // limit has the peak re-measured (longer passes) before it is reported,
  // with a note if it still exceeds it. MeasureAndCompare turns it on.
  bool peak_passes = false;
};

// Runs every problem on every selected backend. Figures use `limits`.
absl::StatusOr<CompareReport> RunCompare(const BackendRegistry& registry,
                                         const std::vector<AttentionProblem>& problems,
                                         const CompareOptions& options,
                                         const MachineFingerprint& machine,
                                         const MachineLimits& limits);

// RunCompare on this machine: its limits measured first, in the same run as
// the figures they scale (the machine is shared and noisy; the measurement
// also refreshes the cache), and its fingerprint, for options.threads.
absl::StatusOr<CompareReport> MeasureAndCompare(const BackendRegistry& registry,
                                                const std::vector<AttentionProblem>& problems,
                                                const CompareOptions& options);

// Marks every result more than 10 % slower than the same (problem id,
// backend) in `baseline`, and records the baseline's median.
void ApplyBaseline(const CompareReport& baseline, CompareReport* report);

// The side-by-side table, one block per problem: within 120 columns
// (kernels and reasons shortened, min ms and GB/s left out), or `wide`:
// every column, nothing shortened.
std::string FormatCompareTable(const CompareReport& report, bool wide = false);

absl::StatusOr<std::string> ReportToJson(const CompareReport& report);
absl::StatusOr<CompareReport> ReportFromJson(const std::string& json, const std::string& source);

}  // namespace attnkit

#endif  // ATTNKIT_HARNESS_COMPARE_H_
