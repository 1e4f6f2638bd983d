// Flash-attention forward instances for f32 tiles (head dims 32, 64, 128, 256).
#include "backends/cuda/flash_fwd_kernel.cuh"
#include "backends/cuda/flash_launch.h"

namespace attnkit {
namespace cuda {

cudaError_t LaunchFlashForwardF32(const FlashParams& p, int bucket, cudaStream_t stream) {
  return flash::LaunchFlashBucket<ComputeKind::kF32>(p, bucket, stream);
}

}  // namespace cuda
}  // namespace attnkit
