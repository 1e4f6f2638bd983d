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
#include "backends/cuda/flash_plan.h"
#include "backends/cuda/kernel_traits.h"
#include "backends/cuda/params.h"
#include "core/status_macros.h"

namespace attnkit {
namespace cuda {
namespace {

class FlashBackend : public CudaBackendBase {
 public:
  explicit FlashBackend(std::string name) : name_(std::move(name)) {}

  std::string Name() const override { return name_; }
  std::string Description() const override {
    return "CUDA flash attention: tiled online softmax, tensor cores (WMMA) for f16/bf16 Q.K "
           "(exact products, f32 sums); P.V with f32 P on CUDA cores under compute EXACT, with "
           "P rounded to V's 16-bit type on tensor cores under FAST (Q rounded to K's type); "
           "a decode kernel (rows = the query heads of one KV group) for Tq * group <= 16; "
           "split-K for small grids; head dims up to 256 (compiled 32/64/128/256, smaller "
           "padded; V's head dim may differ from Q's and K's); paged K/V through the block "
           "table, int8 and fp8 (e4m3, e5m2) K/V dequantized on load (f32 arithmetic), ragged "
           "batches as one launch per sequence; backward pass (f32 arithmetic, "
           "one block per key block, dQ partials summed in key-block order: deterministic; sinks "
           "(dsinks) and ALiBi too)";
  }

  Capabilities Caps() const override {
    Capabilities c;
    c.dtypes = {DType::kF32, DType::kF16, DType::kBF16};
    c.kv_dtypes = {DType::kF32, DType::kF16,    DType::kBF16,
                   DType::kI8,  DType::kF8E4M3, DType::kF8E5M2};
    c.min_head_dim = 1;
    c.max_head_dim = kMaxHeadDim;
    c.masks = {MaskKind::kNone, MaskKind::kCausal, MaskKind::kSlidingWindow};
    c.layouts = {Layout::kBHTD, Layout::kBTHD};
    c.lse = c.kv_lengths = c.blocked_mask = c.additive_bias = c.softcap = true;
    c.paged_kv = c.ragged = true;
    // Sinks folded into each finished row (the combine kernel's under
    // split-K), ALiBi added to each visible score (flash_params.h); in the
    // backward, the forward's lse carries the sink, BwdSinkGradKernel
    // writes dsinks, and PairGradOf adds the ALiBi term to each recomputed
    // score (bwd_params.h).
    c.sinks = c.alibi = true;
    // Ev != E (MLA): V rows and O have value_dim columns, and the head-dim
    // bucket covers the wider of the two (flash_plan.cc); forward only.
    c.value_head_dim = true;
    // FAST (params.h ComputeKindFor, FlashParams::round_q/round_p): 16-bit
    // K/V runs the tensor-core P.V with P in V's type and Q rounded to K's;
    // int8 K/V runs EXACT only (the kernels do not quantize Q).
    c.fast_kv_dtypes = {DType::kF16, DType::kBF16};
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
    bw.sinks = bw.alibi = true;
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
    // Split-K planning for the SMs of the device this call runs on.
    ATTNKIT_ASSIGN_OR_RETURN(const DeviceInfo* device, CurrentDevice());
    std::vector<LaunchPlan> plans;
    plans.reserve(launches.size());
    size_t workspace_bytes = 0;
    for (const FlashLaunch& launch : launches) {
      ATTNKIT_ASSIGN_OR_RETURN(LaunchPlan plan, PlanLaunch(launch.params, device->num_sms, name_));
      workspace_bytes = std::max(workspace_bytes, plan.workspace_bytes);
      plans.push_back(std::move(plan));
    }

    absl::MutexLock lock(&call_mu_);
    ATTNKIT_ASSIGN_OR_RETURN(const cudaStream_t stream, ScratchStream());
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

    absl::MutexLock lock(&call_mu_);
    ATTNKIT_ASSIGN_OR_RETURN(const cudaStream_t stream, ScratchStream());
    ATTNKIT_ASSIGN_OR_RETURN(void* ws, workspace_.Get(plan.workspace_bytes));
    ApplyBwdPlan(plan, ws, &params);
    ATTNKIT_RETURN_IF_ERROR(CudaStatus(LaunchBwdDot(params, stream), "backward D = rowsum(dO O)"));
    ATTNKIT_RETURN_IF_ERROR(CudaStatus(LaunchBwdSinkGrad(params, stream), "backward dsinks"));
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
  Workspace workspace_ ABSL_GUARDED_BY(call_mu_);
};

}  // namespace

std::unique_ptr<Backend> MakeFlashBackend(const std::string& name) {
  return std::make_unique<FlashBackend>(name);
}

}  // namespace cuda
}  // namespace attnkit
