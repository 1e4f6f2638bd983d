// The text configuration (core/config.proto) to and from AttentionProblem.
// Kept apart from core/problem.h so that backends, and plugins built from
// them, link no protobuf.
#ifndef ATTNKIT_CORE_PROBLEM_CONFIG_H_
#define ATTNKIT_CORE_PROBLEM_CONFIG_H_

#include "absl/status/statusor.h"
#include "core/config.pb.h"
#include "core/problem.h"

namespace attnkit {

// Validates `config` and fills defaults (ValidateProblem's rules and errors).
absl::StatusOr<AttentionProblem> ProblemFromConfig(const AttentionConfig& config);
AttentionConfig ConfigFromProblem(const AttentionProblem& p);
// The config as reports show it: a memory_budget_bytes of 0 (unset) becomes
// the default it means, kDefaultMemoryBudgetBytes.
AttentionConfig ConfigForReport(AttentionConfig config);

}  // namespace attnkit

#endif  // ATTNKIT_CORE_PROBLEM_CONFIG_H_
