#include "absl/strings/str_format.h"
#include "core/problem_config.h"
#include "core/status_macros.h"
#include "ops/cost.h"
#include "tools/cli/commands.h"

namespace attnkit {

absl::Status CostCommand(const CliOptions& options, std::ostream& out) {
  ATTNKIT_ASSIGN_OR_RETURN(const AttentionConfig config, LoadCliConfig(options));
  ATTNKIT_ASSIGN_OR_RETURN(const AttentionProblem p, ProblemFromConfig(config));
  if (options.layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--layers (%d) must be >= 1", options.layers));
  }
  const CostReport c = ComputeCost(p);
  out << FormatCost(p, c);
  if (options.layers > 1) {
    const int64_t bytes = c.kv_cache_bytes * options.layers;
    out << absl::StrFormat("kv cache, %d layers %d B (%.6g GiB)\n", options.layers, bytes,
                           double(bytes) / double(int64_t{1} << 30));
  }
  return absl::OkStatus();
}

}  // namespace attnkit
