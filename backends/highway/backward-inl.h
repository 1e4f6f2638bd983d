// Per-target flash attention backward (FlashAttention-2 order): a work item
// is one key-block chunk of one (batch, kv head); for each key block it holds
// K, Kt, Vt and the dK, dV accumulators, and streams the query tiles of every
// head of the group that see the block, recomputing P from the forward's lse.
// dQ accumulates in an f32 buffer the item owns; with few (batch, kv head)
// pairs the key blocks are cut into chunks (a count that depends on the shape
// only), each writing a dQ partial that a second pass sums in chunk order.
// Included once per target (toggle guard).

#if defined(ATTNKIT_BACKENDS_HIGHWAY_BACKWARD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_BACKENDS_HIGHWAY_BACKWARD_INL_H_
#undef ATTNKIT_BACKENDS_HIGHWAY_BACKWARD_INL_H_
#else
#define ATTNKIT_BACKENDS_HIGHWAY_BACKWARD_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "backends/highway/backward.h"
#include "backends/highway/backward_kernels-inl.h"
#include "backends/highway/flash_params.h"
#include "backends/highway/microkernels-inl.h"
#include "backends/highway/workspace.h"
#include "core/alibi.h"
#include "core/mask.h"
#include "core/status_macros.h"
#include "hwy/highway.h"
#include "platform/thread_pool.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {

// Below this many (batch, kv head) pairs the key blocks are chunked so that
// about this many items exist (the forward's split-K threshold).
constexpr int64_t kBwdMinItems = 16;
// A chunk holds at least this many key blocks: each chunk's dQ partial is
// zeroed, accumulated from memory and merged, costing about as much as the
// arithmetic of a few blocks (MQA, T = 2048: 16 chunks of 2 blocks took 10%
// longer single-threaded than 8 of 4).
constexpr int64_t kBwdMinBlocksPerChunk = 4;
constexpr size_t kBwdAlignFloats = 16;   // 64-byte sub-buffer alignment
constexpr int64_t kBwdMaxKeyBlock = 64;  // PlanBackward's largest key block

inline int64_t BwdCeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t BwdRoundUp(int64_t a, int64_t b) { return BwdCeilDiv(a, b) * b; }

// The query rows [q_begin, q_end) (tile-aligned) whose dQ a chunk of one
// batch entry touches, and where its partials live in the shared area.
struct ChunkRows {
  int64_t q_begin = 0, q_end = 0;
  size_t partial_at = 0;  // floats into the shared area (chunks > 1)
};

struct BwdPlan {
  int64_t q_tile, q_tiles;        // query positions per tile, tiles per head
  int64_t key_block, key_blocks;  // keys per block, blocks over Tk
  int64_t key_pad;                // block key counts are padded to this
  int64_t dp;                     // head_dim padded to Lanes: Q, K, dQ, dK
  int64_t dvp;                    // value_dim padded to Lanes: V, O, dO, dV
  int64_t chunks, blocks_per_chunk, items;
  std::vector<ChunkRows> rows;  // [batch, chunks]
  // Per-thread scratch offsets, in floats.
  size_t off_k, off_v, off_kt, off_vt, off_dk, off_dv, off_q, off_do, off_s, off_dps, off_add,
      off_ds, off_dq;
  size_t scratch_floats;
  size_t off_dsum;  // shared: D [B, H, Tq], then the dQ partials
  size_t shared_floats;
};

// Query tiles [0, q_tiles) of one head against keys [k0, k0 + nk): is tile
// `qt` hidden from the whole block (the forward's ClassifyTile)?
inline bool TileHidden(const FlashParams& p, const BwdPlan& t, int64_t kv_length, int64_t qt,
                       int64_t k0, int64_t nk) {
  const int64_t q0 = qt * t.q_tile;
  const int64_t nq = std::min(t.q_tile, p.q_len - q0);
  return ClassifyTile(p.mask, kv_length, q0, q0 + nq, k0, k0 + nk) == TileVisibility::kHidden;
}

inline BwdPlan PlanBackward(const FlashParams& p) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  BwdPlan t;
  t.dp = BwdRoundUp(p.head_dim, N);
  t.dvp = BwdRoundUp(p.value_dim, N);
  // Each step's operands ([64, dp] f32: 16 KiB at d = 64) stay in L1/L2;
  // large head dims take smaller blocks.
  t.key_pad = std::max<int64_t>(kGradTileM, N);
  t.key_block =
      std::min(kBwdMaxKeyBlock, BwdRoundUp(t.dp <= 128 ? 64 : (t.dp <= 256 ? 32 : 16), t.key_pad));
  t.q_tile = t.dp <= 128 ? 64 : 32;
  t.q_tile = std::min(t.q_tile, BwdRoundUp(p.q_len, kGradTileM));
  t.q_tiles = BwdCeilDiv(p.q_len, t.q_tile);
  t.key_blocks = BwdCeilDiv(p.kv_len, t.key_block);
  const int64_t pairs = p.batch * p.num_kv_heads;
  // The shape alone sets the chunks (never the thread count): the sums, and
  // so the gradients, are the same bit for bit whatever the threads.
  t.chunks = pairs >= kBwdMinItems
                 ? 1
                 : std::min(t.key_blocks / kBwdMinBlocksPerChunk, BwdCeilDiv(kBwdMinItems, pairs));
  t.chunks = std::max<int64_t>(1, t.chunks);
  t.blocks_per_chunk = BwdCeilDiv(t.key_blocks, t.chunks);
  t.chunks = BwdCeilDiv(t.key_blocks, t.blocks_per_chunk);  // no empty chunk
  t.items = pairs * t.chunks;

  t.off_dsum = 0;
  size_t shared = static_cast<size_t>(BwdRoundUp(p.batch * p.num_heads * p.q_len, kBwdAlignFloats));
  t.rows.resize(static_cast<size_t>(p.batch * t.chunks));
  int64_t max_rows = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t kv_length = p.KvLength(b);
    for (int64_t c = 0; c < t.chunks; ++c) {
      ChunkRows& r = t.rows[static_cast<size_t>(b * t.chunks + c)];
      const int64_t kb_end = std::min(t.key_blocks, (c + 1) * t.blocks_per_chunk);
      int64_t first = t.q_tiles, last = -1;
      for (int64_t kb = c * t.blocks_per_chunk; kb < kb_end; ++kb) {
        const int64_t k0 = kb * t.key_block;
        const int64_t nk = std::min(t.key_block, p.kv_len - k0);
        for (int64_t qt = 0; qt < t.q_tiles; ++qt) {
          if (TileHidden(p, t, kv_length, qt, k0, nk)) continue;
          first = std::min(first, qt);
          last = std::max(last, qt);
        }
      }
      if (last >= first) {
        r.q_begin = first * t.q_tile;
        r.q_end = (last + 1) * t.q_tile;
      }
      max_rows = std::max(max_rows, r.q_end - r.q_begin);
      if (t.chunks > 1) {
        r.partial_at = shared;
        // [G, group, q_end - q_begin, dp] for this (b, chunk).
        shared += static_cast<size_t>(p.num_heads * (r.q_end - r.q_begin) * t.dp);
      }
    }
  }
  t.shared_floats = shared;

  const int64_t kbk = t.key_block, dp = t.dp, dvp = t.dvp, qt = t.q_tile;
  size_t off = 0;
  auto take = [&off](int64_t floats) {
    const size_t at = off;
    off += static_cast<size_t>(BwdRoundUp(floats, kBwdAlignFloats));
    return at;
  };
  t.off_k = take(kbk * dp);
  t.off_v = take(kbk * dvp);
  t.off_kt = take(p.head_dim * kbk);
  t.off_vt = take(p.value_dim * kbk);
  t.off_dk = take(kbk * dp);
  t.off_dv = take(kbk * dvp);
  t.off_q = take(qt * std::max(dp, dvp));  // StoreQueryGrads' row too
  t.off_do = take(qt * dvp);
  t.off_s = take(qt * kbk);
  t.off_dps = take(qt * kbk);
  t.off_add = take(kbk);
  t.off_ds = take(kbk);
  // chunks == 1: the item's dQ accumulator [group, q rows, dp] is per thread.
  t.off_dq = take(t.chunks == 1 ? p.group * max_rows * dp : 0);
  t.scratch_floats = std::max<size_t>(off, static_cast<size_t>(2 * dvp));  // D pass: 2 rows
  return t;
}

// Row `t` of a [B, heads, T, d] view of any float dtype as f32 [dp]
// (zero-padded), times `scale`.
inline void LoadGradRow(const TensorView& v, int64_t b, int64_t h, int64_t i, int64_t d, int64_t dp,
                        float scale, float* HWY_RESTRICT out) {
  const char* src = static_cast<const char*>(v.data) +
                    v.Offset(b, h, i, 0) * static_cast<int64_t>(DTypeSize(v.dtype));
  LoadRowAsF32(src, v.dtype, v.strides[3], static_cast<size_t>(d), static_cast<size_t>(dp), out);
  if (scale != 1.0f) {
    for (int64_t c = 0; c < d; ++c) out[c] *= scale;
  }
}

// Stores row [d] of f32 values times `scale` into row (b, h, i) of view `v`,
// rounding to its dtype.
inline void StoreGradRow(const TensorView& v, int64_t b, int64_t h, int64_t i, int64_t d,
                         float scale, const float* HWY_RESTRICT row) {
  const int64_t base = v.Offset(b, h, i, 0);
  const int64_t cs = v.strides[3];
  if (v.dtype == DType::kF32 && cs == 1) {
    float* out = static_cast<float*>(v.data) + base;
    for (int64_t c = 0; c < d; ++c) out[c] = scale * row[c];
    return;
  }
  for (int64_t c = 0; c < d; ++c) StoreFromF32(v.data, v.dtype, base + c * cs, scale * row[c]);
}

// D[b, h, i] = dO . O in f32 for the rows of (b, h); zeroes dbias there.
inline void RowDotPass(const FlashParams& p, const FlashGradParams& g, const BwdPlan& t, int64_t bh,
                       float* HWY_RESTRICT dsum, float* HWY_RESTRICT scratch) {
  const int64_t b = bh / p.num_heads, h = bh % p.num_heads;
  float* HWY_RESTRICT o = scratch;
  float* HWY_RESTRICT d_o = scratch + t.dvp;
  for (int64_t i = 0; i < p.q_len; ++i) {
    LoadGradRow(p.o, b, h, i, p.value_dim, t.dvp, 1.0f, o);
    LoadGradRow(g.d_o, b, h, i, p.value_dim, t.dvp, 1.0f, d_o);
    dsum[bh * p.q_len + i] = DotRow(o, d_o, static_cast<size_t>(t.dvp));
    if (g.dbias != nullptr) {
      float* row = g.dbias + g.dbias_view.Offset(b, h, i, 0);
      const int64_t cs = g.dbias_view.strides[3];
      for (int64_t j = 0; j < p.kv_len; ++j) row[j * cs] = 0.0f;
    }
  }
}

// add[j] = bias (or 0) plus the ALiBi term, -inf where the pair (b, h, i,
// k0 + j) is blocked, for j < nk; 0 up to nkp (masked by the key range
// anyway). A non-finite ALiBi term gives NaN (the row is a NaN row; the
// pair stays visible, as the forward's rule has it).
inline void PairInputs(const FlashParams& p, int64_t b, int64_t h, int64_t i, int64_t k0,
                       int64_t nk, int64_t nkp, float* HWY_RESTRICT add) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  const float* bias = p.bias != nullptr ? p.bias + p.bias_view.Offset(b, h, i, k0) : nullptr;
  const int64_t bs = p.bias != nullptr ? p.bias_view.strides[3] : 0;
  const uint8_t* blocked =
      p.blocked != nullptr ? p.blocked + p.blocked_view.Offset(b, h, i, k0) : nullptr;
  const int64_t ms = p.blocked != nullptr ? p.blocked_view.strides[3] : 0;
  const int64_t diag = Diagonal(p.mask, i, p.KvLength(b));
  const float slope = p.alibi_slopes != nullptr ? p.AlibiSlope(h) : 0.0f;
  for (int64_t j = 0; j < nk; ++j) {
    float x = bias != nullptr ? bias[j * bs] : 0.0f;
    if (p.alibi_slopes != nullptr && x != kNegInf) {
      const float term = AlibiTerm(slope, diag, k0 + j);
      x = std::isfinite(term) ? x + term : std::numeric_limits<float>::quiet_NaN();
    }
    add[j] = blocked != nullptr && blocked[j * ms] != 0 ? kNegInf : x;
  }
  for (int64_t j = nk; j < nkp; ++j) add[j] = 0.0f;
}

// Key rows [k0, k0 + nk) of view v for (b, g) as f32 [nkp, dp] (zero rows
// past nk) and transposed [d, ldt] (zero columns past nk).
inline void LoadKeyBlock(const TensorView& v, int64_t b, int64_t g, int64_t k0, int64_t nk,
                         int64_t nkp, int64_t d, int64_t dp, int64_t ldt, float* HWY_RESTRICT rows,
                         float* HWY_RESTRICT cols) {
  for (int64_t j = 0; j < nk; ++j) LoadGradRow(v, b, g, k0 + j, d, dp, 1.0f, rows + j * dp);
  std::fill(rows + nk * dp, rows + nkp * dp, 0.0f);
  for (int64_t c = 0; c < d; ++c) {
    float* HWY_RESTRICT col = cols + c * ldt;
    for (int64_t j = 0; j < nkp; ++j) col[j] = rows[j * dp + c];
  }
}

// Zeroes the f32 copies (rows and transposed columns) of the block's K and V
// rows [k0, k0 + nk) that no query of any head of kv head g sees (outside
// every row's structured range, or dense-blocked for every row: the forward
// never reads them, and they may hold anything, NaN included;
// harness/poison_blocked.h draws such inputs) and of those that hold a NaN
// or Inf: 0 * NaN must not reach dQ = dX K or dP = dO V^T of a row that does
// not see the key.
// K rows are dp floats apart, V rows dvp.
inline void ZeroUnseenKeys(const FlashParams& p, int64_t b, int64_t g, int64_t k0, int64_t nk,
                           int64_t kv_length, const KeyRange& seen_by_mask, int64_t dp, int64_t dvp,
                           int64_t ldt, float* HWY_RESTRICT k_rows, float* HWY_RESTRICT k_cols,
                           float* HWY_RESTRICT v_rows, float* HWY_RESTRICT v_cols) {
  char seen[kBwdMaxKeyBlock] = {};
  if (p.blocked == nullptr) {
    const int64_t lo = std::max(seen_by_mask.begin, k0), hi = std::min(seen_by_mask.end, k0 + nk);
    for (int64_t j = lo; j < hi; ++j) seen[j - k0] = 1;
  } else {
    for (int64_t i = 0; i < p.q_len; ++i) {
      const KeyRange r = VisibleKeys(p.mask, i, kv_length);
      const int64_t begin = std::max(r.begin, k0) - k0, end = std::min(r.end, k0 + nk) - k0;
      for (int64_t h = g * p.group; h < (g + 1) * p.group && begin < end; ++h) {
        const uint8_t* mask = p.blocked + p.blocked_view.Offset(b, h, i, k0);
        const int64_t ms = p.blocked_view.strides[3];
        for (int64_t j = begin; j < end; ++j) seen[j] |= mask[j * ms] == 0;
      }
    }
  }
  auto finite = [](const float* row, int64_t n) {
    for (int64_t c = 0; c < n; ++c) {
      if (!std::isfinite(row[c])) return false;
    }
    return true;
  };
  for (int64_t j = 0; j < nk; ++j) {
    // A K or V row some query sees but that holds a NaN or Inf is zeroed too:
    // every row that sees it is a NaN row (its lse is NaN, so its P and dS
    // are NaN wherever it sees a key, with or without this row's values),
    // and the rows that do not see it must not get 0 * NaN.
    const bool zero_k = !seen[j] || !finite(k_rows + j * dp, dp);
    const bool zero_v = !seen[j] || !finite(v_rows + j * dvp, dvp);
    if (zero_k) {
      std::fill(k_rows + j * dp, k_rows + (j + 1) * dp, 0.0f);
      for (int64_t c = 0; c < p.head_dim; ++c) k_cols[c * ldt + j] = 0.0f;  // [d, ldt]
    }
    if (zero_v) {
      std::fill(v_rows + j * dvp, v_rows + (j + 1) * dvp, 0.0f);
      for (int64_t c = 0; c < p.value_dim; ++c) v_cols[c * ldt + j] = 0.0f;  // [dv, ldt]
    }
  }
}

// The keys some query row sees through the structured mask and kv_length:
// one interval (the rows' ranges move monotonically with the row and
// overlap or touch), the same for every key block and head of a batch entry.
inline KeyRange KeysSeenByMask(const FlashParams& p, int64_t kv_length) {
  KeyRange seen{kv_length, 0};
  for (int64_t i = 0; i < p.q_len; ++i) {
    const KeyRange r = VisibleKeys(p.mask, i, kv_length);
    if (r.empty()) continue;
    seen.begin = std::min(seen.begin, r.begin);
    seen.end = std::max(seen.end, r.end);
  }
  return seen;
}

// One (query tile, key block) step for head h: updates dk [nkp, dp], dv
// [nkp, dvp] and dq [nqp, dp] (the tile's rows of the dQ accumulator).
inline void BackwardStep(const FlashParams& p, const FlashGradParams& g, const BwdPlan& t,
                         const float* HWY_RESTRICT dsum_all, int64_t b, int64_t h, int64_t q0,
                         int64_t nq, int64_t k0, int64_t nk, int64_t nkp, float* scratch,
                         float* HWY_RESTRICT dq) {
  const int64_t d = p.head_dim, dp = t.dp, dv_cols = p.value_dim, dvp = t.dvp;
  const int64_t ld = t.key_block;
  const int64_t nqp = BwdRoundUp(nq, kGradTileM);
  float* HWY_RESTRICT k = scratch + t.off_k;
  float* HWY_RESTRICT kt = scratch + t.off_kt;
  float* HWY_RESTRICT vt = scratch + t.off_vt;
  float* HWY_RESTRICT dk = scratch + t.off_dk;
  float* HWY_RESTRICT dv = scratch + t.off_dv;
  float* HWY_RESTRICT q = scratch + t.off_q;
  float* HWY_RESTRICT d_o = scratch + t.off_do;
  float* HWY_RESTRICT s = scratch + t.off_s;
  float* HWY_RESTRICT dps = scratch + t.off_dps;
  float* HWY_RESTRICT add = scratch + t.off_add;
  float* HWY_RESTRICT ds = scratch + t.off_ds;
  // Q pre-scaled: S = scale q . k directly, and dK = sum dX (scale q). A
  // row that sees no key (lse -inf) is never read by the forward and may
  // hold anything: it is zeroed, so 0 * NaN cannot reach dK.
  const float kNoKeys = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < nq; ++r) {
    float* qr = q + r * dp;
    if (p.lse[p.lse_view.Offset(b, h, q0 + r)] == kNoKeys) {
      std::fill(qr, qr + dp, 0.0f);
    } else {
      LoadGradRow(p.q, b, h, q0 + r, d, dp, p.scale, qr);
      // A Q row with a NaN or Inf is a NaN row (lse NaN: its P is NaN where
      // it sees a key) or, with a sink (whose lse is then the sink's), a row
      // that sees no key; zeroed, so that 0 * NaN cannot reach the dK of
      // keys it does not see.
      if (!std::all_of(qr, qr + dp, [](float x) { return std::isfinite(x); })) {
        std::fill(qr, qr + dp, 0.0f);
      }
    }
    LoadGradRow(g.d_o, b, h, q0 + r, dv_cols, dvp, 1.0f, d_o + r * dvp);
  }
  std::fill(q + nq * dp, q + nqp * dp, 0.0f);
  std::fill(d_o + nq * dvp, d_o + nqp * dvp, 0.0f);
  const size_t udp = static_cast<size_t>(dp), udvp = static_cast<size_t>(dvp);
  const size_t uld = static_cast<size_t>(ld);
  BroadcastMatMul(q, udp, 1, kt, uld, static_cast<size_t>(d), static_cast<size_t>(nqp),
                  static_cast<size_t>(nkp), s, uld, /*accumulate=*/false);
  BroadcastMatMul(d_o, udvp, 1, vt, uld, static_cast<size_t>(dv_cols), static_cast<size_t>(nqp),
                  static_cast<size_t>(nkp), dps, uld, /*accumulate=*/false);
  const int64_t kv_length = p.KvLength(b);
  const bool per_pair = p.bias != nullptr || p.blocked != nullptr || p.alibi_slopes != nullptr;
  const float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < nqp; ++r) {
    GradRow row{0.0f, 0.0f, 0.0f, 0.0f, nullptr};
    const int64_t i = q0 + r;
    if (r < nq) {
      const float lse = p.lse[p.lse_view.Offset(b, h, i)];
      row.lse = lse == kNegInf ? 0.0f : lse;  // nothing visible: every lane is masked
      row.dsum = dsum_all[(b * p.num_heads + h) * p.q_len + i];
      const KeyRange range = VisibleKeys(p.mask, i, kv_length);
      row.kb = static_cast<float>(std::min(std::max<int64_t>(range.begin - k0, 0), nk));
      row.ke = static_cast<float>(std::min(std::max<int64_t>(range.end - k0, 0), nk));
      if (per_pair) {
        PairInputs(p, b, h, i, k0, nk, nkp, add);
        row.add = add;
      }
    }
    const bool want_ds = g.dbias != nullptr && r < nq;
    SoftmaxGradRow(s + r * ld, dps + r * ld, static_cast<size_t>(nkp), row, p.softcap,
                   want_ds ? ds : nullptr);
    if (want_ds) {
      float* out = g.dbias + g.dbias_view.Offset(b, h, i, k0);
      const int64_t cs = g.dbias_view.strides[3];
      for (int64_t j = 0; j < nk; ++j) out[j * cs] = ds[j];
    }
  }
  // dV += P^T dO, dK += dX^T Q: A is P / dX read down its columns.
  const size_t depth = static_cast<size_t>(nq);
  BroadcastMatMul(s, 1, uld, d_o, udvp, depth, static_cast<size_t>(nkp), udvp, dv, udvp, true);
  BroadcastMatMul(dps, 1, uld, q, udp, depth, static_cast<size_t>(nkp), udp, dk, udp, true);
  // dQ += dX K (times scale at the store).
  BroadcastMatMul(dps, uld, 1, k, udp, static_cast<size_t>(nk), static_cast<size_t>(nqp), udp, dq,
                  udp, true);
}

// Item `item` = ((b * G + g) * chunks + chunk): every key block of the chunk
// against every query tile of the group's heads that sees it. dq_acc is the
// item's dQ accumulator [group, rows.q_end - rows.q_begin, dp], zeroed here.
inline void BackwardItem(const FlashParams& p, const FlashGradParams& g, const BwdPlan& t,
                         int64_t item, const float* HWY_RESTRICT dsum, float* scratch,
                         float* HWY_RESTRICT dq_acc) {
  const int64_t chunk = item % t.chunks;
  const int64_t bg = item / t.chunks;
  const int64_t b = bg / p.num_kv_heads, kvh = bg % p.num_kv_heads;
  const ChunkRows& rows = t.rows[static_cast<size_t>(b * t.chunks + chunk)];
  const int64_t n_rows = rows.q_end - rows.q_begin;
  const int64_t d = p.head_dim, dp = t.dp, dv_cols = p.value_dim, dvp = t.dvp;
  const int64_t ld = t.key_block;
  std::fill(dq_acc, dq_acc + p.group * n_rows * dp, 0.0f);
  const int64_t kv_length = p.KvLength(b);
  // Once per item, not per key block (ZeroUnseenKeys).
  const KeyRange seen_by_mask = KeysSeenByMask(p, kv_length);
  float* HWY_RESTRICT k = scratch + t.off_k;
  float* HWY_RESTRICT v = scratch + t.off_v;
  float* HWY_RESTRICT kt = scratch + t.off_kt;
  float* HWY_RESTRICT vt = scratch + t.off_vt;
  float* HWY_RESTRICT dk = scratch + t.off_dk;
  float* HWY_RESTRICT dv = scratch + t.off_dv;
  const int64_t kb_end = std::min(t.key_blocks, (chunk + 1) * t.blocks_per_chunk);
  for (int64_t kb = chunk * t.blocks_per_chunk; kb < kb_end; ++kb) {
    const int64_t k0 = kb * t.key_block;
    const int64_t nk_all = std::min(t.key_block, p.kv_len - k0);  // keys of dK/dV to write
    const int64_t nk = std::max<int64_t>(0, std::min(nk_all, kv_length - k0));  // valid keys
    const int64_t nkp = BwdRoundUp(std::max<int64_t>(nk, 1), t.key_pad);
    // Rows past nk stay 0: padding, and keys past kv_length (gradient 0).
    const int64_t zero_rows = std::max(nkp, nk_all);
    std::fill(dk, dk + zero_rows * dp, 0.0f);
    std::fill(dv, dv + zero_rows * dvp, 0.0f);
    bool loaded = false;
    for (int64_t hl = 0; hl < p.group && nk > 0; ++hl) {
      const int64_t h = kvh * p.group + hl;
      for (int64_t qt = rows.q_begin / t.q_tile; qt * t.q_tile < rows.q_end; ++qt) {
        if (TileHidden(p, t, kv_length, qt, k0, nk)) continue;
        if (!loaded) {  // K and V of a block no query sees are never read
          LoadKeyBlock(p.k, b, kvh, k0, nk, nkp, d, dp, ld, k, kt);
          LoadKeyBlock(p.v, b, kvh, k0, nk, nkp, dv_cols, dvp, ld, v, vt);
          ZeroUnseenKeys(p, b, kvh, k0, nk, kv_length, seen_by_mask, dp, dvp, ld, k, kt, v, vt);
          loaded = true;
        }
        const int64_t q0 = qt * t.q_tile;
        const int64_t nq = std::min(t.q_tile, p.q_len - q0);
        float* dq = dq_acc + (hl * n_rows + (q0 - rows.q_begin)) * dp;
        BackwardStep(p, g, t, dsum, b, h, q0, nq, k0, nk, nkp, scratch, dq);
      }
    }
    for (int64_t j = 0; j < nk_all; ++j) {
      StoreGradRow(g.dk, b, kvh, k0 + j, d, 1.0f, dk + j * dp);
      StoreGradRow(g.dv, b, kvh, k0 + j, dv_cols, 1.0f, dv + j * dvp);
    }
  }
}

// dQ rows of (b, h) from the accumulators: the one item's (chunks == 1,
// acc != null) or the sum of the chunk partials in chunk order; rows no item
// touched are 0. `row` is [dp] scratch.
inline void StoreQueryGrads(const FlashParams& p, const FlashGradParams& g, const BwdPlan& t,
                            int64_t b, int64_t h, const float* HWY_RESTRICT acc,
                            const ChunkRows* acc_rows, const float* HWY_RESTRICT shared,
                            float* HWY_RESTRICT row) {
  const int64_t dp = t.dp, kvh = h / p.group, hl = h % p.group;
  for (int64_t i = 0; i < p.q_len; ++i) {
    std::fill(row, row + dp, 0.0f);
    if (acc != nullptr) {
      if (i >= acc_rows->q_begin && i < acc_rows->q_end) {
        const int64_t n = acc_rows->q_end - acc_rows->q_begin;
        AddRow(acc + (hl * n + i - acc_rows->q_begin) * dp, static_cast<size_t>(dp), row);
      }
    } else {
      for (int64_t c = 0; c < t.chunks; ++c) {
        const ChunkRows& r = t.rows[static_cast<size_t>(b * t.chunks + c)];
        if (i < r.q_begin || i >= r.q_end) continue;
        const int64_t n = r.q_end - r.q_begin;
        const float* part = shared + r.partial_at + ((kvh * p.group + hl) * n + i - r.q_begin) * dp;
        AddRow(part, static_cast<size_t>(dp), row);
      }
    }
    StoreGradRow(g.dq, b, h, i, p.head_dim, p.scale, row);
  }
}

inline void FillBackwardInfo(const BwdPlan& t, int threads, BackwardRunInfo* info) {
  info->target = HWY_TARGET;
  info->q_tile = t.q_tile;
  info->key_block = t.key_block;
  info->tile_rows = kGradTileM;
  info->tile_cols = static_cast<int>(kGradTileVecs * hn::Lanes(DF()));
  info->chunks = t.chunks;
  info->items = t.items;
  info->threads = threads;
}

// The whole backward pass on this target: D (and dbias zeroed), the items,
// then (chunks > 1) the dQ merge.
inline absl::Status FlashBackward(const FlashParams& p, const FlashGradParams& g, ThreadPool* pool,
                                  Workspace* ws, BackwardRunInfo* info) {
  const BwdPlan t = PlanBackward(p);
  ATTNKIT_RETURN_IF_ERROR(ws->Reserve(pool->num_threads(), t.scratch_floats, t.shared_floats));
  float* shared = ws->shared_area();
  float* dsum = shared + t.off_dsum;
  pool->Run(p.batch * p.num_heads, [&](int64_t bh, int thread) HWY_ATTR {
    RowDotPass(p, g, t, bh, dsum, ws->thread_area(thread));
  });
  pool->Run(t.items, [&](int64_t item, int thread) HWY_ATTR {
    float* scratch = ws->thread_area(thread);
    const int64_t b = item / t.chunks / p.num_kv_heads;
    const int64_t kvh = item / t.chunks % p.num_kv_heads;
    const ChunkRows& rows = t.rows[static_cast<size_t>(b * t.chunks + item % t.chunks)];
    if (t.chunks == 1) {
      float* acc = scratch + t.off_dq;
      BackwardItem(p, g, t, item, dsum, scratch, acc);
      for (int64_t hl = 0; hl < p.group; ++hl) {
        StoreQueryGrads(p, g, t, b, kvh * p.group + hl, acc, &rows, nullptr, scratch + t.off_q);
      }
    } else {
      const int64_t n = rows.q_end - rows.q_begin;
      BackwardItem(p, g, t, item, dsum, scratch,
                   shared + rows.partial_at + kvh * p.group * n * t.dp);
    }
  });
  if (t.chunks > 1) {
    pool->Run(p.batch * p.num_heads, [&](int64_t bh, int thread) HWY_ATTR {
      StoreQueryGrads(p, g, t, bh / p.num_heads, bh % p.num_heads, nullptr, nullptr, shared,
                      ws->thread_area(thread) + t.off_q);
    });
  }
  FillBackwardInfo(t, pool->num_threads(), info);
  return absl::OkStatus();
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#endif  // toggle guard
