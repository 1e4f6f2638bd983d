#include "backends/cuda/flash_backend.h"

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "backends/cuda/cuda_common.h"
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

class FlashBackend : public CudaBackendBase {
 public:
  explicit FlashBackend(std::string name) : name_(std::move(name)) {}

  std::string Name() const override { return name_; }
  std::string Description() const override {
    return "CUDA flash attention: tiled online softmax, tensor cores (WMMA) for f16/bf16; "
           "a decode kernel (rows = the query heads of one KV group) for Tq * group <= 16; "
           "split-K for small grids; head dims up to 256 (compiled 32/64/128/256, smaller "
           "padded)";
  }

  Capabilities Caps() const override {
    Capabilities c;
    c.dtypes = {DType::kF32, DType::kF16, DType::kBF16};
    c.kv_dtypes = {DType::kF32, DType::kF16, DType::kBF16};
    c.min_head_dim = 1;
    c.max_head_dim = kMaxHeadDim;
    c.masks = {MaskKind::kNone, MaskKind::kCausal, MaskKind::kSlidingWindow};
    c.layouts = {Layout::kBHTD, Layout::kBTHD};
    c.lse = c.kv_lengths = c.blocked_mask = c.additive_bias = c.softcap = true;
    // No atomics: each block owns its rows, and split-K partials are combined
    // in split order (split_combine.cu); the split count depends only on the
    // shape and the GPU's SM count, so one GPU model gives the same bits.
    c.deterministic = true;
    return c;
  }

 protected:
  absl::Status ForwardImpl(const AttentionProblem& p, const AttentionArgs& args,
                           RunInfo* info) override {
    ATTNKIT_ASSIGN_OR_RETURN(FlashParams params, MakeFlashParams(p, args));
    const int bucket = HeadDimBucket(params.head_dim);
    const bool decode = UseDecodeKernel(params.rows_per_kv_head);
    const KernelConfig config = decode ? DecodeConfig(bucket) : FlashConfig(bucket, params.compute);
    if (config.head_dim == 0) {
      return absl::UnimplementedError(absl::StrFormat(
          "head_dim %d is not compiled for %s; supported: 1..%d", p.head_dim, name_, kMaxHeadDim));
    }
    const int64_t tiles_m = (params.rows_per_kv_head + config.block_m - 1) / config.block_m;
    const int64_t key_tiles = (params.kv_len + config.block_n - 1) / config.block_n;
    const int64_t blocks = tiles_m * params.num_kv_heads * params.batch;
    params.num_splits = decode ? ChooseDecodeSplits(blocks, key_tiles, Device().num_sms)
                               : ChooseNumSplits(blocks, key_tiles, Device().num_sms);

    absl::MutexLock lock(&mu_);
    ATTNKIT_ASSIGN_OR_RETURN(const cudaStream_t stream, Stream());
    if (params.num_splits > 1) {
      const size_t rows = static_cast<size_t>(params.num_splits) * p.batch * p.num_heads * p.q_len;
      const size_t o_bytes = rows * p.head_dim * sizeof(float);
      ATTNKIT_ASSIGN_OR_RETURN(void* ws, workspace_.Get(o_bytes + rows * sizeof(float)));
      params.partial_o = static_cast<float*>(ws);
      params.partial_lse = reinterpret_cast<float*>(static_cast<char*>(ws) + o_bytes);
    }
    cudaError_t e;
    if (decode) {
      e = LaunchFlashDecode(params, bucket, stream);
    } else if (params.compute == ComputeKind::kF16) {
      e = LaunchFlashForwardF16(params, bucket, stream);
    } else if (params.compute == ComputeKind::kBF16) {
      e = LaunchFlashForwardBF16(params, bucket, stream);
    } else {
      e = LaunchFlashForwardF32(params, bucket, stream);
    }
    ATTNKIT_RETURN_IF_ERROR(CudaStatus(e, decode ? "flash decode launch" : "flash forward launch"));
    if (params.num_splits > 1) {
      ATTNKIT_RETURN_IF_ERROR(CudaStatus(LaunchSplitCombine(params, stream), "split-K combine"));
    }
    if (decode) {
      info->kernel = absl::StrFormat("flash-decode-f32 d%d rows%d w%d splits=%d", config.head_dim,
                                     config.block_m, config.num_warps, params.num_splits);
    } else {
      info->kernel = absl::StrFormat("flash-%s d%d m%dn%dw%d splits=%d",
                                     ComputeName(params.compute), config.head_dim, config.block_m,
                                     config.block_n, config.num_warps, params.num_splits);
    }
    info->workspace_allocations = workspace_.allocations();
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
