// The kernels of the "cuda" backward pass (the algorithm is in
// bwd_params.h). Every dtype is loaded into f32 shared-memory tiles and
// computed in f32 on the CUDA cores, so one FlashBackwardKernel instance per
// head-dim bucket serves f32, f16 and bf16 (flash_bwd_d{64,128,256}.cu); the
// D and dQ-sum kernels are in flash_bwd_aux.cu.
//
// FlashBackwardKernel<kD>: one block of kBwdThreads threads per (key block
// of the current chunk, KV head, batch entry). The block stages its kN keys
// of K and V (rows past the sequence's kv_length zeroed) once, then walks
// the packed row tiles (kM rows: query i, head of the group) for which
// BwdStepVisible holds. Per step, with the tile's Q and dO in shared memory:
//   S = Q K^T, dP = dO V^T       thread: key column tid % kN, kRowsPerThread rows
//   P, dS, dX (PairGradOf)       into sP, sdX; dBias = dS straight to memory
//   dV += P^T dO, dK += dX^T Q   registers: keys warp + 8m, columns lane + 32u
//   dQ partial = dX K            rows warp + 8m, columns lane + 32u, to the
//                                workspace slice of this key block
// At the end dK (times scale) and dV are stored for every key of the block
// below Tk (zeros for keys past kv_length or seen by no query).
#ifndef ATTNKIT_BACKENDS_CUDA_FLASH_BWD_KERNEL_CUH_
#define ATTNKIT_BACKENDS_CUDA_FLASH_BWD_KERNEL_CUH_

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/bwd_params.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/flash_params.h"
#include "core/mask.h"

namespace attnkit {
namespace cuda {
namespace bwd {

// Element offset of (b, h, t, c) in a view with strides s.
__device__ __forceinline__ int64_t Off(const Strides4& s, int64_t b, int64_t h, int64_t t,
                                       int64_t c) {
  return b * s.b + h * s.h + t * s.t + c * s.c;
}

// Zeroes each of rows [0, n) of a [n, kLd] f32 tile whose first kD values
// hold a NaN or Inf; one warp per row, `warp` of kBwdWarps.
template <int kD, int kLd>
__device__ __forceinline__ void ZeroNonFiniteRows(float* tile, int n, int warp, int lane) {
  for (int r = warp; r < n; r += kBwdWarps) {
    float* row = tile + r * kLd;
    bool finite = true;
    for (int c = lane; c < kD; c += 32) finite = finite && isfinite(row[c]);
    if (__all_sync(0xffffffffu, finite)) continue;
    for (int c = lane; c < kD; c += 32) row[c] = 0.0f;
  }
}

template <int kD>
__global__ void __launch_bounds__(kBwdThreads) FlashBackwardKernel(const BwdParams p) {
  using Tr = BwdTraits<kD>;
  constexpr int kM = Tr::kBlockM, kN = Tr::kBlockN, kLdD = Tr::kLdD, kLdN = Tr::kLdN;
  constexpr int kRows = Tr::kRowsPerThread, kKeys = Tr::kKeysPerThread;
  constexpr int kCols = Tr::kColsPerThread, kDqRows = Tr::kDqRowsPerThread;
  extern __shared__ __align__(128) unsigned char smem[];
  float* sK = reinterpret_cast<float*>(smem + Tr::kOffK);       // [kN, kLdD]
  float* sV = reinterpret_cast<float*>(smem + Tr::kOffV);       // [kN, kLdD]
  float* sQ = reinterpret_cast<float*>(smem + Tr::kOffQ);       // [kM, kLdD]
  float* sDo = reinterpret_cast<float*>(smem + Tr::kOffDo);     // [kM, kLdD]
  float* sP = reinterpret_cast<float*>(smem + Tr::kOffP);       // [kM, kLdN]
  float* sDx = reinterpret_cast<float*>(smem + Tr::kOffDx);     // [kM, kLdN]
  float* sLse = reinterpret_cast<float*>(smem + Tr::kOffRows);  // [kM]
  float* sDsum = sLse + kM;                                     // [kM]
  int64_t* sRowI = reinterpret_cast<int64_t*>(sDsum + kM);      // [kM], -1: no row
  int64_t* sRowH = sRowI + kM;                                  // [kM]
  int64_t* sKeyBegin = sRowH + kM;                              // [kM]
  int64_t* sKeyEnd = sKeyBegin + kM;                            // [kM]

  const FlashParams& f = p.fwd;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t kb = p.chunk_begin + blockIdx.x;
  const int64_t g = blockIdx.y, b = blockIdx.z;
  const int64_t group = f.group_size;
  const int64_t rows = f.rows_per_kv_head;
  const int64_t k0 = kb * kN;
  const int64_t kv_length = KvLengthOf(f, b);
  // Keys of the block below Tk (dK, dV rows to write) and below kv_length
  // (rows with data; the others stay zero so that 0 weights meet 0 values).
  const int64_t nk_all = f.kv_len - k0 < kN ? f.kv_len - k0 : kN;
  const int64_t nk_rem = kv_length - k0;
  const int nk = nk_rem <= 0 ? 0 : (nk_rem < kN ? static_cast<int>(nk_rem) : kN);

  for (int idx = tid; idx < kN * kD; idx += kBwdThreads) {
    const int j = idx / kD, c = idx % kD;
    float kx = 0.0f, vx = 0.0f;
    if (j < nk && c < f.head_dim) {
      kx = LoadElem(f.k, f.kv_type, Off(f.k_stride, b, g, k0 + j, c));
      vx = LoadElem(f.v, f.kv_type, Off(f.v_stride, b, g, k0 + j, c));
    }
    sK[j * kLdD + c] = kx;
    sV[j * kLdD + c] = vx;
  }
  // A K or V row holding a NaN or Inf is zeroed, as the CPU backends do
  // (backends/blas/backward.cc, StageKv): a query row that sees it read it in
  // the forward, so its lse is NaN and PairGradOf makes its P and dX NaN
  // wherever it sees a key; a row that does not see it must not get 0 * NaN
  // in dQ = dX K or dP = dO V^T.
  __syncthreads();
  ZeroNonFiniteRows<kD, kLdD>(sK, kN, warp, lane);
  ZeroNonFiniteRows<kD, kLdD>(sV, kN, warp, lane);

  float dk[kKeys][kCols], dv[kKeys][kCols];
#pragma unroll
  for (int m = 0; m < kKeys; ++m) {
#pragma unroll
    for (int u = 0; u < kCols; ++u) dk[m][u] = dv[m][u] = 0.0f;
  }

  const int64_t tiles = (rows + kM - 1) / kM;
#pragma unroll 1
  for (int64_t tile = 0; tile < tiles; ++tile) {
    if (!BwdStepVisible(p, kv_length, tile, kb)) continue;  // uniform across the block
    const int64_t r0 = tile * kM;
    // The K/V tiles are staged, and the previous step's readers are done.
    __syncthreads();
    if (tid < kM) {
      const int64_t row = r0 + tid;
      int64_t i = -1, h = 0, key_begin = 0, key_end = 0;
      float lse = -INFINITY, dsum = 0.0f;
      if (row < rows) {
        i = row / group;
        h = g * group + row % group;
        lse = f.lse[b * f.lse_stride_b + h * f.lse_stride_h + i * f.lse_stride_t];
        dsum = p.dsum[(b * f.num_heads + h) * f.q_len + i];
        const KeyRange keys = VisibleKeys(f.mask, i, kv_length);
        key_begin = keys.begin;
        key_end = keys.end;
      }
      sRowI[tid] = i;
      sRowH[tid] = h;
      sLse[tid] = lse;
      sDsum[tid] = dsum;
      sKeyBegin[tid] = key_begin;
      sKeyEnd[tid] = key_end;
    }
    for (int idx = tid; idx < kM * kD; idx += kBwdThreads) {
      const int r = idx / kD, c = idx % kD;
      const int64_t row = r0 + r;
      float qx = 0.0f, dox = 0.0f;
      if (row < rows && c < f.head_dim) {
        const int64_t i = row / group, h = g * group + row % group;
        qx = LoadElem(f.q, f.q_type, Off(f.q_stride, b, h, i, c));
        dox = LoadElem(p.d_o, f.q_type, Off(p.do_stride, b, h, i, c));
      }
      sQ[r * kLdD + c] = qx;
      sDo[r * kLdD + c] = dox;
    }
    // A Q row holding a NaN or Inf is zeroed (LoadBlock's rule there): with a
    // NaN lse its P is NaN wherever it sees a key anyway, and with a finite
    // one (it sees no key; with sinks the lse is the sink's) Q is never
    // read; either way 0 * NaN must not reach the dK of keys it does not see.
    __syncthreads();
    ZeroNonFiniteRows<kD, kLdD>(sQ, kM, warp, lane);
    __syncthreads();

    // S = Q K^T and dP = dO V^T for key column c and rows [rbase, rbase +
    // kRows); then the pair gradients.
    {
      const int c = tid % kN;
      const int rbase = (tid / kN) * kRows;
      float s[kRows], dp[kRows];
#pragma unroll
      for (int m = 0; m < kRows; ++m) s[m] = dp[m] = 0.0f;
#pragma unroll 4
      for (int kk = 0; kk < kD; ++kk) {
        const float kx = sK[c * kLdD + kk], vx = sV[c * kLdD + kk];
#pragma unroll
        for (int m = 0; m < kRows; ++m) {
          s[m] = fmaf(sQ[(rbase + m) * kLdD + kk], kx, s[m]);
          dp[m] = fmaf(sDo[(rbase + m) * kLdD + kk], vx, dp[m]);
        }
      }
      const int64_t j = k0 + c;
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        const int r = rbase + m;
        const int64_t i = sRowI[r], h = sRowH[r];
        bool visible = i >= 0 && j >= sKeyBegin[r] && j < sKeyEnd[r];
        if (visible && f.blocked_mask != nullptr) {
          visible = f.blocked_mask[Off(f.mask_stride, b, h, i, j)] == 0;
        }
        float bias = 0.0f;
        if (visible && f.bias != nullptr) bias = f.bias[Off(f.bias_stride, b, h, i, j)];
        const float alibi = visible ? AlibiTermOf(f, h, i, j, kv_length) : 0.0f;
        const PairGrad pg =
            PairGradOf(visible, s[m], dp[m], bias, sLse[r], sDsum[r], f.scale, f.softcap, alibi);
        sP[r * kLdN + c] = pg.p;
        sDx[r * kLdN + c] = pg.dx;
        if (p.dbias != nullptr && i >= 0 && j < f.kv_len) {
          p.dbias[Off(p.dbias_stride, b, h, i, j)] = pg.ds;
        }
      }
    }
    __syncthreads();

    // dV += P^T dO and dK += dX^T Q over the step's rows.
#pragma unroll 2
    for (int r = 0; r < kM; ++r) {
      float pr[kKeys], xr[kKeys];
#pragma unroll
      for (int m = 0; m < kKeys; ++m) {
        pr[m] = sP[r * kLdN + warp + kBwdWarps * m];
        xr[m] = sDx[r * kLdN + warp + kBwdWarps * m];
      }
#pragma unroll
      for (int u = 0; u < kCols; ++u) {
        const float dox = sDo[r * kLdD + lane + 32 * u], qx = sQ[r * kLdD + lane + 32 * u];
#pragma unroll
        for (int m = 0; m < kKeys; ++m) {
          dv[m][u] = fmaf(pr[m], dox, dv[m][u]);
          dk[m][u] = fmaf(xr[m], qx, dk[m][u]);
        }
      }
    }

    // This key block's dQ partial (unscaled) of the step's rows.
    float* partial = p.dq_partial + (kb - p.chunk_begin) * p.partial_slice;
#pragma unroll 1
    for (int m = 0; m < kDqRows; ++m) {
      const int r = warp + kBwdWarps * m;
      float acc[kCols];
#pragma unroll
      for (int u = 0; u < kCols; ++u) acc[u] = 0.0f;
#pragma unroll 4
      for (int jj = 0; jj < kN; ++jj) {
        const float x = sDx[r * kLdN + jj];
#pragma unroll
        for (int u = 0; u < kCols; ++u) acc[u] = fmaf(x, sK[jj * kLdD + lane + 32 * u], acc[u]);
      }
      const int64_t i = sRowI[r];
      if (i >= 0) {
        float* dst = partial + BwdRowOffset(p, b, sRowH[r], i);
#pragma unroll
        for (int u = 0; u < kCols; ++u) {
          const int c = lane + 32 * u;
          if (c < f.head_dim) dst[c] = acc[u];
        }
      }
    }
  }

  // dK = scale sum dX^T Q, dV = sum P^T dO for the block's keys below Tk.
#pragma unroll
  for (int m = 0; m < kKeys; ++m) {
    const int jj = warp + kBwdWarps * m;
    if (jj >= nk_all) continue;
    const int64_t t = k0 + jj;
#pragma unroll
    for (int u = 0; u < kCols; ++u) {
      const int c = lane + 32 * u;
      if (c >= f.head_dim) continue;
      StoreElem(p.dk, f.kv_type, Off(p.dk_stride, b, g, t, c), dk[m][u] * f.scale);
      StoreElem(p.dv, f.kv_type, Off(p.dv_stride, b, g, t, c), dv[m][u]);
    }
  }
}

// Launches the current chunk (p.chunk_begin .. p.chunk_end) of the main
// kernel for bucket kD.
template <int kD>
cudaError_t LaunchFlashBackwardBucket(const BwdParams& p, cudaStream_t stream) {
  using Tr = BwdTraits<kD>;
  // The shared-memory opt-in, once per instance and device.
  static PerDeviceOnce smem_opt_in;
  const cudaError_t attr = OptInSharedMemory(smem_opt_in, FlashBackwardKernel<kD>, Tr::kSmemBytes);
  if (attr != cudaSuccess) return attr;
  // The plan's tile shape is this instance's (BwdStepVisible reads it).
  if (p.block_m != Tr::kBlockM || p.block_n != Tr::kBlockN) return cudaErrorInvalidValue;
  const int64_t blocks = p.chunk_end - p.chunk_begin;
  if (blocks <= 0 || blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.fwd.num_kv_heads),
                  static_cast<unsigned>(p.fwd.batch));
  FlashBackwardKernel<kD><<<grid, kBwdThreads, Tr::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace bwd
}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_FLASH_BWD_KERNEL_CUH_
