#include "core/config_io.h"
#include "tools/cli/commands.h"
#include "tools/cli/default_config.h"

namespace attnkit {

absl::StatusOr<AttentionConfig> LoadCliConfig(const CliOptions& options) {
  if (options.config.empty()) return ParseConfigText(kDefaultConfigText, "<built-in default>");
  return LoadConfigFile(options.config);
}

}  // namespace attnkit
