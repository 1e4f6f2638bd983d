#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "harness/check.h"
#include "io/config_io.h"
#include "io/proto_json.h"
#include "tools/cli/commands.h"

namespace attnkit {

absl::Status CheckCommand(const BackendRegistry& registry, const CliOptions& options,
                          std::ostream& out) {
  ATTNKIT_RETURN_IF_ERROR(CheckAllowSkipHasBackends(options));
  ATTNKIT_ASSIGN_OR_RETURN(const AttentionConfig config, LoadCliConfig(options));
  ATTNKIT_ASSIGN_OR_RETURN(const CheckReport report, RunCheck(registry, config, options.backends));
  if (!JsonToStdout(options)) out << FormatCheckTable(report, options.wide);
  ATTNKIT_RETURN_IF_ERROR(EmitJson(options, ProtoToJson(report), out));
  const int failures = CountCheckFailures(report);
  if (failures > 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%d backend(s) disagree with the reference on %s", failures, report.id()));
  }
  return RefuseNamedSkips(options, CheckSkips(report), " on " + report.id());
}

}  // namespace attnkit
