// `attnkit check` as a library call (the CLI, the C API and Python's
// attnkit.check() share it): every selected backend on one problem's random
// inputs, compared with the fp64 reference by the oracle of oracle/compare.h.
#ifndef ATTNKIT_HARNESS_CHECK_H_
#define ATTNKIT_HARNESS_CHECK_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/config.pb.h"
#include "harness/records.pb.h"
#include "plugin/registry.h"

namespace attnkit {

// Runs `config` on `backends` (empty = every registered backend; an unknown
// name is NotFound) from the config's seed. Wrong answers are results
// ("fail"), not errors: the status fails only when the config is invalid or
// its inputs cannot be allocated.
absl::StatusOr<CheckReport> RunCheck(const BackendRegistry& registry, const AttentionConfig& config,
                                     const std::vector<std::string>& backends);

// The table `attnkit check` prints: one line per backend, err/bound beside
// pass/fail, and the first mismatch under a failure; within 120 columns
// unless `wide`.
std::string FormatCheckTable(const CheckReport& report, bool wide = false);

// Backends that failed ("fail" or "error").
int CountCheckFailures(const CheckReport& report);
// "name (unavailable)" / "name (unsupported)" for those that did not run.
std::vector<std::string> CheckSkips(const CheckReport& report);

}  // namespace attnkit

#endif  // ATTNKIT_HARNESS_CHECK_H_
