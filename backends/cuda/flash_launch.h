// Host entry points of the flash-attention kernels (defined in the .cu
// files). Each returns the launch's CUDA error; the caller turns it into a
// Status. Kernels run asynchronously on `stream`.
#ifndef ATTNKIT_BACKENDS_CUDA_FLASH_LAUNCH_H_
#define ATTNKIT_BACKENDS_CUDA_FLASH_LAUNCH_H_

#include <cuda_runtime_api.h>

#include "backends/cuda/flash_params.h"

namespace attnkit {
namespace cuda {

// The forward kernel for p.compute at head-dim `bucket` (HeadDimBucket).
// With p.num_splits > 1 it writes p.partial_o / p.partial_lse instead of O.
cudaError_t LaunchFlashForwardF32(const FlashParams& p, int bucket, cudaStream_t stream);
cudaError_t LaunchFlashForwardF16(const FlashParams& p, int bucket, cudaStream_t stream);
cudaError_t LaunchFlashForwardBF16(const FlashParams& p, int bucket, cudaStream_t stream);

// The decode kernel (decode_kernel.cu) for problems with UseDecodeKernel(
// p.rows_per_kv_head), at head-dim `bucket`; split-K as above.
cudaError_t LaunchFlashDecode(const FlashParams& p, int bucket, cudaStream_t stream);

// Merges the p.num_splits partial results into O (and LSE):
//   lse = log sum_s exp(lse_s);  o = sum_s exp(lse_s - lse) o_s.
cudaError_t LaunchSplitCombine(const FlashParams& p, cudaStream_t stream);

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_FLASH_LAUNCH_H_
