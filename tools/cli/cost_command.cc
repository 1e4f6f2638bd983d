// `attnkit cost`: the cost model of a config, as text or (--json) as data.
#include "absl/strings/str_format.h"
#include "core/problem_config.h"
#include "core/status_macros.h"
#include "io/json_writer.h"
#include "io/proto_json.h"
#include "ops/cost.h"
#include "tools/cli/commands.h"

namespace attnkit {
namespace {

std::string CostJson(const AttentionConfig& config, const AttentionProblem& p, const CostReport& c,
                     int64_t layers) {
  JsonWriter w;
  w.BeginObject();
  WriteBuildInfo(w);
  w.Field("id", p.Id());
  w.Key("config").Raw(ProtoToJson(ConfigForReport(config)));
  w.Field("flop_convention",
          "useful FLOPs = 2 * (head_dim + value_head_dim) * (query, key) pairs not blocked by the "
          "mask or padding (4 * head_dim when V has the same head dim)");
  w.Field("visible_pairs", c.visible_pairs).Field("total_pairs", c.total_pairs);
  w.Field("useful_flops", c.useful_flops).Field("dense_flops", c.dense_flops);
  w.Key("bytes").BeginObject();
  w.Field("q", c.bytes_q).Field("k", c.bytes_k).Field("v", c.bytes_v).Field("o", c.bytes_o);
  w.Field("extra", c.bytes_extra).Field("moved", c.bytes_moved);
  w.EndObject();
  w.Field("score_entries", c.score_entries);
  w.Field("kv_cache_bytes", c.kv_cache_bytes);
  w.Field("layers", layers).Field("kv_cache_bytes_all_layers", c.kv_cache_bytes * layers);
  w.Field("projection_params", c.projection_params);
  w.EndObject();
  return w.str();
}

}  // namespace

absl::Status CostCommand(const CliOptions& options, std::ostream& out) {
  ATTNKIT_ASSIGN_OR_RETURN(const AttentionConfig config, LoadCliConfig(options));
  ATTNKIT_ASSIGN_OR_RETURN(const AttentionProblem p, ProblemFromConfig(config));
  if (options.layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--layers (%d) must be >= 1", options.layers));
  }
  const CostReport c = ComputeCost(p);
  if (!JsonToStdout(options)) {
    out << FormatCost(p, c);
    if (options.layers > 1) {
      const int64_t bytes = c.kv_cache_bytes * options.layers;
      out << absl::StrFormat("kv cache, %d layers %d B (%.6g GiB)\n", options.layers, bytes,
                             double(bytes) / double(int64_t{1} << 30));
    }
  }
  return EmitJson(options, CostJson(config, p, c, options.layers), out);
}

}  // namespace attnkit
