// `auto`, the library service every caller uses (run, check, the layer,
// generate, the C API and Python): per call, the backend order for the
// problem's shape class and K/V dtype from the tuning record `attnkit tune`
// stored for this CPU model and thread count, otherwise the documented
// static order (DefaultAutoOrder in backends/builtin.h).
//
// Shape classes, by queries per sequence (q_len):
//   decode         q_len <= 16     (token-by-token generation, speculative
//                                   drafts: bandwidth-bound over the cache)
//   short_prefill  16 < q_len < 1024
//   long_prefill   q_len >= 1024   (compute-bound)
#ifndef ATTNKIT_BACKENDS_AUTO_SELECT_H_
#define ATTNKIT_BACKENDS_AUTO_SELECT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/tune_record.pb.h"
#include "core/problem.h"
#include "plugin/registry.h"

namespace attnkit {

inline constexpr int64_t kDecodeMaxQLen = 16;
inline constexpr int64_t kLongPrefillMinQLen = 1024;

// "decode", "short_prefill" or "long_prefill" (the boundaries above).
std::string ShapeClass(const AttentionProblem& p);
// One line per class with its q_len range, for `attnkit tune` and help.
std::string ShapeClassBoundaries();

// The tuning record's file for this CPU and `threads` (0 = every core):
// CachePath("tune", "-t<threads>.textproto").
std::string TuneRecordPath(int threads = 0);
absl::StatusOr<TuneRecord> LoadTuneRecord(const std::string& path);
absl::Status SaveTuneRecord(const std::string& path, const TuneRecord& record);

struct AutoOrder {
  std::vector<std::string> order;  // preferred first
  std::string source;              // where the order comes from, for the reason line
};
// The order for p with `threads` worker threads (0 = every core). The
// record is read once per process and again only when its file changes
// (looked at no more than every 200 ms, or at once after SaveTuneRecord or
// InvalidateTuneRecordCache), so this is cheap enough to call per attention
// call (autoselect_bench: about a microsecond).
AutoOrder AutoOrderFor(const AttentionProblem& p, int threads = 0);
// The next AutoOrderFor reads the record file again (after writing it by
// other means than SaveTuneRecord).
void InvalidateTuneRecordCache();

// registry.Select with `name`, using AutoOrderFor(p, threads) when name is
// "auto" or empty; the reason names the shape class and the order's source.
// host_memory_only: auto passes over device backends (the C API's
// attnkit_run takes host tensors for auto); a name is taken as given.
// `check`: what the backend must pass (BackendRegistry::Select; default:
// support p's forward).
absl::StatusOr<Selection> SelectBackend(const BackendRegistry& registry, const std::string& name,
                                        const AttentionProblem& p, int threads = 0,
                                        bool host_memory_only = false,
                                        const SelectionCheck& check = SelectionCheck());

}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_AUTO_SELECT_H_
