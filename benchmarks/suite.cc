#include "benchmarks/suite.h"

#include "absl/strings/str_cat.h"
#include "core/config_io.h"
#include "core/problem_config.h"
#include "core/status_macros.h"

namespace attnkit {

absl::StatusOr<std::vector<AttentionProblem>> LoadSuite(const std::string& name) {
  if (name != "standard") {
    return absl::NotFoundError(absl::StrCat("suite '", name, "' is unknown; available: standard"));
  }
  std::vector<AttentionProblem> problems;
  for (const SuiteFile& f : EmbeddedStandardSuite()) {
    ATTNKIT_ASSIGN_OR_RETURN(const AttentionConfig config, ParseConfigText(f.text, f.name));
    auto problem = ProblemFromConfig(config);
    if (!problem.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(f.name, ": ", problem.status().message()));
    }
    problems.push_back(*std::move(problem));
  }
  return problems;
}

}  // namespace attnkit
