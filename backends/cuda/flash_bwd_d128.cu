// Backward main-kernel instance for head-dim bucket 128 (every dtype: f32 math).
#include "backends/cuda/flash_bwd_kernel.cuh"
#include "backends/cuda/flash_bwd_launch.h"

namespace attnkit {
namespace cuda {

cudaError_t LaunchFlashBackwardD128(const BwdParams& p, cudaStream_t stream) {
  return bwd::LaunchFlashBackwardBucket<128>(p, stream);
}

}  // namespace cuda
}  // namespace attnkit
