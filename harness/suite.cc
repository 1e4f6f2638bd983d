#include "harness/suite.h"

#include "absl/strings/str_cat.h"
#include "core/problem_config.h"
#include "core/status_macros.h"
#include "io/config_io.h"

namespace attnkit {

absl::StatusOr<std::vector<AttentionConfig>> LoadSuiteConfigs(const std::string& name) {
  if (name != "standard") {
    return absl::NotFoundError(absl::StrCat("suite '", name, "' is unknown; available: standard"));
  }
  std::vector<AttentionConfig> configs;
  for (const SuiteFile& f : EmbeddedStandardSuite()) {
    ATTNKIT_ASSIGN_OR_RETURN(AttentionConfig config, ParseConfigText(f.text, f.name));
    const absl::Status valid = ProblemFromConfig(config).status();
    if (!valid.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(f.name, ": ", valid.message()));
    }
    configs.push_back(std::move(config));
  }
  return configs;
}

absl::StatusOr<std::vector<AttentionProblem>> LoadSuite(const std::string& name) {
  ATTNKIT_ASSIGN_OR_RETURN(const std::vector<AttentionConfig> configs, LoadSuiteConfigs(name));
  std::vector<AttentionProblem> problems;
  for (const AttentionConfig& config : configs) {
    ATTNKIT_ASSIGN_OR_RETURN(AttentionProblem p, ProblemFromConfig(config));
    problems.push_back(std::move(p));
  }
  return problems;
}

}  // namespace attnkit
