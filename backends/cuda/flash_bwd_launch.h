// Host entry points of the backward kernels (flash_bwd_*.cu). Each returns
// the launch's CUDA error; the caller turns it into a Status. Kernels run
// asynchronously on `stream`, in the order the backend queues them:
// LaunchBwdDot, then per chunk LaunchFlashBackward and LaunchBwdDqSum.
#ifndef ATTNKIT_BACKENDS_CUDA_FLASH_BWD_LAUNCH_H_
#define ATTNKIT_BACKENDS_CUDA_FLASH_BWD_LAUNCH_H_

#include <cuda_runtime_api.h>

#include "backends/cuda/bwd_params.h"

namespace attnkit {
namespace cuda {

// D = rowsum(dO * O) into p.dsum [B, H, Tq]; zeroes p.dbias when set (the
// main kernel then writes the pairs of the steps that run).
cudaError_t LaunchBwdDot(const BwdParams& p, cudaStream_t stream);

// dL/dsinks into p.dsinks from p.dsum and the forward's lse (after
// LaunchBwdDot); nothing without sinks or without p.dsinks.
cudaError_t LaunchBwdSinkGrad(const BwdParams& p, cudaStream_t stream);

// The main kernel for key blocks [p.chunk_begin, p.chunk_end) at head-dim
// `bucket` (BwdHeadDimBucket): dK, dV of those blocks and their dQ partials.
cudaError_t LaunchFlashBackward(const BwdParams& p, int bucket, cudaStream_t stream);
cudaError_t LaunchFlashBackwardD64(const BwdParams& p, cudaStream_t stream);
cudaError_t LaunchFlashBackwardD128(const BwdParams& p, cudaStream_t stream);
cudaError_t LaunchFlashBackwardD256(const BwdParams& p, cudaStream_t stream);

// Adds the current chunk's partials, in key-block order, to the running dQ
// sum (starting from 0 when `first`); when `last`, stores scale * sum into
// p.dq in its dtype, else keeps it in p.dq_acc.
cudaError_t LaunchBwdDqSum(const BwdParams& p, bool first, bool last, cudaStream_t stream);

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_FLASH_BWD_LAUNCH_H_
