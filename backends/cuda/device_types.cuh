// Device-side element types and conversions shared by the CUDA kernels.
#ifndef ATTNKIT_BACKENDS_CUDA_DEVICE_TYPES_CUH_
#define ATTNKIT_BACKENDS_CUDA_DEVICE_TYPES_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/flash_params.h"
#include "backends/cuda/per_device.h"

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

// Element i of a storage buffer, as float (an int8 or fp8 one without its
// row's scale).
__device__ __forceinline__ float LoadElem(const void* p, ElemType t, int64_t i) {
  switch (t) {
    case ElemType::kF16:
      return __half2float(static_cast<const __half*>(p)[i]);
    case ElemType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case ElemType::kI8:
      return static_cast<float>(static_cast<const int8_t*>(p)[i]);
    case ElemType::kF8E4M3:
      return Fp8CodeValue(static_cast<const uint8_t*>(p)[i], /*e4m3=*/true);
    case ElemType::kF8E5M2:
      return Fp8CodeValue(static_cast<const uint8_t*>(p)[i], /*e4m3=*/false);
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

// x rounded to storage type t and widened back (to nearest even; beyond
// the type's range, +-Inf): FAST's rounding of a Q value to K's type
// (core/fast_compute.h RoundQueryValue). f32 and i8: x.
__device__ __forceinline__ float RoundToStorage(float x, ElemType t) {
  switch (t) {
    case ElemType::kF16:
      return __half2float(__float2half_rn(x));
    case ElemType::kBF16:
      return __bfloat162float(__float2bfloat16_rn(x));
    default:
      return x;
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

// Valid keys of batch entry b: p.kv_lengths[b] clamped to [0, kv_len], or
// kv_len without kv_lengths.
__device__ __forceinline__ int64_t KvLengthOf(const FlashParams& p, int64_t b) {
  if (p.kv_lengths == nullptr) return p.kv_len;
  const int64_t len = p.kv_lengths[b * p.kv_lengths_stride];
  return len < 0 ? 0 : (len < p.kv_len ? len : p.kv_len);
}

// A finished row's normaliser and log-sum-exp from its online-softmax state
// (max in log2 units, sum of exp2(s - max)): a row that saw no key gives
// zeros and lse = -inf; one that read a NaN or Inf gives NaN and NaN
// (inv = NaN turns every element NaN).
struct RowFinish {
  float inv;
  float lse;
};
__device__ __forceinline__ RowFinish FinishRow(float row_max_log2, float sum, bool bad) {
  constexpr float kLn2 = 0.6931471805599453f;
  if (bad) return RowFinish{NAN, NAN};
  if (!(sum > 0.0f)) return RowFinish{0.0f, -INFINITY};
  return RowFinish{1.0f / sum, (row_max_log2 + log2f(sum)) * kLn2};
}

// fin with the head's sink logit folded in (core/sinks.h FoldSink's rules,
// on the normalised row's multiplier and lse): no visible key gives 0 and
// an lse of the sink; a sink of -inf is none; a NaN or +inf sink, or a row
// already NaN, gives NaN.
__device__ __forceinline__ RowFinish WithSink(RowFinish fin, float sink) {
  if (isnan(fin.lse) || isnan(sink) || sink == INFINITY) return RowFinish{NAN, NAN};
  if (sink == -INFINITY) return fin;
  if (fin.lse == -INFINITY) return RowFinish{0.0f, sink};
  const float m = fmaxf(fin.lse, sink);
  const float keys = expf(fin.lse - m), total = keys + expf(sink - m);  // total in [1, 2]
  return RowFinish{fin.inv * (keys / total), m + logf(total)};
}

// Where row (b, h, i) of a block's result goes: O and LSE, or, with split-K,
// split `split`'s normalised partials for the combine kernel.
class RowOutput {
 public:
  __device__ RowOutput(const FlashParams& p, int split, int64_t b, int64_t h, int64_t i) : p_(p) {
    if (p.num_splits > 1) {
      index_ = ((split * int64_t{p.batch} + b) * p.num_heads + h) * p.q_len + i;
    } else {
      index_ = b * p.o_stride.b + h * p.o_stride.h + i * p.o_stride.t;
      lse_index_ = b * p.lse_stride_b + h * p.lse_stride_h + i * p.lse_stride_t;
    }
  }
  // Element c of the row.
  __device__ void Store(int c, float x) const {
    if (p_.num_splits > 1) {
      p_.partial_o[index_ * p_.value_dim + c] = x;
    } else {
      StoreElem(p_.o, p_.q_type, index_ + c * p_.o_stride.c, x);
    }
  }
  __device__ void StoreLse(float lse) const {
    if (p_.num_splits > 1) {
      p_.partial_lse[index_] = lse;
    } else if (p_.lse != nullptr) {
      p_.lse[lse_index_] = lse;
    }
  }

 private:
  const FlashParams& p_;
  int64_t index_ = 0;      // partial row, or O's element offset of the row
  int64_t lse_index_ = 0;  // LSE's element offset (no split)
};

// A kernel's dynamic shared-memory opt-in on the current device, once per
// device and kernel instance (`once` is the launcher's function-local
// static); the result is kept, so a failure is reported on every launch.
template <class Kernel>
cudaError_t OptInSharedMemory(PerDeviceOnce& once, Kernel* kernel, int bytes) {
  int device = 0;
  const cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  return static_cast<cudaError_t>(once.Get(device, [&] {
    return static_cast<int>(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  }));
}

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_DEVICE_TYPES_CUH_
