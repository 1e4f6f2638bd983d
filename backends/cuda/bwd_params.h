// The backward pass of the "cuda" backend: the parameters its kernels
// consume (BwdParams), the host-side plan (head-dim bucket, tile shapes, key
// blocks, dQ chunks, workspace layout) and the two rules the kernels share
// with the host tests: which (row tile, key block) steps run
// (BwdStepVisible) and the per-pair gradient arithmetic (PairGradOf). Plain
// header for host C++ and nvcc (no CUDA or Abseil types); the host planning
// (arguments to BwdParams, chunks, workspace) is bwd_plan.h.
//
// Algorithm (FlashAttention-2 order, flash_bwd_kernel.cuh):
//   1. D[b, h, i] = dO_i . O_i (f32), and dBias zeroed (BwdDotKernel);
//      with sinks, dL/dsinks from D and the lse (BwdSinkGradKernel).
//   2. One block per (key block, KV head, batch): K and V of the block in
//      shared memory, dK and dV accumulated in registers over every packed
//      row tile (query i, head of the group) that can see the block; each
//      step recomputes S, P = exp(S - lse), dP = dO V^T, dS = P (dP - D)
//      and writes the block's dQ partial of the tile's rows into a
//      workspace slice [key block - chunk begin, B, H, Tq, d].
//   3. dQ = scale * sum over key blocks, in key-block order, of the partials
//      of the blocks whose step ran for the row (BwdDqSumKernel). When the
//      partials of every key block do not fit the workspace budget the key
//      blocks run in chunks and an f32 accumulator [B, H, Tq, d] carries the
//      running sum (the same additions in the same order: chunking does not
//      change a bit).
// No atomics anywhere: every output element is written by one thread, and
// every sum runs in a fixed order, so the gradients are deterministic.
#ifndef ATTNKIT_BACKENDS_CUDA_BWD_PARAMS_H_
#define ATTNKIT_BACKENDS_CUDA_BWD_PARAMS_H_

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backends/cuda/flash_params.h"
#include "backends/cuda/tile_schedule.h"
#include "core/mask.h"

namespace attnkit {
namespace cuda {

// Head dims compiled for the backward pass; a problem runs in the smallest
// bucket >= d, Q, K, V and dO zero-padded to it in shared memory. Every
// dtype computes in f32 on the CUDA cores, so one instance per bucket
// serves f32, f16 and bf16 alike.
constexpr int kBwdHeadDimBuckets[] = {64, 128, 256};
constexpr int kBwdMaxHeadDim = 256;
constexpr int kBwdThreads = 256;  // eight warps
constexpr int kBwdWarps = kBwdThreads / 32;
// Packed query rows (query i, head of the group: row = i * group + j, as the
// forward packs them) per step.
constexpr int kBwdBlockM = 32;
// The budget for the dQ partials and accumulator in the workspace (f32);
// beyond it the key blocks run in chunks.
constexpr size_t kBwdWorkspaceBudgetBytes = size_t{512} << 20;

// The bucket for head dim d, or 0 when d is outside 1..kBwdMaxHeadDim.
constexpr int BwdHeadDimBucket(int d) {
  if (d < 1) return 0;
  for (int b : kBwdHeadDimBuckets) {
    if (d <= b) return b;
  }
  return 0;
}

// Keys per block: 64, or 32 at d = 256 (shared memory).
constexpr int BwdBlockN(int bucket) { return bucket <= 128 ? 64 : 32; }

constexpr int BwdAlignUp(int x, int a) { return (x + a - 1) / a * a; }

// Shared-memory layout of one bucket (f32 tiles, leading dims padded by one
// word so that lanes walking a column hit distinct banks).
template <int kHeadDim_>
struct BwdTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBwdBlockM;
  static constexpr int kBlockN = BwdBlockN(kHeadDim);
  static constexpr int kLdD = kHeadDim + 1;  // sK, sV, sQ, sdO
  static constexpr int kLdN = kBlockN + 1;   // sP, sdX
  static constexpr int kOffK = 0;
  static constexpr int kOffV = BwdAlignUp(kOffK + kBlockN * kLdD * 4, 128);
  static constexpr int kOffQ = BwdAlignUp(kOffV + kBlockN * kLdD * 4, 128);
  static constexpr int kOffDo = BwdAlignUp(kOffQ + kBlockM * kLdD * 4, 128);
  static constexpr int kOffP = BwdAlignUp(kOffDo + kBlockM * kLdD * 4, 128);
  static constexpr int kOffDx = BwdAlignUp(kOffP + kBlockM * kLdN * 4, 128);
  // Per row of the step: lse, D (f32), then query i, head h, visible key
  // range begin and end (i64; i = -1 for a row past the tile's end).
  static constexpr int kOffRows = BwdAlignUp(kOffDx + kBlockM * kLdN * 4, 128);
  static constexpr int kSmemBytes = BwdAlignUp(kOffRows + kBlockM * (2 * 4 + 4 * 8), 128);
  // Register tiles: per thread, S and dP of kRowsPerThread rows of one key
  // column; dK and dV of kKeysPerThread keys x kColsPerThread columns; dQ of
  // kDqRowsPerThread rows x kColsPerThread columns.
  static constexpr int kRowsPerThread = kBlockM * kBlockN / kBwdThreads;
  static constexpr int kKeysPerThread = kBlockN / kBwdWarps;
  static constexpr int kColsPerThread = kHeadDim / 32;
  static constexpr int kDqRowsPerThread = kBlockM / kBwdWarps;

  static_assert(kHeadDim % 32 == 0, "lanes own head-dim columns lane + 32u");
  static_assert(kBwdThreads % kBlockN == 0, "whole thread groups per key column");
  static_assert(kBlockM * kBlockN % kBwdThreads == 0, "S tile evenly over the threads");
  static_assert(kBlockN % kBwdWarps == 0 && kBlockM % kBwdWarps == 0, "rows evenly over warps");
};

// The shared memory of a bucket's kernel, 0 for a bucket not compiled.
constexpr int BwdSmemBytes(int bucket) {
  return bucket == 64    ? BwdTraits<64>::kSmemBytes
         : bucket == 128 ? BwdTraits<128>::kSmemBytes
         : bucket == 256 ? BwdTraits<256>::kSmemBytes
                         : 0;
}

struct BwdParams {
  // The forward's tensors and shape: q, k, v, o, lse, kv_lengths,
  // blocked_mask, bias, sinks, ALiBi slopes with their strides and types,
  // scale, softcap, mask (MakeFlashParams; num_splits = 1, never paged,
  // int8 or fp8 here).
  FlashParams fwd;
  // dO: o's shape and type (fwd.q_type). dq: q's shape and type; dk, dv:
  // k's shape and type (fwd.kv_type). dbias f32 [B, H, Tq, Tk], or null.
  const void* d_o = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  float* dbias = nullptr;
  Strides4 do_stride, dq_stride, dk_stride, dv_stride, dbias_stride;
  // dL/dsinks f32 [H] at dsinks[h * dsinks_stride] (core/sinks_grad.h), or
  // null: with fwd.sinks, written by BwdSinkGradKernel after D.
  float* dsinks = nullptr;
  int64_t dsinks_stride = 0;

  // From the plan (BwdPlan): tile shape and the key blocks over Tk.
  int block_m = kBwdBlockM;
  int block_n = 64;
  int64_t key_blocks = 1;

  // Workspace (f32, device): D [B, H, Tq]; the dQ partials of one chunk
  // [chunk blocks, B, H, Tq, d]; the running dQ sum [B, H, Tq, d] when the
  // key blocks run in more than one chunk, else null.
  float* dsum = nullptr;
  float* dq_partial = nullptr;
  int64_t partial_slice = 0;  // elements from one key block's partials to the next's
  float* dq_acc = nullptr;
  // The key blocks of the current launch: [chunk_begin, chunk_end).
  int64_t chunk_begin = 0, chunk_end = 0;
};

// Does the step (packed row tile `row_tile`, key block `key_block`) run? It
// runs unless the forward's ClassifyTile calls the tile's queries against
// the block's keys hidden. The main kernel skips the steps that do not run
// and the dQ sum reads the partials of exactly those that do, so both ask
// this one function.
ATTNKIT_HOST_DEVICE inline bool BwdStepVisible(const BwdParams& p, int64_t kv_length,
                                               int64_t row_tile, int64_t key_block) {
  const int64_t rows = p.fwd.rows_per_kv_head;
  const int64_t r0 = row_tile * p.block_m;
  if (r0 >= rows) return false;
  const int64_t r1 = r0 + p.block_m < rows ? r0 + p.block_m : rows;
  const QuerySpan q = QueriesOfRows(r0, r1, p.fwd.group_size);
  const int64_t k0 = key_block * p.block_n;
  return ClassifyTile(p.fwd.mask, kv_length, q.first, q.end, k0, k0 + p.block_n) !=
         TileVisibility::kHidden;
}

// Offset of element c of query row (b, h, i) in a [.., B, H, Tq, d] f32
// slice of the workspace (the dQ partials and accumulator).
ATTNKIT_HOST_DEVICE inline int64_t BwdRowOffset(const BwdParams& p, int64_t b, int64_t h,
                                                int64_t i) {
  return ((b * p.fwd.num_heads + h) * p.fwd.q_len + i) * p.fwd.head_dim;
}

// The gradients of one pair (query row, key) from the recomputed products.
struct PairGrad {
  float p;   // P = exp(s - lse), 0 where blocked
  float ds;  // dS = P (dP - D) = dBias, 0 where blocked
  float dx;  // dS times the softcap derivative: the factor of dQ and dK
};

// sech^2(u) = 1 - tanh^2(u), the soft-cap's derivative at u = x / c, as
// 4 e / (1 + e)^2 with e = exp(-2 |u|): 1 - t * t from a rounded tanh
// cancels once t is within a few ulps of +-1 (issue 33); this keeps a few
// ulps of relative error for every u. NaN stays NaN.
ATTNKIT_HOST_DEVICE inline float SoftcapDerivative(float u) {
  const float e = expf(-2.0f * fabsf(u));
  const float one_plus_e = 1.0f + e;
  return 4.0f * e / (one_plus_e * one_plus_e);
}

// qk = q . k (unscaled), dp = dO . v, bias (0 without one), lse and D of the
// row, alibi the pair's ALiBi term (AlibiTermOf; 0 without ALiBi), added
// after the soft-cap as the forward adds it (a constant: the slopes get no
// gradient and dS is unchanged); `visible` is the structured mask, padding
// and dense mask. A -inf bias or a -inf lse (the row sees nothing) blocks
// the pair too: then all three are exactly 0, whatever qk and dp hold.
// With sinks the forward's lse includes the sink, so P here is already the
// weight the sink leaves the keys.
ATTNKIT_HOST_DEVICE inline PairGrad PairGradOf(bool visible, float qk, float dp, float bias,
                                               float lse, float dsum, float scale, float softcap,
                                               float alibi = 0.0f) {
  PairGrad g{0.0f, 0.0f, 0.0f};
  if (!visible || bias == -INFINITY || lse == -INFINITY) return g;
  float x = qk * scale;
  float dcap = 1.0f;  // d(c tanh(x / c)) / dx
  if (softcap > 0.0f) {
    const float u = x / softcap;
    x = softcap * tanhf(u);
    dcap = SoftcapDerivative(u);
  }
  x += alibi;
  g.p = expf(x + bias - lse);
  g.ds = g.p * (dp - dsum);
  g.dx = g.ds * dcap;
  return g;
}

// Row n = b * Tq + i's term of head h's sink gradient (core/sinks_grad.h:
// dL/dsink_h = -sum over rows of P_sink D, P_sink = exp(sink_h - lse)),
// from the forward's lse and D (p.dsum). BwdSinkGradKernel gives lane l the
// rows n = l, l + 32, ... in order and sums the lanes with WarpSum's tree;
// bwd_plan_test emulates that order with this same function.
ATTNKIT_HOST_DEVICE inline float SinkGradTerm(const BwdParams& p, int64_t h, int64_t n,
                                              float sink) {
  const FlashParams& f = p.fwd;
  const int64_t b = n / f.q_len, i = n % f.q_len;
  const float lse = f.lse[b * f.lse_stride_b + h * f.lse_stride_h + i * f.lse_stride_t];
  return expf(sink - lse) * p.dsum[(b * f.num_heads + h) * f.q_len + i];
}

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_BWD_PARAMS_H_
