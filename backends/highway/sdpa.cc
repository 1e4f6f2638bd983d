// Compiles sdpa-inl.h (and the per-target headers it includes) once per
// Highway target and exports the dispatch table.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/highway/sdpa.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// clang-format on

#include "backends/highway/sdpa-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {

// The exported per-target entry (a function, not inline, for the table).
absl::Status FlashForwardTarget(const FlashParams* p, size_t n, ThreadPool* pool, Workspace* ws,
                                FlashRunInfo* info) {
  return FlashForward(p, n, pool, ws, info);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <atomic>

#include "absl/strings/str_join.h"
#include "backends/highway/sdpa.h"
#include "platform/hwy_target_cap.h"

namespace attnkit {

HWY_EXPORT(FlashForwardTarget);

namespace {
std::atomic<int64_t> fp8_tiles_run_decoded{0};
std::atomic<int64_t> fp8_tiles_run_half{0};
}  // namespace

int64_t Fp8TilesRunDecoded() { return fp8_tiles_run_decoded.load(std::memory_order_relaxed); }
void CountFp8TileRunDecoded() { fp8_tiles_run_decoded.fetch_add(1, std::memory_order_relaxed); }
int64_t Fp8TilesRunHalf() { return fp8_tiles_run_half.load(std::memory_order_relaxed); }
void CountFp8TileRunHalf() { fp8_tiles_run_half.fetch_add(1, std::memory_order_relaxed); }

absl::Status FlashAttention(const FlashParams& p, int64_t target, ThreadPool* pool, Workspace* ws,
                            FlashRunInfo* info) {
  return FlashAttention(&p, 1, target, pool, ws, info);
}

absl::Status FlashAttention(const FlashParams* p, size_t n, int64_t target, ThreadPool* pool,
                            Workspace* ws, FlashRunInfo* info) {
  if (n == 0) return absl::OkStatus();
  if (target == 0) return HWY_DYNAMIC_DISPATCH(FlashForwardTarget)(p, n, pool, ws, info);
  // The same table HWY_DYNAMIC_DISPATCH uses, indexed for `target` by a local
  // ChosenTarget, so forcing a target changes no global state.
  hwy::ChosenTarget chosen;
  chosen.Update(target);
  return HWY_DISPATCH_TABLE(FlashForwardTarget)[chosen.GetIndex()](p, n, pool, ws, info);
}

std::vector<int64_t> AvailableFlashTargets() {
  return HighwayTargetList(SupportedHighwayTargets() & HWY_TARGETS);
}

absl::StatusOr<int64_t> ParseFlashTarget(const std::string& name) {
  const absl::StatusOr<int64_t> target = HighwayTargetByName(name);
  const std::vector<int64_t> available = AvailableFlashTargets();
  if (target.ok() && std::find(available.begin(), available.end(), *target) != available.end()) {
    return *target;
  }
  std::vector<std::string> names;
  for (int64_t t : available) names.push_back(hwy::TargetName(t));
  return absl::FailedPreconditionError(
      "Highway target '" + name +
      "' is not compiled or not supported by this CPU; available: " + absl::StrJoin(names, ", "));
}

}  // namespace attnkit
#endif  // HWY_ONCE
