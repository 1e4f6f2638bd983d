// The backward pass's small kernels: D = rowsum(dO * O) (with dBias zeroed)
// and the sinks' gradient before the main kernel, the dQ sum of the partials after each chunk, and
// the main kernel's dispatch over head-dim buckets.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/bwd_params.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/flash_bwd_launch.h"
#include "backends/cuda/flash_params.h"

namespace attnkit {
namespace cuda {
namespace {

constexpr int64_t kMaxGridBlocks = 1 << 20;  // grid-stride loops cover the rest

__device__ __forceinline__ int64_t Off(const Strides4& s, int64_t b, int64_t h, int64_t t,
                                       int64_t c) {
  return b * s.b + h * s.h + t * s.t + c * s.c;
}

// One warp per query row (b, h, i), row = (b * H + h) * Tq + i: D = dO . O
// in f32 (lanes over columns, then a shuffle tree: a fixed order), and the
// row of dBias zeroed.
__global__ void __launch_bounds__(kBwdThreads) BwdDotKernel(const BwdParams p) {
  const FlashParams& f = p.fwd;
  const int64_t rows = int64_t{f.batch} * f.num_heads * f.q_len;
  const int lane = threadIdx.x % 32;
  const int64_t stride = int64_t{gridDim.x} * kBwdWarps;
  for (int64_t row = int64_t{blockIdx.x} * kBwdWarps + threadIdx.x / 32; row < rows;
       row += stride) {
    const int64_t i = row % f.q_len, bh = row / f.q_len;
    const int64_t h = bh % f.num_heads, b = bh / f.num_heads;
    float acc = 0.0f;
    for (int c = lane; c < f.head_dim; c += 32) {
      const float o = LoadElem(f.o, f.q_type, Off(f.o_stride, b, h, i, c));
      const float d_o = LoadElem(p.d_o, f.q_type, Off(p.do_stride, b, h, i, c));
      acc = fmaf(o, d_o, acc);
    }
    acc = WarpSum(acc);
    if (lane == 0) p.dsum[row] = acc;
    if (p.dbias != nullptr) {
      for (int64_t j = lane; j < f.kv_len; j += 32) p.dbias[Off(p.dbias_stride, b, h, i, j)] = 0.0f;
    }
  }
}

// One warp per query row (b, h, i): lanes own columns lane + 32u. The row's
// packed tile is fixed, so the warp asks BwdStepVisible once per key block
// and adds exactly the partials the main kernel wrote, in key-block order.
__global__ void __launch_bounds__(kBwdThreads)
    BwdDqSumKernel(const BwdParams p, bool first, bool last) {
  constexpr int kCols = kBwdMaxHeadDim / 32;
  const FlashParams& f = p.fwd;
  const int64_t rows = int64_t{f.batch} * f.num_heads * f.q_len;
  const int lane = threadIdx.x % 32;
  const int64_t stride = int64_t{gridDim.x} * kBwdWarps;
  const int64_t group = f.group_size;
  for (int64_t row = int64_t{blockIdx.x} * kBwdWarps + threadIdx.x / 32; row < rows;
       row += stride) {
    const int64_t i = row % f.q_len, bh = row / f.q_len;
    const int64_t h = bh % f.num_heads, b = bh / f.num_heads;
    const int64_t kv_length = KvLengthOf(f, b);
    const int64_t tile = (i * group + h % group) / p.block_m;
    const int64_t base = row * f.head_dim;  // == BwdRowOffset(p, b, h, i)
    float acc[kCols];
#pragma unroll
    for (int u = 0; u < kCols; ++u) {
      const int c = lane + 32 * u;
      acc[u] = (first || c >= f.head_dim) ? 0.0f : p.dq_acc[base + c];
    }
    for (int64_t kb = p.chunk_begin; kb < p.chunk_end; ++kb) {
      if (!BwdStepVisible(p, kv_length, tile, kb)) continue;
      const float* part = p.dq_partial + (kb - p.chunk_begin) * p.partial_slice + base;
#pragma unroll
      for (int u = 0; u < kCols; ++u) {
        const int c = lane + 32 * u;
        if (c < f.head_dim) acc[u] += part[c];
      }
    }
#pragma unroll
    for (int u = 0; u < kCols; ++u) {
      const int c = lane + 32 * u;
      if (c >= f.head_dim) continue;
      if (last) {
        StoreElem(p.dq, f.q_type, Off(p.dq_stride, b, h, i, c), acc[u] * f.scale);
      } else {
        p.dq_acc[base + c] = acc[u];
      }
    }
  }
}

// One warp per query head h: dsinks[h] = -sum over rows (b, i) of
// exp(sink_h - lse) D (SinkGradTerm), lane l summing rows l, l + 32, ... in
// order, then WarpSum's tree: a fixed order. A head without a sink (-inf)
// gets 0; a NaN lse (a poisoned row) makes its head's gradient NaN.
__global__ void __launch_bounds__(kBwdThreads) BwdSinkGradKernel(const BwdParams p) {
  const FlashParams& f = p.fwd;
  const int64_t h = int64_t{blockIdx.x} * kBwdWarps + threadIdx.x / 32;
  if (h >= f.num_heads) return;  // uniform across the warp
  const int lane = threadIdx.x % 32;
  const float sink = SinkOf(f, h);
  float acc = 0.0f;
  if (sink != -INFINITY) {
    const int64_t rows = int64_t{f.batch} * f.q_len;
    for (int64_t n = lane; n < rows; n += 32) acc += SinkGradTerm(p, h, n, sink);
  }
  acc = WarpSum(acc);
  // 0 - acc, not -acc: a head without terms gets +0, as core's gradient.
  if (lane == 0) p.dsinks[h * p.dsinks_stride] = 0.0f - acc;
}

unsigned GridFor(int64_t rows) {
  const int64_t blocks = (rows + kBwdWarps - 1) / kBwdWarps;
  return static_cast<unsigned>(blocks < kMaxGridBlocks ? (blocks < 1 ? 1 : blocks)
                                                       : kMaxGridBlocks);
}

}  // namespace

cudaError_t LaunchBwdDot(const BwdParams& p, cudaStream_t stream) {
  const int64_t rows = int64_t{p.fwd.batch} * p.fwd.num_heads * p.fwd.q_len;
  BwdDotKernel<<<GridFor(rows), kBwdThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchBwdSinkGrad(const BwdParams& p, cudaStream_t stream) {
  if (p.dsinks == nullptr || p.fwd.sinks == nullptr) return cudaSuccess;
  BwdSinkGradKernel<<<GridFor(p.fwd.num_heads), kBwdThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchBwdDqSum(const BwdParams& p, bool first, bool last, cudaStream_t stream) {
  const int64_t rows = int64_t{p.fwd.batch} * p.fwd.num_heads * p.fwd.q_len;
  BwdDqSumKernel<<<GridFor(rows), kBwdThreads, 0, stream>>>(p, first, last);
  return cudaGetLastError();
}

cudaError_t LaunchFlashBackward(const BwdParams& p, int bucket, cudaStream_t stream) {
  switch (bucket) {
    case 64:
      return LaunchFlashBackwardD64(p, stream);
    case 128:
      return LaunchFlashBackwardD128(p, stream);
    case 256:
      return LaunchFlashBackwardD256(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace cuda
}  // namespace attnkit
