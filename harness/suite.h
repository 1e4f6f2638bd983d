// Benchmark problem suites: the standard one (harness/suite/standard/,
// embedded in the binary) or a single config file.
#ifndef ATTNKIT_HARNESS_SUITE_H_
#define ATTNKIT_HARNESS_SUITE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/config.pb.h"
#include "core/problem.h"

namespace attnkit {

struct SuiteFile {
  const char* name;
  const char* text;  // text-format AttentionConfig
};

const std::vector<SuiteFile>& EmbeddedStandardSuite();

// "standard" -> the embedded suite's configs (each a valid problem);
// NotFound for other names.
absl::StatusOr<std::vector<AttentionConfig>> LoadSuiteConfigs(const std::string& name);
// The same as problems.
absl::StatusOr<std::vector<AttentionProblem>> LoadSuite(const std::string& name);

}  // namespace attnkit

#endif  // ATTNKIT_HARNESS_SUITE_H_
