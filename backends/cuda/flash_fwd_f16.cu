// Flash-attention forward instances for f16 tiles (head dims 32, 64, 128, 256), each
// with f32 P (EXACT) and with f16 P on tensor cores (FAST).
#include "backends/cuda/flash_fwd_kernel.cuh"
#include "backends/cuda/flash_launch.h"

namespace attnkit {
namespace cuda {

cudaError_t LaunchFlashForwardF16(const FlashParams& p, int bucket, cudaStream_t stream) {
  return flash::LaunchFlashBucket<ComputeKind::kF16>(p, bucket, stream);
}

}  // namespace cuda
}  // namespace attnkit
