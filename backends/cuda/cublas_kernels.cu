#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/cublas_kernels.h"
#include "backends/cuda/device_types.cuh"
#include "core/mask.h"

namespace attnkit {
namespace cuda {
namespace {

constexpr int kSoftmaxThreads = 256;

// Block-wide reduction; `scratch` holds one float per warp.
template <bool kMax>
__device__ float BlockReduce(float x, float* scratch) {
  x = kMax ? WarpMax(x) : WarpSum(x);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < kSoftmaxThreads / 32 ? scratch[lane] : (kMax ? -INFINITY : 0.0f);
  return kMax ? WarpMax(x) : WarpSum(x);
}

// One block per (query row il, KV head g): three passes over the row.
__global__ void __launch_bounds__(kSoftmaxThreads) MaskedSoftmaxKernel(const SoftmaxParams p) {
  __shared__ float scratch[kSoftmaxThreads / 32];
  const int64_t il = blockIdx.x, g = blockIdx.y;
  const int64_t i = p.i0 + il;
  const int64_t h = g * p.group_size + p.j;
  const int64_t b = p.b;
  int64_t kv_length = p.kv_len;
  if (p.kv_lengths != nullptr) {
    const int64_t len = p.kv_lengths[b * p.kv_lengths_stride];
    kv_length = len < 0 ? 0 : (len < p.kv_len ? len : p.kv_len);
  }
  const KeyRange keys = VisibleKeys(p.mask, i, kv_length);
  float* s = p.scores + (g * p.nq + il) * p.kv_len;

  float row_max = -INFINITY;
  for (int64_t jj = threadIdx.x; jj < p.kv_len; jj += kSoftmaxThreads) {
    bool visible = jj >= keys.begin && jj < keys.end;
    if (visible && p.blocked_mask != nullptr) {
      const Strides4& ms = p.mask_stride;
      visible = p.blocked_mask[b * ms.b + h * ms.h + i * ms.t + jj * ms.c] == 0;
    }
    float x = -INFINITY;
    if (visible) {
      x = s[jj] * p.scale;
      if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
      if (p.bias != nullptr) {
        const Strides4& bs = p.bias_stride;
        x += p.bias[b * bs.b + h * bs.h + i * bs.t + jj * bs.c];
      }
    }
    s[jj] = x;
    row_max = fmaxf(row_max, x);
  }
  row_max = BlockReduce<true>(row_max, scratch);

  float sum = 0.0f;
  if (row_max != -INFINITY) {
    for (int64_t jj = threadIdx.x; jj < p.kv_len; jj += kSoftmaxThreads) {
      if (s[jj] != -INFINITY) sum += expf(s[jj] - row_max);
    }
  }
  sum = BlockReduce<false>(sum, scratch);

  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  const int64_t base = (g * p.nq + il) * p.kv_len;
  for (int64_t jj = threadIdx.x; jj < p.kv_len; jj += kSoftmaxThreads) {
    const float w = (sum > 0.0f && s[jj] != -INFINITY) ? expf(s[jj] - row_max) * inv : 0.0f;
    StoreElem(p.probs, p.probs_type, base + jj, w);
  }
  if (threadIdx.x == 0 && p.lse != nullptr) {
    p.lse[b * p.lse_stride_b + h * p.lse_stride_h + i * p.lse_stride_t] =
        sum > 0.0f ? row_max + logf(sum) : -INFINITY;
  }
}

__global__ void ConvertKernel(const void* src, ElemType src_type, Strides4 s, int heads, int tokens,
                              int d, void* dst, ElemType dst_type) {
  const int64_t n = int64_t{heads} * tokens * d;
  for (int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; idx < n;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = idx % d, t = (idx / d) % tokens, h = idx / (int64_t{d} * tokens);
    StoreElem(dst, dst_type, idx, LoadElem(src, src_type, h * s.h + t * s.t + c * s.c));
  }
}

__global__ void StoreOutputKernel(const float* acc, int num_kv_heads, int nq, int d, void* o,
                                  ElemType o_type, Strides4 os, int b, int j, int i0,
                                  int group_size) {
  const int64_t n = int64_t{num_kv_heads} * nq * d;
  for (int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; idx < n;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = idx % d, il = (idx / d) % nq, g = idx / (int64_t{d} * nq);
    const int64_t h = g * group_size + j;
    StoreElem(o, o_type, b * os.b + h * os.h + (i0 + il) * os.t + c * os.c, acc[idx]);
  }
}

unsigned GridFor(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

}  // namespace

cudaError_t LaunchMaskedSoftmax(const SoftmaxParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.nq), static_cast<unsigned>(p.num_kv_heads));
  MaskedSoftmaxKernel<<<grid, kSoftmaxThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchConvert(const void* src, ElemType src_type, Strides4 s, int heads, int tokens,
                          int d, void* dst, ElemType dst_type, cudaStream_t stream) {
  constexpr int kThreads = 256;
  ConvertKernel<<<GridFor(int64_t{heads} * tokens * d, kThreads), kThreads, 0, stream>>>(
      src, src_type, s, heads, tokens, d, dst, dst_type);
  return cudaGetLastError();
}

cudaError_t LaunchStoreOutput(const float* acc, int num_kv_heads, int nq, int d, void* o,
                              ElemType o_type, Strides4 os, int b, int j, int i0, int group_size,
                              cudaStream_t stream) {
  constexpr int kThreads = 256;
  StoreOutputKernel<<<GridFor(int64_t{num_kv_heads} * nq * d, kThreads), kThreads, 0, stream>>>(
      acc, num_kv_heads, nq, d, o, o_type, os, b, j, i0, group_size);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace attnkit
