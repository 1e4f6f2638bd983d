// The flash-attention forward kernel, templated on FlashTraits (head-dim
// bucket x compute kind). Included once per compute kind by
// flash_fwd_{f32,f16,bf16}.cu, which instantiate the four head-dim buckets.
//
// One thread block per (query tile, key split) x KV head x batch. The block
// owns kBlockM packed rows (query i, query head j of the group) of one KV
// head, so every K/V tile it stages in shared memory serves all query heads
// of the group. Each warp owns 16 rows: S = Q K^T runs on tensor cores
// (WMMA, exact 16-bit products, fp32 accumulation) for f16/bf16 tiles, on
// CUDA cores for f32; the online softmax keeps the running max and sum of
// its rows in registers.
//
// The compute mode (FlashParams::round_q/round_p, kernel_traits.h kRoundP):
// EXACT keeps P in f32 and runs O += P V on the CUDA cores (f32 P times V
// widened exactly from its 16-bit tile, fp32 sums). FAST with 16-bit K/V
// rounds P to the tiles' type and runs P V on tensor cores too; Q stored in
// another type is rounded to K's on load (LoadTile's conversion to T, to
// nearest even: core/fast_compute.h's RoundQueryValue). The row sum is of
// the unrounded f32 weights in both modes.
//
// Key tiles the mask hides entirely are skipped (ClassifyTile); tiles it
// shows entirely need no per-element mask test.
//
// K and V rows are found through KvRowOf (dense, or paged through the block
// table), once per key of a tile; int8 and fp8 rows are multiplied by their
// scales as they are staged (they compute in f32: ComputeKindFor).
//
// NaN and Inf in inputs (oracle/reference.h): a row whose visible pair has a
// non-finite raw score (a NaN/Inf in its Q row or that K row, an fp8 NaN or
// Inf code, or a NaN int8 or fp8 scale of that K row), a NaN or +inf bias, or a V row holding a
// NaN/Inf (or with a NaN scale) gives NaN (o and lse); a -inf bias blocks the pair. V rows with a
// NaN/Inf are zeroed in shared memory after flagging, so the rows that do not see them (weight 0,
// and 0 * NaN = NaN) are untouched.
#ifndef ATTNKIT_BACKENDS_CUDA_FLASH_FWD_KERNEL_CUH_
#define ATTNKIT_BACKENDS_CUDA_FLASH_FWD_KERNEL_CUH_

#include <cuda_runtime.h>
#include <mma.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/device_types.cuh"
#include "backends/cuda/flash_params.h"
#include "backends/cuda/kernel_traits.h"
#include "backends/cuda/tile_schedule.h"
#include "core/mask.h"

namespace attnkit {
namespace cuda {
namespace flash {

constexpr float kLog2e = 1.4426950408889634f;

// Copies kRows rows of a strided [*, d] matrix into a [kRows, kD] shared
// tile with leading dim kLd, converting to T. row_offset(r) is the element
// offset of row r, or -1 for a row to zero-fill; columns d..kD are zero.
// row_scale(r) multiplies the elements of row r (an int8 or fp8 row's
// scale, 1 for float storage); the vector path is float storage only and never scales.
template <int kRows, int kD, int kLd, int kThreads, typename T, typename RowOffset,
          typename RowScale>
__device__ __forceinline__ void LoadTile(T* dst, const void* src, ElemType type, bool vec, int d,
                                         int64_t col_stride, RowOffset row_offset,
                                         RowScale row_scale) {
  if (vec) {
    // Storage type is T, columns contiguous and 16-byte aligned (host checked).
    constexpr int kPerVec = 16 / sizeof(T);
    constexpr int kVecsPerRow = kD / kPerVec;
    for (int idx = threadIdx.x; idx < kRows * kVecsPerRow; idx += kThreads) {
      const int r = idx / kVecsPerRow;
      const int c = (idx % kVecsPerRow) * kPerVec;
      const int64_t off = row_offset(r);
      uint4 chunk = make_uint4(0, 0, 0, 0);
      if (off >= 0 && c < d) {
        chunk = *reinterpret_cast<const uint4*>(static_cast<const T*>(src) + off + c);
      }
      if constexpr (sizeof(T) == 2) {
        // kLd * 2 bytes is a multiple of 16, so the shared store is aligned.
        *reinterpret_cast<uint4*>(dst + r * kLd + c) = chunk;
      } else {
        const T* e = reinterpret_cast<const T*>(&chunk);
#pragma unroll
        for (int k = 0; k < kPerVec; ++k) dst[r * kLd + c + k] = e[k];
      }
    }
  } else {
    for (int idx = threadIdx.x; idx < kRows * kD; idx += kThreads) {
      const int r = idx / kD;
      const int c = idx % kD;
      const int64_t off = row_offset(r);
      const float x =
          (off >= 0 && c < d) ? LoadElem(src, type, off + c * col_stride) * row_scale(r) : 0.0f;
      dst[r * kLd + c] = FromFloat<T>(x);
    }
  }
}

// S[16 x kBlockN] = Q[16 x kD] K^T for the warp's 16 rows (unscaled, fp32).
template <class Traits, typename T>
__device__ __forceinline__ void ComputeScores(const T* sQ, const T* sK, float* sS, int warp,
                                              int lane) {
  constexpr int kN = Traits::kBlockN, kD = Traits::kHeadDim, kLd = Traits::kLdQK;
  const T* q = sQ + warp * kRowsPerWarp * kLd;
  float* s = sS + warp * kRowsPerWarp * Traits::kLdS;
  if constexpr (Traits::kTensorCores) {
    using namespace nvcuda;
#pragma unroll
    for (int n = 0; n < kN / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        // K is [kBlockN, kD] row-major, i.e. K^T column-major.
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bk;
        wmma::load_matrix_sync(a, q + kk * 16, kLd);
        wmma::load_matrix_sync(bk, sK + n * 16 * kLd + kk * 16, kLd);
        wmma::mma_sync(acc, a, bk, acc);
      }
      wmma::store_matrix_sync(s + n * 16, acc, Traits::kLdS, wmma::mem_row_major);
    }
  } else {
    // Lane owns key columns lane + 32u; one K load feeds 16 FMAs.
#pragma unroll
    for (int u = 0; u < kN / 32; ++u) {
      const int c = lane + 32 * u;
      const T* krow = sK + c * kLd;
      float acc[kRowsPerWarp];
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) acc[rr] = 0.0f;
      for (int kk = 0; kk < kD; ++kk) {
        const float kv = krow[kk];
#pragma unroll
        for (int rr = 0; rr < kRowsPerWarp; ++rr) acc[rr] = fmaf(q[rr * kLd + kk], kv, acc[rr]);
      }
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) s[rr * Traits::kLdS + c] = acc[rr];
    }
  }
}

// O[16 x kD] += P[16 x kBlockN] V[kBlockN x kD] for the warp's rows. P is
// in T on the tensor-core path (FAST), in f32 on the CUDA-core path.
template <class Traits, typename T, typename PT>
__device__ __forceinline__ void AccumulatePV(const PT* sP, const T* sV, float* sO, int warp,
                                             int lane) {
  constexpr int kN = Traits::kBlockN, kD = Traits::kHeadDim, kLd = Traits::kLdQK;
  const PT* pw = sP + warp * kRowsPerWarp * Traits::kLdP;
  float* o = sO + warp * kRowsPerWarp * Traits::kLdO;
  if constexpr (Traits::kTensorCoresPV) {
    static_assert(sizeof(PT) == 2, "tensor-core P V multiplies 16-bit P");
    using namespace nvcuda;
#pragma unroll
    for (int cb = 0; cb < kD / 16; ++cb) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, o + cb * 16, Traits::kLdO, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kN / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bv;
        wmma::load_matrix_sync(a, pw + kk * 16, Traits::kLdP);
        wmma::load_matrix_sync(bv, sV + kk * 16 * kLd + cb * 16, kLd);
        wmma::mma_sync(acc, a, bv, acc);
      }
      wmma::store_matrix_sync(o + cb * 16, acc, Traits::kLdO, wmma::mem_row_major);
    }
  } else {
    // f32 P times V widened exactly (T is f32, or a 16-bit tile under
    // EXACT): lane owns columns lane + 32u; each row's weights are read four
    // at a time (a broadcast 16-byte load), summed in key order.
    static_assert(sizeof(PT) == 4, "CUDA-core P V keeps P in f32");
    static_assert(kN % 4 == 0 && Traits::kLdP % 4 == 0, "weights read as float4");
    for (int c = lane; c < kD; c += 32) {
      float acc[kRowsPerWarp];
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) acc[rr] = o[rr * Traits::kLdO + c];
      for (int j = 0; j < kN; j += 4) {
        float v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) v[k] = ToFloat(sV[(j + k) * kLd + c]);
#pragma unroll
        for (int rr = 0; rr < kRowsPerWarp; ++rr) {
          const float4 pr = *reinterpret_cast<const float4*>(pw + rr * Traits::kLdP + j);
          acc[rr] = fmaf(pr.x, v[0], acc[rr]);
          acc[rr] = fmaf(pr.y, v[1], acc[rr]);
          acc[rr] = fmaf(pr.z, v[2], acc[rr]);
          acc[rr] = fmaf(pr.w, v[3], acc[rr]);
        }
      }
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) o[rr * Traits::kLdO + c] = acc[rr];
    }
  }
}

// Flags (vbad[r] = 1) and zeroes the rows r < kRows of a [kRows, kD] shared
// tile (leading dim kLd) that hold a NaN or Inf; vbad[r] = 0 for the others.
// One warp per row at a time.
template <int kRows, int kD, int kLd, int kWarps, typename T>
__device__ __forceinline__ void FlagAndZeroNonFiniteRows(T* tile, int* vbad, int warp, int lane) {
  for (int r = warp; r < kRows; r += kWarps) {
    bool bad = false;
    for (int c = lane; c < kD; c += 32) bad = bad || !isfinite(ToFloat(tile[r * kLd + c]));
    bad = __any_sync(0xffffffffu, bad);
    if (bad) {
      for (int c = lane; c < kD; c += 32) tile[r * kLd + c] = FromFloat<T>(0.0f);
    }
    if (lane == 0) vbad[r] = bad ? 1 : 0;
  }
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kNThreads) FlashForwardKernel(const FlashParams p) {
  using T = typename ComputeTypeOf<Traits::kCompute>::Type;
  using PT = typename std::conditional<Traits::kTensorCoresPV, T, float>::type;  // sP
  constexpr int kM = Traits::kBlockM, kN = Traits::kBlockN, kD = Traits::kHeadDim;
  constexpr int kThreads = Traits::kNThreads;
  constexpr float kNegInf = -INFINITY;
  extern __shared__ __align__(128) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem + Traits::kOffQ);
  T* sK = reinterpret_cast<T*>(smem + Traits::kOffK);
  T* sV = reinterpret_cast<T*>(smem + Traits::kOffV);
  float* sS = reinterpret_cast<float*>(smem + Traits::kOffS);
  PT* sP = reinterpret_cast<PT*>(smem + Traits::kOffP);
  float* sO = reinterpret_cast<float*>(smem + Traits::kOffO);
  int* sVBad = reinterpret_cast<int*>(smem + Traits::kOffVBad);
  int64_t* sKOff = reinterpret_cast<int64_t*>(smem + Traits::kOffKvRows);  // [kN]
  int64_t* sVOff = sKOff + kN;                                             // [kN]
  float* sKScale = reinterpret_cast<float*>(sVOff + kN);                   // [kN]
  float* sVScale = sKScale + kN;                                           // [kN]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t tiles_m = (p.rows_per_kv_head + kM - 1) / kM;
  const int64_t m_tile = blockIdx.x % tiles_m;
  const int split = static_cast<int>(blockIdx.x / tiles_m);
  const int64_t g = blockIdx.y, b = blockIdx.z;
  const int64_t group = p.group_size;
  const int64_t r0 = m_tile * kM;
  const int64_t r1 = r0 + kM < p.rows_per_kv_head ? r0 + kM : p.rows_per_kv_head;
  const int64_t kv_length = KvLengthOf(p, b);
  const QuerySpan queries = QueriesOfRows(r0, r1, group);
  const TileSpan tiles = SplitTiles(KeyTileSpan(p.mask, kv_length, queries.first, queries.end, kN),
                                    p.num_splits, split);

  LoadTile<kM, kD, Traits::kLdQK, kThreads>(
      sQ, p.q, p.q_type, p.q_vec, p.head_dim, p.q_stride.c,
      [&](int r) -> int64_t {
        const int64_t row = r0 + r;
        if (row >= r1) return -1;
        const int64_t i = row / group, h = g * group + row % group;
        return b * p.q_stride.b + h * p.q_stride.h + i * p.q_stride.t;
      },
      [](int) { return 1.0f; });
  for (int idx = threadIdx.x; idx < kM * Traits::kLdO; idx += kThreads) sO[idx] = 0.0f;
  __syncthreads();

  // Online-softmax state of the warp's 16 rows, in registers: lane rr holds
  // the running max (log2 units) and sum of exp2(s - max) of row rr.
  float my_max = kNegInf, my_sum = 0.0f;
  bool my_bad = false;  // lane rr: row rr read a NaN or Inf
  const bool warp_active = r0 + warp * kRowsPerWarp < r1;

  for (int64_t t = tiles.begin; t < tiles.end; ++t) {
    const int64_t k0 = t * kN;
    const TileVisibility vis =
        ClassifyTile(p.mask, kv_length, queries.first, queries.end, k0, k0 + kN);
    if (vis == TileVisibility::kHidden) continue;  // uniform across the block
#pragma unroll 1
    // Where the tile's K and V rows are (dense or through the block table)
    // and their int8 or fp8 scales, once per key. The previous tile's loads, the
    // only readers, ended before the __syncthreads that followed them.
    for (int r = threadIdx.x; r < kN; r += kThreads) {
      const int64_t j = k0 + r;
      int64_t k_off = -1, v_off = -1;
      float k_scale = 1.0f, v_scale = 1.0f;
      if (j < kv_length) {  // a page past the sequence's keys is never looked up
        const KvRow row = KvRowOf(p, b, j);
        k_off = KvOffset(p.k_stride, row, g);
        v_off = KvOffset(p.v_stride, row, g);
        if constexpr (!Traits::kTensorCores) {  // int8 and fp8 K/V compute in f32
          k_scale = KvScale(p.k_scale, p.k_scale_stride, row, g);
          v_scale = KvScale(p.v_scale, p.v_scale_stride, row, g);
        }
      }
      sKOff[r] = k_off;
      sVOff[r] = v_off;
      sKScale[r] = k_scale;
      sVScale[r] = v_scale;
    }
    __syncthreads();  // the rows are known, and every warp is done with the previous tiles
    LoadTile<kN, kD, Traits::kLdQK, kThreads>(
        sK, p.k, p.kv_type, p.k_vec, p.head_dim, p.k_stride.c,
        [&](int r) -> int64_t { return sKOff[r]; },
        [&](int r) { return Traits::kTensorCores ? 1.0f : sKScale[r]; });
    LoadTile<kN, kD, Traits::kLdQK, kThreads>(
        sV, p.v, p.kv_type, p.v_vec, p.value_dim, p.v_stride.c,
        [&](int r) -> int64_t { return sVOff[r]; },
        [&](int r) { return Traits::kTensorCores ? 1.0f : sVScale[r]; });
    __syncthreads();
    FlagAndZeroNonFiniteRows<kN, kD, Traits::kLdQK, Traits::kNWarps>(sV, sVBad, warp, lane);
    __syncthreads();
    if (!warp_active) continue;

    ComputeScores<Traits>(sQ, sK, sS, warp, lane);
    __syncwarp();
    const bool partial = vis == TileVisibility::kPartial;
#pragma unroll 1
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr;
      const int64_t row = r0 + r;
      const bool valid = row < r1;
      const int64_t i = row / group, h = g * group + row % group;
      KeyRange keys{k0, k0 + kN};
      if (partial) keys = VisibleKeys(p.mask, i, kv_length);
      float s[kN / 32];
      float tile_max = kNegInf;
      bool bad = false;
#pragma unroll
      for (int u = 0; u < kN / 32; ++u) {
        const int c = lane + 32 * u;
        const int64_t j = k0 + c;
        bool visible = valid && j >= keys.begin && j < keys.end;
        if (visible && p.blocked_mask != nullptr) {
          const Strides4& ms = p.mask_stride;
          visible = p.blocked_mask[b * ms.b + h * ms.h + i * ms.t + j * ms.c] == 0;
        }
        float bias = 0.0f;
        if (visible && p.bias != nullptr) {
          const Strides4& bs = p.bias_stride;
          bias = p.bias[b * bs.b + h * bs.h + i * bs.t + j * bs.c];
          visible = bias != kNegInf;  // -inf blocks the pair
        }
        float x = kNegInf;
        if (visible) {
          x = sS[r * Traits::kLdS + c] * p.scale;
          bad = bad || !isfinite(x) || !(bias < INFINITY) || sVBad[c] != 0;
          if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
          if (p.alibi_slopes != nullptr) {  // a NaN or infinite term poisons the row
            const float term = AlibiTermOf(p, h, i, j, kv_length);
            bad = bad || !isfinite(term);
            x += term;
          }
          x = (x + bias) * kLog2e;
        }
        s[u] = x;
        tile_max = fmaxf(tile_max, x);
      }
      bad = __any_sync(0xffffffffu, bad);
      if (lane == rr) my_bad = my_bad || bad;
      tile_max = WarpMax(tile_max);
      const float m_old = __shfl_sync(0xffffffffu, my_max, rr);
      const float m_new = fmaxf(m_old, tile_max);
      // m_new = -inf: nothing visible yet, O and the sum are still zero.
      const float alpha = m_new == kNegInf ? 1.0f : exp2f(m_old - m_new);
      float psum = 0.0f;
#pragma unroll
      for (int u = 0; u < kN / 32; ++u) {
        const float pr = s[u] == kNegInf ? 0.0f : exp2f(s[u] - m_new);
        psum += pr;  // the row sum of the unrounded weights
        sP[r * Traits::kLdP + lane + 32 * u] = FromFloat<PT>(pr);  // rounded under FAST only
      }
      psum = WarpSum(psum);
      if (lane == rr) {
        my_sum = my_sum * alpha + psum;
        my_max = m_new;
      }
      if (alpha != 1.0f) {
        for (int c = lane; c < kD; c += 32) sO[r * Traits::kLdO + c] *= alpha;
      }
    }
    __syncwarp();
    AccumulatePV<Traits, T, PT>(sP, sV, sO, warp, lane);
    __syncwarp();
  }

  if (!warp_active) return;
#pragma unroll 1
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = warp * kRowsPerWarp + rr;
    const int64_t row = r0 + r;
    if (row >= r1) break;
    const int64_t i = row / group, h = g * group + row % group;
    const float l = __shfl_sync(0xffffffffu, my_sum, rr);
    const float row_max = __shfl_sync(0xffffffffu, my_max, rr);
    const bool row_bad = __shfl_sync(0xffffffffu, my_bad ? 1 : 0, rr) != 0;
    RowFinish fin = FinishRow(row_max, l, row_bad);
    if (p.num_splits == 1) fin = WithSink(fin, SinkOf(p, h));  // else the combine's
    const float* o_row = sO + r * Traits::kLdO;
    const RowOutput out(p, split, b, h, i);
    for (int c = lane; c < p.value_dim; c += 32) out.Store(c, o_row[c] * fin.inv);
    if (lane == 0) out.StoreLse(fin.lse);
  }
}

template <class Traits>
cudaError_t LaunchFlashTraits(const FlashParams& p, cudaStream_t stream) {
  // The shared-memory opt-in, once per kernel instance and device.
  static PerDeviceOnce smem_opt_in;
  const cudaError_t attr =
      OptInSharedMemory(smem_opt_in, FlashForwardKernel<Traits>, Traits::kSmemBytes);
  if (attr != cudaSuccess) return attr;
  const int64_t tiles_m = (p.rows_per_kv_head + Traits::kBlockM - 1) / Traits::kBlockM;
  const int64_t blocks_x = tiles_m * p.num_splits;
  if (blocks_x > 0x7fffffff) return cudaErrorInvalidConfiguration;
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(p.num_kv_heads),
                  static_cast<unsigned>(p.batch));
  FlashForwardKernel<Traits><<<grid, Traits::kNThreads, Traits::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

// Launches the instance for head-dim `bucket` (one of kHeadDimBuckets).
template <ComputeKind kCompute, bool kRoundP>
cudaError_t LaunchFlashBucketAs(const FlashParams& p, int bucket, cudaStream_t stream) {
  switch (bucket) {
    case 32:
      return LaunchFlashTraits<FlashTraits<32, kCompute, kRoundP>>(p, stream);
    case 64:
      return LaunchFlashTraits<FlashTraits<64, kCompute, kRoundP>>(p, stream);
    case 128:
      return LaunchFlashTraits<FlashTraits<128, kCompute, kRoundP>>(p, stream);
    case 256:
      return LaunchFlashTraits<FlashTraits<256, kCompute, kRoundP>>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

// The instance for p.round_p: 16-bit P on tensor cores (FAST) or f32 P on
// the CUDA cores (EXACT); f32 tiles have only the latter.
template <ComputeKind kCompute>
cudaError_t LaunchFlashBucket(const FlashParams& p, int bucket, cudaStream_t stream) {
  if constexpr (kCompute == ComputeKind::kF32) {
    if (p.round_p) return cudaErrorInvalidValue;  // MakeFlashParams never asks for it
    return LaunchFlashBucketAs<kCompute, false>(p, bucket, stream);
  } else {
    return p.round_p ? LaunchFlashBucketAs<kCompute, true>(p, bucket, stream)
                     : LaunchFlashBucketAs<kCompute, false>(p, bucket, stream);
  }
}

}  // namespace flash
}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_FLASH_FWD_KERNEL_CUH_
