#include "backends/cuda/flash_backend.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "backends/cuda/bwd_plan.h"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/flash_bwd_launch.h"
#include "backends/cuda/flash_launch.h"
#include "backends/cuda/kernel_traits.h"
#include "backends/cuda/params.h"
#include "core/status_macros.h"

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

// One kernel launch, planned on the host: its parameters (split count
// included), the kernel and the split-K scratch it needs.
struct LaunchPlan {
  FlashParams params;
  int bucket = 0;
  bool decode = false;
  KernelConfig config;
  size_t partial_o_bytes = 0;  // split-K partial O, then partial LSE
  size_t workspace_bytes = 0;  // 0 without split-K
};

absl::StatusOr<LaunchPlan> PlanLaunch(const FlashParams& params, int num_sms,
                                      const std::string& backend) {
  LaunchPlan plan;
  plan.params = params;
  plan.bucket = HeadDimBucket(params.head_dim);
  plan.decode = UseDecodeKernel(params.rows_per_kv_head);
  plan.config = plan.decode ? DecodeConfig(plan.bucket) : FlashConfig(plan.bucket, params.compute);
  if (plan.config.head_dim == 0) {
    return absl::UnimplementedError(
        absl::StrFormat("head_dim %d is not compiled for %s; supported: 1..%d", params.head_dim,
                        backend, kMaxHeadDim));
  }
  const KernelConfig& config = plan.config;
  const int64_t tiles_m = (params.rows_per_kv_head + config.block_m - 1) / config.block_m;
  const int64_t key_tiles = (params.kv_len + config.block_n - 1) / config.block_n;
  const int64_t blocks = tiles_m * params.num_kv_heads * params.batch;
  plan.params.num_splits = plan.decode ? ChooseDecodeSplits(blocks, key_tiles, num_sms)
                                       : ChooseNumSplits(blocks, key_tiles, num_sms);
  if (plan.params.num_splits > 1) {
    // [splits, B, H, Tq, d] partial O and [splits, B, H, Tq] partial LSE.
    const size_t rows = static_cast<size_t>(plan.params.num_splits) * params.batch *
                        params.num_heads * params.q_len;
    plan.partial_o_bytes = rows * params.head_dim * sizeof(float);
    plan.workspace_bytes = plan.partial_o_bytes + rows * sizeof(float);
  }
  return plan;
}

// "flash-decode-f32 d128 rows8 w4 splits=4 kv=i8 paged=16": the kernel, its
// configuration and the K/V storage it read.
std::string KernelName(const LaunchPlan& plan) {
  const FlashParams& f = plan.params;
  const KernelConfig& c = plan.config;
  std::string name =
      plan.decode ? absl::StrFormat("flash-decode-f32 d%d rows%d w%d splits=%d", c.head_dim,
                                    c.block_m, c.num_warps, f.num_splits)
                  : absl::StrFormat("flash-%s d%d m%dn%dw%d splits=%d", ComputeName(f.compute),
                                    c.head_dim, c.block_m, c.block_n, c.num_warps, f.num_splits);
  if (f.kv_type == ElemType::kI8) name += " kv=i8";
  if (f.block_table != nullptr) name += absl::StrFormat(" paged=%d", f.page_size);
  return name;
}

// A ragged batch's launches in one line: "ragged seqs=3: 2x <kernel>; 1x
// <kernel>", kernels in order of first use.
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

class FlashBackend : public CudaBackendBase {
 public:
  explicit FlashBackend(std::string name) : name_(std::move(name)) {}

  std::string Name() const override { return name_; }
  std::string Description() const override {
    return "CUDA flash attention: tiled online softmax, tensor cores (WMMA) for f16/bf16; "
           "a decode kernel (rows = the query heads of one KV group) for Tq * group <= 16; "
           "split-K for small grids; head dims up to 256 (compiled 32/64/128/256, smaller "
           "padded); paged K/V through the block table, int8 K/V dequantized on load (f32 "
           "arithmetic), ragged batches as one launch per sequence; backward pass (f32 arithmetic, "
           "one block per key block, dQ partials summed in key-block order: deterministic)";
  }

  Capabilities Caps() const override {
    Capabilities c;
    c.dtypes = {DType::kF32, DType::kF16, DType::kBF16};
    c.kv_dtypes = {DType::kF32, DType::kF16, DType::kBF16, DType::kI8};
    c.min_head_dim = 1;
    c.max_head_dim = kMaxHeadDim;
    c.masks = {MaskKind::kNone, MaskKind::kCausal, MaskKind::kSlidingWindow};
    c.layouts = {Layout::kBHTD, Layout::kBTHD};
    c.lse = c.kv_lengths = c.blocked_mask = c.additive_bias = c.softcap = true;
    c.paged_kv = c.ragged = true;
    // No atomics: each block owns its rows, and split-K partials are combined
    // in split order (split_combine.cu); the split count depends only on the
    // shape and the GPU's SM count, so one GPU model gives the same bits.
    c.deterministic = true;
    // The backward pass (bwd_params.h): f32 arithmetic for every dtype, head
    // dims 1..256 (compiled 64/128/256, smaller padded), dQ partials per key
    // block summed in key-block order (no atomics: deterministic).
    BackwardCapabilities& bw = c.backward;
    bw.supported = true;
    bw.dtypes = bw.kv_dtypes = {DType::kF32, DType::kF16, DType::kBF16};
    bw.masks = {MaskKind::kNone, MaskKind::kCausal, MaskKind::kSlidingWindow};
    bw.kv_lengths = bw.blocked_mask = bw.additive_bias = bw.bias_grad = bw.softcap = true;
    bw.ragged = false;
    bw.deterministic = true;
    return c;
  }

 protected:
  absl::Status ForwardImpl(const AttentionProblem& p, const AttentionArgs& args,
                           RunInfo* info) override {
    // A dense batch is one launch; a ragged one, one per sequence with
    // queries, each a batch-1 problem over views of the packed tensors.
    ATTNKIT_ASSIGN_OR_RETURN(const std::vector<FlashLaunch> launches, MakeFlashLaunches(p, args));
    std::vector<LaunchPlan> plans;
    plans.reserve(launches.size());
    size_t workspace_bytes = 0;
    for (const FlashLaunch& launch : launches) {
      ATTNKIT_ASSIGN_OR_RETURN(LaunchPlan plan, PlanLaunch(launch.params, Device().num_sms, name_));
      workspace_bytes = std::max(workspace_bytes, plan.workspace_bytes);
      plans.push_back(std::move(plan));
    }

    absl::MutexLock lock(&mu_);
    ATTNKIT_ASSIGN_OR_RETURN(const cudaStream_t stream, Stream());
    // One scratch buffer, sized for the largest launch and taken before any
    // launch: the launches run in stream order, so each one's split-K
    // partials are merged before the next launch overwrites them.
    if (workspace_bytes > 0) {
      ATTNKIT_ASSIGN_OR_RETURN(void* ws, workspace_.Get(workspace_bytes));
      for (LaunchPlan& plan : plans) {
        if (plan.params.num_splits <= 1) continue;
        plan.params.partial_o = static_cast<float*>(ws);
        plan.params.partial_lse =
            reinterpret_cast<float*>(static_cast<char*>(ws) + plan.partial_o_bytes);
      }
    }
    for (const LaunchPlan& plan : plans) {
      const FlashParams& params = plan.params;
      cudaError_t e;
      if (plan.decode) {
        e = LaunchFlashDecode(params, plan.bucket, stream);
      } else if (params.compute == ComputeKind::kF16) {
        e = LaunchFlashForwardF16(params, plan.bucket, stream);
      } else if (params.compute == ComputeKind::kBF16) {
        e = LaunchFlashForwardBF16(params, plan.bucket, stream);
      } else {
        e = LaunchFlashForwardF32(params, plan.bucket, stream);
      }
      ATTNKIT_RETURN_IF_ERROR(
          CudaStatus(e, plan.decode ? "flash decode launch" : "flash forward launch"));
      if (params.num_splits > 1) {
        ATTNKIT_RETURN_IF_ERROR(CudaStatus(LaunchSplitCombine(params, stream), "split-K combine"));
      }
    }
    if (info != nullptr) {
      info->kernel = p.is_ragged() ? RaggedKernelName(plans) : KernelName(plans.front());
      info->workspace_allocations = workspace_.allocations();
    }
    return absl::OkStatus();
  }

  absl::Status BackwardImpl(const AttentionProblem& p, const AttentionArgs& args,
                            const GradArgs& grads, RunInfo* info) override {
    ATTNKIT_ASSIGN_OR_RETURN(BwdParams params, MakeBwdParams(p, args, grads));
    ATTNKIT_ASSIGN_OR_RETURN(const BwdPlan plan, PlanBackward(params, kBwdWorkspaceBudgetBytes));

    absl::MutexLock lock(&mu_);
    ATTNKIT_ASSIGN_OR_RETURN(const cudaStream_t stream, Stream());
    ATTNKIT_ASSIGN_OR_RETURN(void* ws, workspace_.Get(plan.workspace_bytes));
    ApplyBwdPlan(plan, ws, &params);
    ATTNKIT_RETURN_IF_ERROR(CudaStatus(LaunchBwdDot(params, stream), "backward D = rowsum(dO O)"));
    // Chunks in order on one stream: chunk c's dQ sum has read its partials
    // before chunk c + 1's main kernel overwrites them.
    for (int64_t chunk = 0; chunk < plan.num_chunks; ++chunk) {
      const ChunkSpan span = ChunkOf(plan, chunk);
      params.chunk_begin = span.begin;
      params.chunk_end = span.end;
      ATTNKIT_RETURN_IF_ERROR(
          CudaStatus(LaunchFlashBackward(params, plan.bucket, stream), "flash backward launch"));
      ATTNKIT_RETURN_IF_ERROR(
          CudaStatus(LaunchBwdDqSum(params, chunk == 0, chunk + 1 == plan.num_chunks, stream),
                     "backward dQ sum"));
    }
    if (info != nullptr) {
      info->kernel = BwdKernelName(plan);
      info->workspace_allocations = workspace_.allocations();
    }
    return absl::OkStatus();
  }

 private:
  const std::string name_;
  absl::Mutex mu_;
  Workspace workspace_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<Backend> MakeFlashBackend(const std::string& name) {
  return std::make_unique<FlashBackend>(name);
}

}  // namespace cuda
}  // namespace attnkit
