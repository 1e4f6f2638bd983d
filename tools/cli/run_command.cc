// `attnkit run`: .npy tensors in, .npy tensors out (tools/cli/npy_problem.h).
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "backends/auto_select.h"
#include "core/problem_config.h"
#include "core/status_macros.h"
#include "harness/execute.h"
#include "io/config_io.h"
#include "io/json_writer.h"
#include "io/npy.h"
#include "io/proto_json.h"
#include "tools/cli/commands.h"
#include "tools/cli/npy_problem.h"

namespace attnkit {

absl::Status RunCommand(const BackendRegistry& registry, const CliOptions& options,
                        std::ostream& out) {
  if (options.out.empty()) return absl::InvalidArgumentError("--out is required");
  ATTNKIT_ASSIGN_OR_RETURN(NpyProblem loaded, LoadNpyProblem(options, !options.lse_out.empty()));
  const AttentionProblem& p = loaded.problem;
  ProblemData& data = loaded.data;
  if (options.threads > 0) {
    for (Backend* b : registry.All()) {
      if (b->UsesHostMemory()) ATTNKIT_RETURN_IF_ERROR(b->SetNumThreads(options.threads));
    }
  }
  ATTNKIT_ASSIGN_OR_RETURN(const Selection selection,
                           SelectBackend(registry, p.backend, p, options.threads));
  RunInfo info;
  ATTNKIT_RETURN_IF_ERROR(RunOnBackend(selection.backend, p, data, &info));

  std::vector<std::pair<std::string, std::string>> files;
  ATTNKIT_ASSIGN_OR_RETURN(std::string o_bytes,
                           SerializeNpy(FileOrderView(data.o.view(), p.layout)));
  files.emplace_back(options.out, std::move(o_bytes));
  if (p.return_lse && !options.lse_out.empty()) {
    ATTNKIT_ASSIGN_OR_RETURN(std::string lse_bytes, SerializeNpy(data.lse.view()));
    files.emplace_back(options.lse_out, std::move(lse_bytes));
  }
  ATTNKIT_RETURN_IF_ERROR(WriteFilesAtomically(files));
  JsonWriter w;
  w.BeginObject();
  WriteBuildInfo(w);
  w.Field("id", p.Id()).Field("name", p.name);
  w.Key("config").Raw(ProtoToJson(ConfigForReport(ConfigFromProblem(p))));
  w.Field("config_inferred", !loaded.inferred_config.empty());
  w.Field("backend", info.backend).Field("kernel", info.kernel).Field("reason", selection.reason);
  w.Key("wrote").BeginArray();
  for (const auto& file : files) w.String(file.first);
  w.EndArray();
  w.Key("notes").BeginArray();
  for (const std::string& note : loaded.notes) w.String(note);
  w.EndArray();
  w.EndObject();
  if (JsonToStdout(options)) return EmitJson(options, w.str(), out);
  if (!loaded.inferred_config.empty()) {
    out << "config inferred from the arrays"
        << (options.config_flags.empty() ? "" : ", then the --config.* flags")
        << " (pass --config to set it):\n  "
        << absl::StrReplaceAll(absl::StripSuffix(loaded.inferred_config, "\n"), {{"\n", "\n  "}})
        << "\n";
  }
  for (const std::string& note : loaded.notes) out << "note: " << note << "\n";
  out << "ran " << p.Id() << (p.name.empty() ? "" : " (" + p.name + ")") << " on " << info.backend
      << " [" << info.kernel << "]\n"
      << "why: " << selection.reason << "\n"
      << "wrote " << options.out << (options.lse_out.empty() ? "" : " and " + options.lse_out)
      << "\n";
  return EmitJson(options, w.str(), out);
}

}  // namespace attnkit
