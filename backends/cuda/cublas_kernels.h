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
  const uint8_t* v_bad = nullptr;  // [G, kv_len] of batch b (FlagNonFiniteRows)
};

// probs = softmax over visible keys of (softcap'd scale * scores + bias),
// for keys below the sequence's kv_length (the GEMMs stop there; the row
// stride of scores and probs stays kv_len). A row with no visible key gets
// zeros and lse = -inf. A bias of -inf blocks its pair. A row that reads a
// NaN or Inf (oracle/reference.h: a non-finite raw score or a NaN/+inf bias of
// a visible pair, or a visible key whose v_bad flag is set) gets NaN
// probabilities (so its output is NaN) and lse = NaN.

cudaError_t LaunchMaskedSoftmax(const SoftmaxParams& p, cudaStream_t stream);

// dst[h, t, c] (contiguous, dst_type) = src[h * s.h + t * s.t + c * s.c] for
// h < heads, t < tokens, c < d: one batch entry made GEMM-ready. With
// zero_rows ([heads, tokens]), rows whose flag is set become zeros.
cudaError_t LaunchConvert(const void* src, ElemType src_type, Strides4 s, int heads, int tokens,
                          int d, void* dst, ElemType dst_type, cudaStream_t stream,
                          const uint8_t* zero_rows = nullptr);

// For every batch entry b < batch and head h < heads: flags[(b * heads + h) *
// tokens + t] = 1 when row t < lengths_b holds a NaN or Inf, else 0 (rows at
// or past lengths_b, which nothing reads, are 0), and counts[b] = the number
// of flagged rows of b. lengths: [batch] int32 with stride lengths_stride,
// or null for `tokens` everywhere. counts must be zeroed first.
cudaError_t LaunchFlagNonFiniteRows(const void* src, ElemType type, Strides4 s, int batch,
                                    int heads, int tokens, int d, const int32_t* lengths,
                                    int64_t lengths_stride, uint8_t* flags, int* counts,
                                    cudaStream_t stream);

// The P.V operand of one batch entry when V is GEMM-ready as stored, chosen
// on the device so that the host never waits for the NaN/Inf scan: when
// *count > 0 (rows of this entry were flagged), its rows [heads, tokens, d]
// are copied into `copy` at the same element offsets (strides s) with the
// flagged rows (flags: [heads, tokens]) zeroed, and ptrs[g] = copy + g * s.h
// elements; else ptrs[g] = src + g * s.h. `copy` holds the entry's span
// ((heads - 1) s.h + (tokens - 1) s.t + (d - 1) s.c + 1 elements; strides
// >= 0).
cudaError_t LaunchGuardedOperand(const void* src, ElemType type, Strides4 s, int heads, int tokens,
                                 int d, const uint8_t* flags, const int* count, void* copy,
                                 const void** ptrs, cudaStream_t stream);

// ptrs[i] = base + i * stride_bytes for i < n: a batched GEMM's pointer array.
cudaError_t LaunchStridedPointers(void* base, int64_t stride_bytes, int n, void** ptrs,
                                  cudaStream_t stream);

// o[b, g * group + j, i0 + il, c] = acc[g, il, c] rounded to o_type.
cudaError_t LaunchStoreOutput(const float* acc, int num_kv_heads, int nq, int d, void* o,
                              ElemType o_type, Strides4 os, int b, int j, int i0, int group_size,
                              cudaStream_t stream);

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_CUBLAS_KERNELS_H_
