// How --backend=auto orders the backends: the tuning record that
// `attnkit tune` stored for this machine when there is one, otherwise the
// documented static order (DefaultAutoOrder in backends/builtin.h).
#ifndef ATTNKIT_BACKENDS_AUTO_SELECT_H_
#define ATTNKIT_BACKENDS_AUTO_SELECT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/tune_record.pb.h"
#include "core/problem.h"
#include "core/registry.h"

namespace attnkit {

// "decode" (q_len <= 16), "long_prefill" (q_len >= 1024) or "short_prefill".
std::string ShapeClass(const AttentionProblem& p);

// The tuning record's file for this CPU: CachePath("tune", ".textproto").
std::string TuneRecordPath();
absl::StatusOr<TuneRecord> LoadTuneRecord(const std::string& path);
absl::Status SaveTuneRecord(const std::string& path, const TuneRecord& record);

struct AutoOrder {
  std::vector<std::string> order;  // preferred first
  std::string source;              // where the order comes from, for the reason line
};
AutoOrder AutoOrderFor(const AttentionProblem& p);

// registry.Select with `name`, using AutoOrderFor(p) when name is "auto";
// the reason names the source of the order.
absl::StatusOr<Selection> SelectBackend(const BackendRegistry& registry, const std::string& name,
                                        const AttentionProblem& p);

}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_AUTO_SELECT_H_
