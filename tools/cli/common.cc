#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "io/config_io.h"
#include "tools/cli/commands.h"
#include "tools/cli/config_flags.h"
#include "tools/cli/default_config.h"

namespace attnkit {

absl::StatusOr<AttentionConfig> LoadCliConfig(const CliOptions& options) {
  ATTNKIT_ASSIGN_OR_RETURN(AttentionConfig config,
                           options.config.empty()
                               ? ParseConfigText(kDefaultConfigText, "<built-in default>")
                               : LoadConfigFile(options.config));
  ATTNKIT_RETURN_IF_ERROR(ApplyConfigFlags(options.config_flags, "", &config));
  ATTNKIT_RETURN_IF_ERROR(ApplyComputeFlag(options, &config));
  if (options.grad) config.set_backward(true);
  return config;
}

absl::StatusOr<std::optional<ComputeProto>> ParseComputeFlag(const std::string& value) {
  if (value.empty()) return std::nullopt;
  const std::string mode = absl::AsciiStrToLower(value);
  if (mode == "exact") return EXACT;
  if (mode == "fast") return FAST;
  return absl::InvalidArgumentError(absl::StrCat(
      "--compute=", value,
      ": use exact (products of exactly widened storage values) or fast (Q may be rounded to "
      "K's storage type and P to V's; see config.proto compute)"));
}

absl::Status ApplyComputeFlag(const CliOptions& options, AttentionConfig* config) {
  ATTNKIT_ASSIGN_OR_RETURN(const std::optional<ComputeProto> mode,
                           ParseComputeFlag(options.compute));
  if (mode == FAST) {
    config->set_compute(FAST);
  } else if (mode == EXACT) {
    config->clear_compute();
  }
  return absl::OkStatus();
}

absl::Status EmitJson(const CliOptions& options, const std::string& json, std::ostream& out) {
  if (options.json.empty()) return absl::OkStatus();
  if (JsonToStdout(options)) {
    out << json;
    return absl::OkStatus();
  }
  ATTNKIT_RETURN_IF_ERROR(WriteFileAtomically(options.json, json));
  out << "wrote " << options.json << "\n";
  return absl::OkStatus();
}

absl::Status CheckAllowSkipHasBackends(const CliOptions& options) {
  if (!options.allow_skip || !options.backends.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "--allow_skip only applies to the backends --backends names (one that cannot run fails "
      "the command unless --allow_skip); without --backends every backend runs and one that "
      "cannot is reported, never an error: name the backends, or drop --allow_skip");
}

absl::Status RefuseNamedSkips(const CliOptions& options, const std::vector<std::string>& skipped,
                              const std::string& where) {
  if (skipped.empty() || options.backends.empty() || options.allow_skip) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("--backends named ", absl::StrJoin(skipped, ", "), ", which did not run", where,
                   "; pass --allow_skip to accept that"));
}

}  // namespace attnkit
