// Compiles backward-inl.h once per Highway target and exports the dispatch
// table (the same scheme as sdpa.cc).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/highway/backward.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// clang-format on

#include "backends/highway/backward-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {

// The exported per-target entry (a function, not inline, for the table).
absl::Status FlashBackwardTarget(const FlashParams* p, const FlashGradParams* g, ThreadPool* pool,
                                 Workspace* ws, BackwardRunInfo* info) {
  return FlashBackward(*p, *g, pool, ws, info);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "absl/strings/str_format.h"
#include "backends/highway/backward.h"

namespace attnkit {

HWY_EXPORT(FlashBackwardTarget);

FlashGradParams MakeFlashGradParams(const GradArgs& g) {
  FlashGradParams f;
  f.d_o = g.d_o;
  f.dq = g.dq;
  f.dk = g.dk;
  f.dv = g.dv;
  if (!g.dbias.empty()) {
    f.dbias = static_cast<float*>(g.dbias.data);
    f.dbias_view = g.dbias;
  }
  return f;
}

std::string BackwardRunInfo::Describe() const {
  return absl::StrFormat("flash-bwd/%s qtile=%d kblock=%d mm%dx%d chunks=%d items=%d threads=%d",
                         hwy::TargetName(target), q_tile, key_block, tile_rows, tile_cols, chunks,
                         items, threads);
}

absl::Status FlashAttentionBackward(const FlashParams& p, const FlashGradParams& g, int64_t target,
                                    ThreadPool* pool, Workspace* ws, BackwardRunInfo* info) {
  if (target == 0) return HWY_DYNAMIC_DISPATCH(FlashBackwardTarget)(&p, &g, pool, ws, info);
  // The dispatch table indexed for `target` by a local ChosenTarget, so
  // forcing a target changes no global state (as FlashAttention does).
  hwy::ChosenTarget chosen;
  chosen.Update(target);
  return HWY_DISPATCH_TABLE(FlashBackwardTarget)[chosen.GetIndex()](&p, &g, pool, ws, info);
}

}  // namespace attnkit
#endif  // HWY_ONCE
