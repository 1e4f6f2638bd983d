// Device-side element types and conversions shared by the CUDA kernels.
#ifndef ATTNKIT_BACKENDS_CUDA_DEVICE_TYPES_CUH_
#define ATTNKIT_BACKENDS_CUDA_DEVICE_TYPES_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/flash_params.h"

namespace attnkit {
namespace cuda {

// The C++ type of the tiles for a compute kind.
template <ComputeKind K>
struct ComputeTypeOf;
template <>
struct ComputeTypeOf<ComputeKind::kF32> {
  using Type = float;
};
template <>
struct ComputeTypeOf<ComputeKind::kF16> {
  using Type = __half;
};
template <>
struct ComputeTypeOf<ComputeKind::kBF16> {
  using Type = __nv_bfloat16;
};

// Element i of a float storage buffer, as float.
__device__ __forceinline__ float LoadElem(const void* p, ElemType t, int64_t i) {
  switch (t) {
    case ElemType::kF16:
      return __half2float(static_cast<const __half*>(p)[i]);
    case ElemType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

// Writes `x` to element i, rounding to nearest even.
__device__ __forceinline__ void StoreElem(void* p, ElemType t, int64_t i, float x) {
  switch (t) {
    case ElemType::kF16:
      static_cast<__half*>(p)[i] = __float2half_rn(x);
      break;
    case ElemType::kBF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(x);
      break;
    default:
      static_cast<float*>(p)[i] = x;
  }
}

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

__device__ __forceinline__ float WarpMax(float x) {
  for (int offset = 16; offset > 0; offset /= 2) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  }
  return x;
}

__device__ __forceinline__ float WarpSum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_DEVICE_TYPES_CUH_
