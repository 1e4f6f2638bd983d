// The element-wise kernels of the cuBLAS backend: masked softmax between
// the two GEMMs, type conversion of operands, and the output store.
#ifndef ATTNKIT_BACKENDS_CUDA_CUBLAS_KERNELS_H_
#define ATTNKIT_BACKENDS_CUDA_CUBLAS_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/flash_params.h"

namespace attnkit {
namespace cuda {

// One block of query rows [i0, i0 + nq) of batch b and query head j of every
// KV head's group: packed as [G, nq, ...] by the batched GEMMs.
struct SoftmaxParams {
  float* scores = nullptr;  // [G, nq, Tk] = q.k (unscaled); overwritten
  void* probs = nullptr;    // [G, nq, Tk] softmax, in probs_type
  ElemType probs_type = ElemType::kF32;
  int num_kv_heads = 1, nq = 1, kv_len = 1, group_size = 1;
  int b = 0, j = 0, i0 = 0;
  float scale = 1.0f, softcap = 0.0f;
  MaskParams mask;
  const int32_t* kv_lengths = nullptr;
  int64_t kv_lengths_stride = 0;
  const uint8_t* blocked_mask = nullptr;
  Strides4 mask_stride;
  const float* bias = nullptr;
  Strides4 bias_stride;
  float* lse = nullptr;  // written at [b, h, i] when not null
  int64_t lse_stride_b = 0, lse_stride_h = 0, lse_stride_t = 0;
};

// probs = softmax over visible keys of (softcap'd scale * scores + bias);
// a row with no visible key gets zeros and lse = -inf.
cudaError_t LaunchMaskedSoftmax(const SoftmaxParams& p, cudaStream_t stream);

// dst[h, t, c] (contiguous, dst_type) = src[h * s.h + t * s.t + c * s.c] for
// h < heads, t < tokens, c < d: one batch entry made GEMM-ready.
cudaError_t LaunchConvert(const void* src, ElemType src_type, Strides4 s, int heads, int tokens,
                          int d, void* dst, ElemType dst_type, cudaStream_t stream);

// o[b, g * group + j, i0 + il, c] = acc[g, il, c] rounded to o_type.
cudaError_t LaunchStoreOutput(const float* acc, int num_kv_heads, int nq, int d, void* o,
                              ElemType o_type, Strides4 os, int b, int j, int i0, int group_size,
                              cudaStream_t stream);

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_CUBLAS_KERNELS_H_
