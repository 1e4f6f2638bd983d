#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/config_io.h"
#include "tools/cli/commands.h"
#include "tools/cli/default_config.h"

namespace attnkit {

absl::StatusOr<AttentionConfig> LoadCliConfig(const CliOptions& options) {
  if (options.config.empty()) return ParseConfigText(kDefaultConfigText, "<built-in default>");
  return LoadConfigFile(options.config);
}

absl::Status RefuseNamedSkips(const CliOptions& options, const std::vector<std::string>& skipped,
                              const std::string& where) {
  if (skipped.empty() || options.backends.empty() || options.allow_skip) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("--backends named ", absl::StrJoin(skipped, ", "), ", which did not run", where,
                   "; pass --allow_skip to accept that"));
}

}  // namespace attnkit
