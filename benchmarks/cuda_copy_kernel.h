// A device-to-device copy kernel for measuring HBM bandwidth.
#ifndef ATTNKIT_BENCHMARKS_CUDA_COPY_KERNEL_H_
#define ATTNKIT_BENCHMARKS_CUDA_COPY_KERNEL_H_

#include <cuda_runtime_api.h>

#include <cstddef>

namespace attnkit {
namespace bench {

// Copies `bytes` (a multiple of 16; both pointers 16-byte aligned) from src
// to dst in 16-byte vectors with a grid-stride loop.
cudaError_t LaunchCopy(const void* src, void* dst, size_t bytes, int num_sms, cudaStream_t stream);

}  // namespace bench
}  // namespace attnkit

#endif  // ATTNKIT_BENCHMARKS_CUDA_COPY_KERNEL_H_
