#include "core/status_macros.h"
#include "ops/cost.h"
#include "tools/cli/commands.h"

namespace attnkit {

absl::Status CostCommand(const CliOptions& options, std::ostream& out) {
  ATTNKIT_ASSIGN_OR_RETURN(const AttentionConfig config, LoadCliConfig(options));
  ATTNKIT_ASSIGN_OR_RETURN(const AttentionProblem p, ProblemFromConfig(config));
  out << FormatCost(p, ComputeCost(p));
  return absl::OkStatus();
}

}  // namespace attnkit
