// `attnkit tune`: times the available backends on one representative problem
// per shape class and records them fastest first, for --backend=auto.
#ifndef ATTNKIT_HARNESS_TUNE_H_
#define ATTNKIT_HARNESS_TUNE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/tune_record.pb.h"
#include "harness/compare.h"

namespace attnkit {

// One problem per shape class (ShapeClass in backends/auto_select.h).
std::vector<AttentionProblem> TuneProblems();

// Measures with RunCompare and orders, per class, the backends that passed
// the reference check by median time.
absl::StatusOr<TuneRecord> RunTune(const BackendRegistry& registry, const CompareOptions& options,
                                   const MachineFingerprint& machine, const MachineLimits& limits);

}  // namespace attnkit

#endif  // ATTNKIT_HARNESS_TUNE_H_
