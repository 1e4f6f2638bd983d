#include "harness/tune.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/auto_select.h"
#include "core/status_macros.h"
#include "platform/machine_info.h"

namespace attnkit {
namespace {

AttentionProblem Problem(const std::string& name, int64_t heads, int64_t kv_heads, int64_t q_len,
                         int64_t kv_len, int64_t head_dim) {
  AttentionProblem p = BasicProblem(1, heads, kv_heads, q_len, kv_len, head_dim);
  p.name = name;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.seed = 17;
  return p;
}

}  // namespace

std::vector<AttentionProblem> TuneProblems() {
  AttentionProblem decode_bf16 =
      Problem("decode B1 H32/8 Tk2048 d128 bf16-kv", 32, 8, 1, 2048, 128);
  decode_bf16.kv_dtype = DType::kBF16;
  AttentionProblem decode_f16 = Problem("decode B1 H32/8 Tk2048 d128 f16-kv", 32, 8, 1, 2048, 128);
  decode_f16.kv_dtype = DType::kF16;
  return {Problem("decode B1 H32/8 Tk2048 d128", 32, 8, 1, 2048, 128), decode_bf16, decode_f16,
          Problem("short prefill B1 H16 T256 d64 causal", 16, 16, 256, 256, 64),
          Problem("long prefill B1 H16 T1024 d64 causal", 16, 16, 1024, 1024, 64)};
}

absl::StatusOr<TuneRecord> RunTune(const BackendRegistry& registry, const CompareOptions& options,
                                   const MachineFingerprint& machine, const MachineLimits& limits) {
  const std::vector<AttentionProblem> problems = TuneProblems();
  CompareOptions backends_only = options;
  backends_only.auto_row = false;  // tune decides what auto does; it does not time it
  // It ranks backends by their times alone: no read loop between calls.
  backends_only.paired_read = false;
  ATTNKIT_ASSIGN_OR_RETURN(const CompareReport report,
                           RunCompare(registry, problems, backends_only, machine, limits));
  TuneRecord record;
  record.set_cpu_model(machine.cpu_model());
  record.set_measured_at(report.created_at());
  record.set_threads(options.threads);
  for (int i = 0; i < report.problems_size(); ++i) {
    const ProblemResult& pr = report.problems(i);
    std::vector<const BackendResult*> passed;
    for (const BackendResult& r : pr.results()) {
      if (r.status() == "ok") passed.push_back(&r);
    }
    std::sort(passed.begin(), passed.end(), [](const BackendResult* a, const BackendResult* b) {
      return a->median_s() < b->median_s();
    });
    TuneEntry* e = record.add_entries();
    e->set_shape_class(ShapeClass(problems[i]));
    e->set_kv_dtype(std::string(DTypeName(problems[i].kv_dtype)));
    std::string detail = absl::StrCat(pr.name(), ":");
    for (const BackendResult* r : passed) {
      e->add_order(r->backend());
      absl::StrAppendFormat(&detail, " %s %.3f ms;", r->backend(), r->median_s() * 1e3);
    }
    e->set_detail(detail);
  }
  return record;
}

}  // namespace attnkit
