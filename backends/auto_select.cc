#include "backends/auto_select.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "backends/builtin.h"
#include "core/config_io.h"
#include "core/machine_info.h"
#include "core/status_macros.h"
#include "google/protobuf/text_format.h"

namespace attnkit {

std::string ShapeClass(const AttentionProblem& p) {
  if (p.q_len <= 16) return "decode";
  if (p.q_len >= 1024) return "long_prefill";
  return "short_prefill";
}

std::string TuneRecordPath() { return CachePath("tune", ".textproto"); }

absl::StatusOr<TuneRecord> LoadTuneRecord(const std::string& path) {
  ATTNKIT_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  TuneRecord record;
  if (!google::protobuf::TextFormat::ParseFromString(text, &record)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a TuneRecord text proto"));
  }
  return record;
}

absl::Status SaveTuneRecord(const std::string& path, const TuneRecord& record) {
  if (!EnsureCacheDir()) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", CacheDir()));
  }
  std::string text;
  google::protobuf::TextFormat::PrintToString(record, &text);
  return WriteFileAtomically(path, text);
}

AutoOrder AutoOrderFor(const AttentionProblem& p) {
  AutoOrder result;
  const std::string path = TuneRecordPath();
  const std::string shape_class = ShapeClass(p);
  auto record = LoadTuneRecord(path);
  if (record.ok() && record->cpu_model() == CpuModel()) {
    for (const TuneEntry& e : record->entries()) {
      if (e.shape_class() != shape_class) continue;
      result.order.assign(e.order().begin(), e.order().end());
      result.source = absl::StrCat("the tuning record ", path, " (", shape_class, ", measured ",
                                   record->measured_at(), ")");
    }
  }
  if (result.order.empty()) {
    result.source = absl::StrCat("the static order (no tuning record for ", shape_class, " at ",
                                 path, "; run `attnkit tune`)");
  }
  // Backends the record does not name follow in the static order.
  for (const std::string& name : DefaultAutoOrder()) {
    if (std::find(result.order.begin(), result.order.end(), name) == result.order.end()) {
      result.order.push_back(name);
    }
  }
  return result;
}

absl::StatusOr<Selection> SelectBackend(const BackendRegistry& registry, const std::string& name,
                                        const AttentionProblem& p) {
  if (!name.empty() && name != "auto") return registry.Select(name, p, {});
  const AutoOrder order = AutoOrderFor(p);
  ATTNKIT_ASSIGN_OR_RETURN(Selection s, registry.Select("auto", p, order.order));
  absl::StrAppend(&s.reason, "; order from ", order.source);
  return s;
}

}  // namespace attnkit
