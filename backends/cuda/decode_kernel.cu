// The decode kernel: attention for problems with few packed query rows per
// KV head (Tq * group <= kDecodeMaxRows), in f32 arithmetic for every storage
// type. Decode is bound by reading K and V once; a 64-row flash tile would
// spend most of its warps on padding rows.
//
// Compute modes: P stays f32 in both (EXACT's arithmetic; FAST permits but
// does not require rounding it). FAST with 16-bit K (p.round_q) rounds each
// Q value to K's type as it is loaded, as the reference does
// (core/fast_compute.h), so the scores are those of the rounded Q.
//
// Grid: (row tiles x key splits, KV heads, batch). A block owns kDecodeRows
// packed rows r = i * group + (h mod group) of one KV head (the query heads
// sharing that head, for each query), so every K/V row it reads serves all of
// them. Its warps take the split's key tiles in turn (tile t to warp
// t mod kDecodeWarps), each with its own online softmax:
//   - the warp stages its 32 K rows in shared memory (coalesced over d) and
//     lane j computes the scores of key j against every row (Q broadcast from
//     shared memory);
//   - for each visible key, the lanes read its V row (coalesced, lane owns
//     columns lane + 32u) and accumulate P[row, key] * V in registers.
// At the end the warps merge through their maxima and sums (exactly as the
// split-K combine does), and the block writes O and LSE, or its split's
// normalised partial result for split_combine.cu.
//
// K and V rows: lane j finds key j's rows once per tile (KvRowOf: dense, or
// paged through the block table) with their int8 or fp8 scales, and the
// warp shares them by shuffle; int8 and fp8 values are multiplied by their
// row's scale as they are loaded. V rows have dv columns (value_dim), K
// rows d; the bucket kD covers both.
//
// NaN and Inf (oracle/reference.h): a row whose visible pair has a non-finite
// scaled score (a NaN scale of the K row, or an fp8 NaN code, included), a NaN or +inf bias,
// or whose visible key has a NaN/Inf in its V row (or a NaN V scale) gives
// NaN (o and lse); such a V row is never multiplied, so the rows that do not
// see it are unchanged; a -inf bias blocks the pair.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/device_types.cuh"
#include "backends/cuda/flash_launch.h"
#include "backends/cuda/flash_params.h"
#include "backends/cuda/kernel_traits.h"
#include "backends/cuda/tile_schedule.h"
#include "core/mask.h"

namespace attnkit {
namespace cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFullMask = 0xffffffffu;

template <class Traits>
__global__ void __launch_bounds__(Traits::kNThreads) FlashDecodeKernel(const FlashParams p) {
  constexpr int kD = Traits::kHeadDim, kR = Traits::kRows, kW = Traits::kNWarps;
  constexpr int kC = Traits::kCols, kLdK = Traits::kLdK, kKeys = kDecodeTileKeys;
  constexpr float kNegInf = -INFINITY;
  extern __shared__ __align__(128) unsigned char smem[];
  float* sQ = reinterpret_cast<float*>(smem + Traits::kOffQ);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* sK = reinterpret_cast<float*>(smem + Traits::kOffK) + warp * kKeys * kLdK;

  const int64_t row_tiles = (p.rows_per_kv_head + kR - 1) / kR;
  const int64_t m_tile = blockIdx.x % row_tiles;
  const int split = static_cast<int>(blockIdx.x / row_tiles);
  const int64_t g = blockIdx.y, b = blockIdx.z;
  const int64_t group = p.group_size;
  const int64_t r0 = m_tile * kR;
  const int64_t r1 = r0 + kR < p.rows_per_kv_head ? r0 + kR : p.rows_per_kv_head;
  const int64_t kv_length = KvLengthOf(p, b);
  const QuerySpan queries = QueriesOfRows(r0, r1, group);
  const TileSpan tiles = SplitTiles(
      KeyTileSpan(p.mask, kv_length, queries.first, queries.end, kKeys), p.num_splits, split);

  // Q rows in f32, zero past d and for rows past r1.
  for (int idx = threadIdx.x; idx < kR * kD; idx += Traits::kNThreads) {
    const int r = idx / kD, c = idx % kD;
    const int64_t row = r0 + r;
    float x = 0.0f;
    if (row < r1 && c < p.head_dim) {
      const int64_t i = row / group, h = g * group + row % group;
      const Strides4& qs = p.q_stride;
      x = LoadElem(p.q, p.q_type, b * qs.b + h * qs.h + i * qs.t + c * qs.c);
      if (p.round_q) x = RoundToStorage(x, p.kv_type);  // FAST: Q in K's type
    }
    sQ[idx] = x;
  }
  __syncthreads();

  // Query index and head of each row (int: MakeFlashParams bounds both).
  int row_query[kR], row_head[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int64_t row = r0 + r;
    row_query[r] = static_cast<int>(row / group);
    row_head[r] = static_cast<int>(g * group + row % group);
  }

  // The warp's online-softmax state per row: max (log2 units) and the O
  // accumulator are uniform across lanes; the sum is per lane (the lanes'
  // probabilities), reduced once at the end; bad is per lane, voted at the end.
  float m[kR], l[kR], acc[kR][kC];
  bool bad[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    m[r] = kNegInf;
    l[r] = 0.0f;
    bad[r] = false;
#pragma unroll
    for (int u = 0; u < kC; ++u) acc[r][u] = 0.0f;
  }

  const bool scaled = p.k_scale != nullptr;  // int8 or fp8 (uniform): scales to share
  for (int64_t t = tiles.begin + warp; t < tiles.end; t += kW) {
    const int64_t k0 = t * kKeys;
    const TileVisibility vis =
        ClassifyTile(p.mask, kv_length, queries.first, queries.end, k0, k0 + kKeys);
    if (vis == TileVisibility::kHidden) continue;  // uniform across the warp

    // Lane owns key j: where its K and V rows are (dense, or through the
    // block table, looked up once) and their scales (1 for float K/V).
    const int64_t j = k0 + lane;
    int64_t k_off = -1, v_off = -1;
    float k_scale = 1.0f, v_scale = 1.0f;
    if (j < kv_length) {  // a page past the sequence's keys is never looked up
      const KvRow kv_row = KvRowOf(p, b, j);
      k_off = KvOffset(p.k_stride, kv_row, g);
      v_off = KvOffset(p.v_stride, kv_row, g);
      k_scale = KvScale(p.k_scale, p.k_scale_stride, kv_row, g);
      v_scale = KvScale(p.v_scale, p.v_scale_stride, kv_row, g);
    }

    __syncwarp();  // every lane is done with the previous tile's K rows
    // Row r of the tile from lane r's offset, the lanes over d (coalesced).
    for (int r = 0; r < kKeys; ++r) {
      const int64_t off = __shfl_sync(kFullMask, k_off, r);
      const float row_scale = scaled ? __shfl_sync(kFullMask, k_scale, r) : 1.0f;
      for (int c = lane; c < kD; c += 32) {
        sK[r * kLdK + c] = (off >= 0 && c < p.head_dim)
                               ? LoadElem(p.k, p.kv_type, off + c * p.k_stride.c) * row_scale
                               : 0.0f;
      }
    }
    __syncwarp();

    // Lane owns key j: raw scores against every row.
    float s[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) s[r] = 0.0f;
#pragma unroll 4
    for (int c = 0; c < kD; ++c) {
      const float kc = sK[lane * kLdK + c];
#pragma unroll
      for (int r = 0; r < kR; ++r) s[r] = fmaf(sQ[r * kD + c], kc, s[r]);
    }

    // Mask, scale, softcap, bias; then the online-softmax update, leaving in
    // s[r] the probability of key j for row r (relative to the new max).
    uint32_t visible_bits = 0;  // bit r: row r sees key j
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int64_t i = row_query[r], h = row_head[r];
      bool visible = r0 + r < r1 && j < kv_length;
      if (visible && vis == TileVisibility::kPartial) {
        const KeyRange keys = VisibleKeys(p.mask, i, kv_length);
        visible = j >= keys.begin && j < keys.end;
      }
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
        visible_bits |= 1u << r;
        x = s[r] * p.scale;
        bad[r] = bad[r] || !isfinite(x) || !(bias < INFINITY);
        if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
        if (p.alibi_slopes != nullptr) {  // a NaN or infinite term poisons the row
          const float term = AlibiTermOf(p, h, i, j, kv_length);
          bad[r] = bad[r] || !isfinite(term);
          x += term;
        }
        x = (x + bias) * kLog2e;
      }
      const float m_new = fmaxf(m[r], WarpMax(x));
      // m_new = -inf: nothing visible yet; the sum and O are still zero.
      const float alpha = m_new == kNegInf ? 1.0f : exp2f(m[r] - m_new);
      const float pr = x == kNegInf ? 0.0f : exp2f(x - m_new);
      l[r] = l[r] * alpha + pr;
      m[r] = m_new;
      if (alpha != 1.0f) {
#pragma unroll
        for (int u = 0; u < kC; ++u) acc[r][u] *= alpha;
      }
      s[r] = pr;
    }

    // O += P V over the tile's keys that some row sees (a seen key is below
    // kv_length, so lane jj's V offset is a row).
    for (int jj = 0; jj < kKeys; ++jj) {
      const uint32_t seen = __shfl_sync(kFullMask, visible_bits, jj);
      if (seen == 0) continue;  // uniform: no row sees key k0 + jj
      const int64_t v_row = __shfl_sync(kFullMask, v_off, jj);
      const float row_scale = scaled ? __shfl_sync(kFullMask, v_scale, jj) : 1.0f;
      float v[kC];
      bool v_bad = false;
#pragma unroll
      for (int u = 0; u < kC; ++u) {
        const int c = lane + 32 * u;
        v[u] =
            c < p.value_dim ? LoadElem(p.v, p.kv_type, v_row + c * p.v_stride.c) * row_scale : 0.0f;
        v_bad = v_bad || !isfinite(v[u]);
      }
      if (__any_sync(kFullMask, v_bad)) {
        // The rows that see it become NaN; no row multiplies it.
#pragma unroll
        for (int r = 0; r < kR; ++r) bad[r] = bad[r] || ((seen >> r) & 1u) != 0;
        continue;
      }
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const float pr = __shfl_sync(kFullMask, s[r], jj);
#pragma unroll
        for (int u = 0; u < kC; ++u) acc[r][u] = fmaf(pr, v[u], acc[r][u]);
      }
    }
  }

  // Merge the warps. Their K tiles are dead; the merge buffers reuse them.
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    l[r] = WarpSum(l[r]);
    bad[r] = __any_sync(kFullMask, bad[r]);
  }
  __syncthreads();
  float* sO = reinterpret_cast<float*>(smem + Traits::kOffK);  // [kW, kR, kD]
  float* sM = sO + kW * kR * kD;                               // [kW, kR]
  float* sL = sM + kW * kR;                                    // [kW, kR]
  int* sBad = reinterpret_cast<int*>(sL + kW * kR);            // [kW, kR]
#pragma unroll
  for (int r = 0; r < kR; ++r) {
#pragma unroll
    for (int u = 0; u < kC; ++u) sO[(warp * kR + r) * kD + lane + 32 * u] = acc[r][u];
    if (lane == 0) {
      sM[warp * kR + r] = m[r];
      sL[warp * kR + r] = l[r];
      sBad[warp * kR + r] = bad[r] ? 1 : 0;
    }
  }
  __syncthreads();

  for (int r = warp; r < kR; r += kW) {
    const int64_t row = r0 + r;
    if (row >= r1) break;  // uniform across the warp
    const int64_t i = row / group, h = g * group + row % group;
    float row_max = kNegInf;
    bool row_bad = false;
#pragma unroll
    for (int w = 0; w < kW; ++w) {
      row_max = fmaxf(row_max, sM[w * kR + r]);
      row_bad = row_bad || sBad[w * kR + r] != 0;
    }
    float weight[kW];
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kW; ++w) {
      const float mw = sM[w * kR + r];
      weight[w] = mw == kNegInf ? 0.0f : exp2f(mw - row_max);
      total += sL[w * kR + r] * weight[w];
    }
    RowFinish fin = FinishRow(row_max, total, row_bad);
    if (p.num_splits == 1) fin = WithSink(fin, SinkOf(p, h));  // else the combine's
    const RowOutput out(p, split, b, h, i);
    for (int c = lane; c < p.value_dim; c += 32) {
      float o = 0.0f;
#pragma unroll
      for (int w = 0; w < kW; ++w) o += weight[w] * sO[(w * kR + r) * kD + c];
      out.Store(c, o * fin.inv);
    }
    if (lane == 0) out.StoreLse(fin.lse);
  }
}

template <int kD>
cudaError_t LaunchDecode(const FlashParams& p, cudaStream_t stream) {
  using Traits = DecodeTraits<kD>;
  // The shared-memory opt-in, once per instance and device.
  static PerDeviceOnce smem_opt_in;
  const cudaError_t attr =
      OptInSharedMemory(smem_opt_in, FlashDecodeKernel<Traits>, Traits::kSmemBytes);
  if (attr != cudaSuccess) return attr;
  const int64_t row_tiles = (p.rows_per_kv_head + Traits::kRows - 1) / Traits::kRows;
  const int64_t blocks_x = row_tiles * p.num_splits;
  if (blocks_x > 0x7fffffff) return cudaErrorInvalidConfiguration;
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(p.num_kv_heads),
                  static_cast<unsigned>(p.batch));
  FlashDecodeKernel<Traits><<<grid, Traits::kNThreads, Traits::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchFlashDecode(const FlashParams& p, int bucket, cudaStream_t stream) {
  switch (bucket) {
    case 32:
      return LaunchDecode<32>(p, stream);
    case 64:
      return LaunchDecode<64>(p, stream);
    case 128:
      return LaunchDecode<128>(p, stream);
    case 256:
      return LaunchDecode<256>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace cuda
}  // namespace attnkit
