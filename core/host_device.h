// ATTNKIT_HOST_DEVICE marks the core functions the CUDA kernels call too
// (core/mask.h, core/alibi.h, core/fp8.h): __host__ __device__ under nvcc,
// nothing for the host compilers.
#ifndef ATTNKIT_CORE_HOST_DEVICE_H_
#define ATTNKIT_CORE_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define ATTNKIT_HOST_DEVICE __host__ __device__
#else
#define ATTNKIT_HOST_DEVICE
#endif

#endif  // ATTNKIT_CORE_HOST_DEVICE_H_
