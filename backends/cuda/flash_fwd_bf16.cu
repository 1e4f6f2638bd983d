// Flash-attention forward instances for bf16 tiles (head dims 32, 64, 128, 256), each
// with f32 P (EXACT) and with bf16 P on tensor cores (FAST).
#include "backends/cuda/flash_fwd_kernel.cuh"
#include "backends/cuda/flash_launch.h"

namespace attnkit {
namespace cuda {

cudaError_t LaunchFlashForwardBF16(const FlashParams& p, int bucket, cudaStream_t stream) {
  return flash::LaunchFlashBucket<ComputeKind::kBF16>(p, bucket, stream);
}

}  // namespace cuda
}  // namespace attnkit
