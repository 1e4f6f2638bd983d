// `attnkit inputs`: the random inputs `check` and `compare` use for a config
// (ProblemData::Random with the config's seed), written as .npy files, so
// another implementation can run the same problem and `attnkit verify` can
// check what it produced. Files hold each value as stored: float32, float16,
// and bf16 as float32 (NumPy has no bfloat16; the conversion is exact).
#include <filesystem>
#include <system_error>

#include "absl/strings/str_format.h"
#include "core/problem_config.h"
#include "core/status_macros.h"
#include "harness/problem_data.h"
#include "io/config_io.h"
#include "io/npy.h"
#include "tools/cli/commands.h"
#include "tools/cli/npy_problem.h"

namespace attnkit {
absl::Status InputsCommand(const CliOptions& options, std::ostream& out) {
  if (options.dir.empty()) {
    return absl::InvalidArgumentError("--dir is required: where q.npy, k.npy, ... go");
  }
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);  // like mkdir -p
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrFormat("--dir=%s cannot be created: %s", options.dir, ec.message()));
  }
  ATTNKIT_ASSIGN_OR_RETURN(const AttentionConfig config, LoadCliConfig(options));
  ATTNKIT_ASSIGN_OR_RETURN(const AttentionProblem p, ProblemFromConfig(config));
  ATTNKIT_RETURN_IF_ERROR(RequireDenseForNpy(p));
  ATTNKIT_ASSIGN_OR_RETURN(const ProblemData data, ProblemData::Random(p, p.seed));
  std::vector<std::pair<std::string, std::string>> files;
  auto add = [&](const std::string& name, absl::StatusOr<std::string> bytes) -> absl::Status {
    ATTNKIT_RETURN_IF_ERROR(bytes.status());
    files.emplace_back(absl::StrFormat("%s/%s.npy", options.dir, name), *std::move(bytes));
    return absl::OkStatus();
  };
  ATTNKIT_RETURN_IF_ERROR(add("q", SerializeNpy(FileOrderView(data.q.view(), p.layout))));
  ATTNKIT_RETURN_IF_ERROR(add("k", SerializeNpy(FileOrderView(data.k.view(), p.layout))));
  ATTNKIT_RETURN_IF_ERROR(add("v", SerializeNpy(FileOrderView(data.v.view(), p.layout))));
  if (p.has_kv_lengths())
    ATTNKIT_RETURN_IF_ERROR(add("kv_lengths", SerializeNpy(data.kv_lengths.view())));
  if (p.blocked_mask) ATTNKIT_RETURN_IF_ERROR(add("mask", SerializeNpy(data.blocked_mask.view())));
  if (p.additive_bias) ATTNKIT_RETURN_IF_ERROR(add("bias", SerializeNpy(data.bias.view())));
  if (p.sinks) ATTNKIT_RETURN_IF_ERROR(add("sinks", SerializeNpy(data.sinks.view())));
  if (p.alibi) {
    ATTNKIT_RETURN_IF_ERROR(add("alibi_slopes", SerializeNpy(data.alibi_slopes.view())));
  }
  ATTNKIT_RETURN_IF_ERROR(WriteFilesAtomically(files));
  out << "wrote the inputs of " << p.Id() << " (seed " << p.seed << ") to " << options.dir << ":";
  for (const auto& f : files) out << " " << f.first.substr(options.dir.size() + 1);
  out << "\n";
  return absl::OkStatus();
}

}  // namespace attnkit
