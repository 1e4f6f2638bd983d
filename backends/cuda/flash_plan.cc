#include "backends/cuda/flash_plan.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/cuda/params.h"

namespace attnkit {
namespace cuda {
namespace {

absl::string_view ComputeName(ComputeKind c) {
  switch (c) {
    case ComputeKind::kF16:
      return "wmma-f16";
    case ComputeKind::kBF16:
      return "wmma-bf16";
    default:
      return "simt-f32";
  }
}

}  // namespace

absl::StatusOr<LaunchPlan> PlanLaunch(const FlashParams& params, int num_sms,
                                      const std::string& backend) {
  LaunchPlan plan;
  plan.params = params;
  // One bucket for both head dims: Q and K rows, or V rows and O, shorter
  // than it are zero-padded in the tiles (Ev != E: value_dim).
  const int widest = std::max(params.head_dim, params.value_dim);
  plan.bucket = HeadDimBucket(widest);
  plan.decode = UseDecodeKernel(params.rows_per_kv_head);
  // The decode kernel computes in f32 throughout: P is never rounded there
  // (FAST permits it, never requires it); FAST's rounding of Q stays.
  if (plan.decode) plan.params.round_p = false;
  plan.config = plan.decode ? DecodeConfig(plan.bucket)
                            : FlashConfig(plan.bucket, params.compute, plan.params.round_p);
  if (plan.config.head_dim == 0) {
    return absl::UnimplementedError(
        params.value_dim == params.head_dim
            ? absl::StrFormat("head_dim %d is not compiled for %s; supported: 1..%d",
                              params.head_dim, backend, kMaxHeadDim)
            : absl::StrFormat("head_dim %d with value_head_dim %d is not compiled for %s; "
                              "supported: both in 1..%d",
                              params.head_dim, params.value_dim, backend, kMaxHeadDim));
  }
  const KernelConfig& config = plan.config;
  const int64_t tiles_m = (params.rows_per_kv_head + config.block_m - 1) / config.block_m;
  const int64_t key_tiles = (params.kv_len + config.block_n - 1) / config.block_n;
  const int64_t blocks = tiles_m * params.num_kv_heads * params.batch;
  plan.params.num_splits = plan.decode ? ChooseDecodeSplits(blocks, key_tiles, num_sms)
                                       : ChooseNumSplits(blocks, key_tiles, num_sms);
  if (plan.params.num_splits > 1) {
    // [splits, B, H, Tq, dv] partial O and [splits, B, H, Tq] partial LSE.
    const size_t rows = static_cast<size_t>(plan.params.num_splits) * params.batch *
                        params.num_heads * params.q_len;
    plan.partial_o_bytes = rows * params.value_dim * sizeof(float);
    plan.workspace_bytes = plan.partial_o_bytes + rows * sizeof(float);
  }
  return plan;
}

std::string KernelName(const LaunchPlan& plan) {
  const FlashParams& f = plan.params;
  const KernelConfig& c = plan.config;
  std::string name =
      plan.decode ? absl::StrFormat("flash-decode-f32 d%d rows%d w%d splits=%d %s", c.head_dim,
                                    c.block_m, c.num_warps, f.num_splits, ComputeTag(f))
                  : absl::StrFormat("flash-%s d%d m%dn%dw%d splits=%d %s", ComputeName(f.compute),
                                    c.head_dim, c.block_m, c.block_n, c.num_warps, f.num_splits,
                                    ComputeTag(f));
  if (IsScaledElem(f.kv_type)) name += absl::StrCat(" kv=", ElemTypeName(f.kv_type));
  if (f.value_dim != f.head_dim) name += absl::StrFormat(" dqk=%d dv=%d", f.head_dim, f.value_dim);
  if (f.block_table != nullptr) name += absl::StrFormat(" paged=%d", f.page_size);
  return name;
}

std::string RaggedKernelName(const std::vector<LaunchPlan>& plans) {
  std::vector<std::pair<std::string, int>> counts;
  for (const LaunchPlan& plan : plans) {
    const std::string name = KernelName(plan);
    auto it = std::find_if(counts.begin(), counts.end(),
                           [&](const std::pair<std::string, int>& c) { return c.first == name; });
    if (it == counts.end()) {
      counts.emplace_back(name, 1);
    } else {
      ++it->second;
    }
  }
  std::string out = absl::StrFormat("ragged seqs=%d", plans.size());
  for (size_t i = 0; i < counts.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? ": " : "; ", counts[i].second, "x ", counts[i].first);
  }
  return out;
}

}  // namespace cuda
}  // namespace attnkit
