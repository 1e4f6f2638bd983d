#include <cuda_runtime.h>

#include <algorithm>
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
  const uint8_t* v_bad = p.v_bad + g * p.kv_len;

  // Keys at or past kv_length are outside the GEMMs: never read or written.
  float row_max = -INFINITY;
  bool bad = false;
  for (int64_t jj = threadIdx.x; jj < kv_length; jj += kSoftmaxThreads) {
    bool visible = jj >= keys.begin && jj < keys.end;
    if (visible && p.blocked_mask != nullptr) {
      const Strides4& ms = p.mask_stride;
      visible = p.blocked_mask[b * ms.b + h * ms.h + i * ms.t + jj * ms.c] == 0;
    }
    float bias = 0.0f;
    if (visible && p.bias != nullptr) {
      const Strides4& bs = p.bias_stride;
      bias = p.bias[b * bs.b + h * bs.h + i * bs.t + jj * bs.c];
      visible = bias != -INFINITY;  // -inf blocks the pair
    }
    float x = -INFINITY;
    if (visible) {
      x = s[jj] * p.scale;
      bad = bad || !isfinite(x) || !(bias < INFINITY) || v_bad[jj] != 0;
      if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
      x += bias;
    }
    s[jj] = x;
    row_max = fmaxf(row_max, x);
  }
  bad = __syncthreads_or(bad) != 0;
  row_max = BlockReduce<true>(row_max, scratch);

  float sum = 0.0f;
  if (row_max != -INFINITY) {
    for (int64_t jj = threadIdx.x; jj < kv_length; jj += kSoftmaxThreads) {
      if (s[jj] != -INFINITY) sum += expf(s[jj] - row_max);
    }
  }
  sum = BlockReduce<false>(sum, scratch);

  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  const int64_t base = (g * p.nq + il) * p.kv_len;
  for (int64_t jj = threadIdx.x; jj < kv_length; jj += kSoftmaxThreads) {
    float w = (sum > 0.0f && s[jj] != -INFINITY) ? expf(s[jj] - row_max) * inv : 0.0f;
    if (bad) w = NAN;  // the row's output becomes NaN through O = PV
    StoreElem(p.probs, p.probs_type, base + jj, w);
  }
  if (threadIdx.x == 0 && p.lse != nullptr) {
    p.lse[b * p.lse_stride_b + h * p.lse_stride_h + i * p.lse_stride_t] =
        bad ? NAN : (sum > 0.0f ? row_max + logf(sum) : -INFINITY);
  }
}

__global__ void ConvertKernel(const void* src, ElemType src_type, Strides4 s, int heads, int tokens,
                              int d, void* dst, ElemType dst_type, const uint8_t* zero_rows) {
  const int64_t n = int64_t{heads} * tokens * d;
  for (int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; idx < n;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = idx % d, t = (idx / d) % tokens, h = idx / (int64_t{d} * tokens);
    const bool zero = zero_rows != nullptr && zero_rows[h * tokens + t] != 0;
    StoreElem(dst, dst_type, idx,
              zero ? 0.0f : LoadElem(src, src_type, h * s.h + t * s.t + c * s.c));
  }
}

// One warp per row (b, h, t): flags a row below its sequence length that
// holds a NaN or Inf and counts it for b.
__global__ void FlagNonFiniteRowsKernel(const void* src, ElemType type, Strides4 s, int batch,
                                        int heads, int tokens, int d, const int32_t* lengths,
                                        int64_t lengths_stride, uint8_t* flags, int* counts) {
  const int warps = blockDim.x / 32, lane = threadIdx.x % 32;
  const int64_t rows = int64_t{batch} * heads * tokens;
  for (int64_t row = int64_t{blockIdx.x} * warps + threadIdx.x / 32; row < rows;
       row += int64_t{gridDim.x} * warps) {
    const int64_t t = row % tokens, h = (row / tokens) % heads, b = row / (int64_t{tokens} * heads);
    int64_t length = tokens;
    if (lengths != nullptr) {
      const int64_t len = lengths[b * lengths_stride];
      length = len < 0 ? 0 : (len < tokens ? len : tokens);
    }
    bool bad = false;
    if (t < length) {
      for (int c = lane; c < d; c += 32) {
        bad = bad || !isfinite(LoadElem(src, type, b * s.b + h * s.h + t * s.t + c * s.c));
      }
    }
    bad = __any_sync(0xffffffffu, bad);
    if (lane == 0) {
      flags[row] = bad ? 1 : 0;
      if (bad) atomicAdd(counts + b, 1);
    }
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

__global__ void GuardedOperandKernel(const void* src, ElemType type, Strides4 s, int heads,
                                     int tokens, int d, const uint8_t* flags, const int* count,
                                     void* copy, const void** ptrs) {
  const bool guarded = *count > 0;
  const int64_t esize = type == ElemType::kF32 ? 4 : (type == ElemType::kI8 ? 1 : 2);
  const char* base = static_cast<const char*>(guarded ? copy : src);
  if (blockIdx.x == 0) {
    for (int g = threadIdx.x; g < heads; g += blockDim.x) ptrs[g] = base + g * s.h * esize;
  }
  if (!guarded) return;
  const int64_t n = int64_t{heads} * tokens * d;
  for (int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; idx < n;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = idx % d, t = (idx / d) % tokens, h = idx / (int64_t{d} * tokens);
    const int64_t off = h * s.h + t * s.t + c * s.c;
    StoreElem(copy, type, off, flags[h * tokens + t] != 0 ? 0.0f : LoadElem(src, type, off));
  }
}

__global__ void StridedPointersKernel(char* base, int64_t stride_bytes, int n, void** ptrs) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    ptrs[i] = base + i * stride_bytes;
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
                          int d, void* dst, ElemType dst_type, cudaStream_t stream,
                          const uint8_t* zero_rows) {
  constexpr int kThreads = 256;
  ConvertKernel<<<GridFor(int64_t{heads} * tokens * d, kThreads), kThreads, 0, stream>>>(
      src, src_type, s, heads, tokens, d, dst, dst_type, zero_rows);
  return cudaGetLastError();
}

cudaError_t LaunchFlagNonFiniteRows(const void* src, ElemType type, Strides4 s, int batch,
                                    int heads, int tokens, int d, const int32_t* lengths,
                                    int64_t lengths_stride, uint8_t* flags, int* counts,
                                    cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t rows = int64_t{batch} * heads * tokens;
  FlagNonFiniteRowsKernel<<<GridFor(rows, kThreads / 32), kThreads, 0, stream>>>(
      src, type, s, batch, heads, tokens, d, lengths, lengths_stride, flags, counts);
  return cudaGetLastError();
}

cudaError_t LaunchGuardedOperand(const void* src, ElemType type, Strides4 s, int heads, int tokens,
                                 int d, const uint8_t* flags, const int* count, void* copy,
                                 const void** ptrs, cudaStream_t stream) {
  constexpr int kThreads = 256;
  // A grid-stride copy over at most 1024 blocks: without flagged rows every
  // block returns at once, which costs a few microseconds per batch entry.
  const unsigned grid = std::min(GridFor(int64_t{heads} * tokens * d, kThreads), 1024u);
  GuardedOperandKernel<<<grid, kThreads, 0, stream>>>(src, type, s, heads, tokens, d, flags, count,
                                                      copy, ptrs);
  return cudaGetLastError();
}

cudaError_t LaunchStridedPointers(void* base, int64_t stride_bytes, int n, void** ptrs,
                                  cudaStream_t stream) {
  constexpr int kThreads = 128;
  StridedPointersKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(static_cast<char*>(base),
                                                                       stride_bytes, n, ptrs);
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
