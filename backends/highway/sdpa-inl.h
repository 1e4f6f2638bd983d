// Per-target flash attention: query tiles (all heads of one kv-head group at
// a few positions) stream over key/value tiles with an online softmax, so the
// Tq x Tk score matrix never exists. Included once per target (toggle guard).

#if defined(ATTNKIT_BACKENDS_HIGHWAY_SDPA_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_BACKENDS_HIGHWAY_SDPA_INL_H_
#undef ATTNKIT_BACKENDS_HIGHWAY_SDPA_INL_H_
#else
#define ATTNKIT_BACKENDS_HIGHWAY_SDPA_INL_H_
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "backends/highway/flash_params.h"
#include "backends/highway/microkernels-inl.h"
#include "backends/highway/packed_scores-inl.h"
#include "backends/highway/workspace.h"
#include "core/mask.h"
#include "core/status_macros.h"
#include "platform/thread_pool.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {

constexpr int64_t kMinItemsBeforeSplit = 16;  // split K below this many items
constexpr size_t kAlignFloats = 16;           // 64-byte sub-buffer alignment
// Direct decode tiles prefetch the K and V rows about kAheadBytes (of each)
// past the tile, a line at a time from inside the product kernels
// (AheadRows), and 16-bit tiles hold kDirectKeyTile16 keys. On Zen 3
// (d = 128, B = 8) 8, 16 and 32 KiB ahead and 16-64-key fp32 tiles were
// within this machine's noise of each other; 8 KiB disturbs L1 least.
constexpr int64_t kAheadBytes = 8 << 10;
constexpr int64_t kDirectKeyTile16 = 16;
// Direct tiles of 32-bit and int8 rows hold at most this many keys. Direct
// tiles start at multiples of their (power-of-two) size, so with pages of at
// least kMinPageSize keys a tile never crosses a page, and a paged problem
// runs exactly the tiles of its dense twin (bit for bit the same output).
constexpr int64_t kDirectKeyTile = 16;
static_assert(kMinPageSize % kDirectKeyTile == 0, "direct tiles must not cross pages");
constexpr int64_t kMaxKeyTile = 64;  // every key_tile PlanTiling chooses is at most this

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t RoundUp(int64_t a, int64_t b) { return CeilDiv(a, b) * b; }
inline int64_t FloorPow2(int64_t a) {
  int64_t p = 1;
  while (p * 2 <= a) p *= 2;
  return p;
}

// How the problem is cut into work items and tiles.
struct Tiling {
  int64_t heads_per_chunk;  // query heads of one kv head processed together
  int64_t head_chunks;      // ceil(group / heads_per_chunk)
  int64_t q_tile;           // query positions per item
  int64_t q_tiles;
  int64_t rows_padded;  // heads_per_chunk * q_tile, padded for the kernels
  int64_t key_tile;
  int64_t dp;          // head_dim padded to Lanes
  int64_t base_items;  // B * G * head_chunks * q_tiles
  int64_t splits;      // key ranges per base item (split-K)
  bool narrow;         // rows fit one vector: use the 8-key x 1-vector QK^T
  bool direct;         // narrow, and K/V rows are read from storage as is
  bool bf16_pairs;     // direct bf16 read as BF16Pairs (columns permuted)
  bool packed;         // direct, with packed score tiles (packed_scores-inl.h)
  int64_t ahead_keys;  // direct: keys past the tile whose rows are prefetched
  bool ahead_into_l1;  // direct: prefetch them into L1 (AheadRows::into_l1)
  // Per-thread scratch offsets, in floats.
  size_t off_qt, off_q, off_k, off_v, off_s, off_o, off_m, off_l, off_alpha, off_kb, off_ke,
      off_bad, off_row;
  size_t scratch_floats;
  size_t partial_floats;  // split-K partials: [base_items, splits, rows, dp + 1]
};

// Floats of t's split-K partials: [base_items, splits, rows_padded, dp + 1]
// (0 without splits). Set again whenever t.splits changes.
inline size_t PartialFloats(const Tiling& t) {
  return t.splits > 1 ? static_cast<size_t>(t.base_items * t.splits * t.rows_padded * (t.dp + 1))
                      : 0;
}

inline Tiling PlanTiling(const FlashParams& p) {
  const size_t N = hn::Lanes(DF());
  Tiling t;
  const int64_t d = p.head_dim;
  const int64_t target_rows = d <= 256 ? 64 : 32;
  t.head_chunks = CeilDiv(p.group, target_rows);
  t.heads_per_chunk = CeilDiv(p.group, t.head_chunks);
  t.q_tile = std::min<int64_t>(p.q_len, std::max<int64_t>(1, target_rows / t.heads_per_chunk));
  t.q_tiles = CeilDiv(p.q_len, t.q_tile);
  const int64_t rows = t.heads_per_chunk * t.q_tile;
  t.narrow = rows <= static_cast<int64_t>(N);
  const int64_t row_block =
      std::max<int64_t>(kValueRows, (t.narrow ? kNarrowRowVecs : kWideRowVecs) * N);
  t.rows_padded = RoundUp(rows, row_block);
  t.dp = RoundUp(d, N);
  // Decode reads K and V in place (converting 16-bit types in registers):
  // the kernels load whole vectors, so rows must be contiguous and d a
  // multiple of Lanes; otherwise tiles are converted to f32 scratch first.
  // A dense mask can hide a key from every row of a tile; such V rows must be
  // zeroed (0 * NaN is NaN), which needs the scratch copy, so it reads tiles.
  // Structured masks never hide a key inside an item's range from all rows.
  t.direct = t.narrow && p.k.dtype == p.v.dtype && p.k.strides[3] == 1 && p.v.strides[3] == 1 &&
             p.k_row_stride > 0 && p.v_row_stride > 0 && t.dp == d && p.blocked == nullptr;
  // Decode-like tiles (one vector of rows) do little work per key: keep the
  // converted K and V tile (2 x key_tile x dp floats) within 16 KiB of L1.
  t.key_tile = t.narrow ? std::min<int64_t>(kMaxKeyTile, RoundUp(2048 / t.dp, kNarrowKeys))
                        : (d <= 256 ? kMaxKeyTile : kMaxKeyTile / 2);
  if (t.direct) {  // a power of two dividing every page size (kDirectKeyTile)
    const int64_t cap = DTypeSize(p.k.dtype) == 2 ? kDirectKeyTile16 : kDirectKeyTile;
    t.key_tile = std::min(cap, FloorPow2(std::max<int64_t>(1, 2048 / t.dp)));
  }
  t.bf16_pairs = kHaveBF16Pairs && t.direct && p.k.dtype == DType::kBF16 &&
                 t.dp % static_cast<int64_t>(2 * N) == 0;
  t.packed = kHavePackedScores && t.direct;
  const int64_t row_bytes = d * static_cast<int64_t>(DTypeSize(p.k.dtype));
  t.ahead_keys = std::max<int64_t>(t.key_tile, kAheadBytes / row_bytes);
  // f32 rows that lie back to back (dense BHTD) only: see AheadRows.
  t.ahead_into_l1 = t.direct && DTypeSize(p.k.dtype) == 4 && !p.kv_rows.paged() &&
                    p.k_row_stride == d && p.v_row_stride == d;
  t.base_items = p.batch * p.num_kv_heads * t.head_chunks * t.q_tiles;
  t.splits = 1;
  if (t.base_items < kMinItemsBeforeSplit) {
    // Depends on the shape only (not the thread count), so results are the
    // same bit for bit whatever the number of threads.
    const int64_t key_tiles = CeilDiv(p.kv_len, t.key_tile);
    t.splits =
        std::max<int64_t>(1, std::min(CeilDiv(kMinItemsBeforeSplit, t.base_items), key_tiles / 2));
  }
  const int64_t mp = t.rows_padded, kt = t.key_tile;
  size_t off = 0;
  auto take = [&off](int64_t floats) {
    const size_t at = off;
    off += static_cast<size_t>(RoundUp(floats, kAlignFloats));
    return at;
  };
  t.off_qt = take(d * mp);
  t.off_q = take(t.narrow ? mp * t.dp : 0);
  t.off_k = take(t.direct ? 0 : kt * t.dp);
  t.off_v = take(t.direct ? 0 : kt * t.dp);
  // Packed tiles hold key_tile rounded up to whole vectors (at most 4 keys
  // each) for each row group of 4 rows (4 * groups <= rows_padded).
  t.off_s = take((t.packed ? RoundUp(kt, 4) : kt) * mp);
  t.off_o = take(mp * t.dp);
  t.off_m = take(mp);
  t.off_l = take(mp);
  t.off_alpha = take(mp);
  t.off_kb = take(mp);
  t.off_ke = take(mp);
  t.off_bad = take(mp);
  t.off_row = take(t.bf16_pairs ? t.dp : 0);
  t.scratch_floats = off;
  t.partial_floats = PartialFloats(t);
  return t;
}

// One work item: query heads [h0, h0 + nh) of kv head g in batch b at
// positions [q0, q0 + nq), over keys [k_begin, k_end).
struct Item {
  int64_t b, g, h0, nh, q0, nq;
  int64_t k_begin, k_end;
};

inline Item DecodeItem(const FlashParams& p, const Tiling& t, int64_t base, int64_t split) {
  Item it;
  const int64_t qt = base % t.q_tiles;
  int64_t rest = base / t.q_tiles;
  const int64_t chunk = rest % t.head_chunks;
  rest /= t.head_chunks;
  it.g = rest % p.num_kv_heads;
  it.b = rest / p.num_kv_heads;
  it.h0 = it.g * p.group + chunk * t.heads_per_chunk;
  it.nh = std::min(t.heads_per_chunk, p.group - chunk * t.heads_per_chunk);
  it.q0 = qt * t.q_tile;
  it.nq = std::min(t.q_tile, p.q_len - it.q0);
  // Ranges are monotone in the query position, so the union over the tile
  // runs from the first row's begin to the last row's end.
  const int64_t kv_length = p.KvLength(it.b);
  const KeyRange first = VisibleKeys(p.mask, it.q0, kv_length);
  const KeyRange last = VisibleKeys(p.mask, it.q0 + it.nq - 1, kv_length);
  // An empty row's range [begin, begin) may lie past kv_length: clamp, or a
  // tile would read K/V rows that do not exist.
  const int64_t hi = std::min(kv_length, std::max(first.begin, last.end));
  const int64_t lo = std::min(first.begin, hi);
  // Split points (and tiles, in RunItemAs) sit at multiples of key_tile.
  const int64_t aligned = lo - lo % t.key_tile;
  const int64_t chunk_keys = RoundUp(CeilDiv(hi - aligned, t.splits), t.key_tile);
  it.k_begin = std::min(hi, std::max(lo, aligned + split * chunk_keys));
  it.k_end = std::min(hi, std::max(lo, aligned + (split + 1) * chunk_keys));
  return it;
}

// Qt[c, r] = scale * Q[b, h0 + r / nq, q0 + r % nq, c]; padded rows are 0.
inline void LoadQueryTile(const FlashParams& p, const Tiling& t, const Item& it,
                          float* HWY_RESTRICT qt) {
  const int64_t mp = t.rows_padded, d = p.head_dim;
  const int64_t rows = it.nh * it.nq;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = p.q.Offset(it.b, it.h0 + r / it.nq, it.q0 + r % it.nq, 0);
    for (int64_t c = 0; c < d; ++c) {
      qt[c * mp + r] = p.scale * LoadAsF32(p.q.data, p.q.dtype, base + c * p.q.strides[3]);
    }
  }
  for (int64_t c = 0; c < d; ++c) {
    for (int64_t r = rows; r < mp; ++r) qt[c * mp + r] = 0.0f;
  }
}

// Narrow tiles (QDotKRows): the same rows row-major, without the transposed
// tile: q[r, c] = scale * Q[b, h0 + r / nq, q0 + r % nq, c], zero-padded to
// [rows_padded, dp]. f32 rows are read as rows (the per-item setup of decode).
inline void LoadQueryRows(const FlashParams& p, const Tiling& t, const Item& it,
                          float* HWY_RESTRICT q) {
  const int64_t d = p.head_dim, dp = t.dp, rows = it.nh * it.nq;
  const bool plain = p.q.dtype == DType::kF32 && p.q.strides[3] == 1;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = p.q.Offset(it.b, it.h0 + r / it.nq, it.q0 + r % it.nq, 0);
    float* HWY_RESTRICT qr = q + r * dp;
    if (plain) {
      const float* HWY_RESTRICT src = static_cast<const float*>(p.q.data) + base;
      for (int64_t c = 0; c < d; ++c) qr[c] = p.scale * src[c];
    } else {
      for (int64_t c = 0; c < d; ++c) {
        qr[c] = p.scale * LoadAsF32(p.q.data, p.q.dtype, base + c * p.q.strides[3]);
      }
    }
    std::fill(qr + d, qr + dp, 0.0f);
  }
  std::fill(q + rows * dp, q + t.rows_padded * dp, 0.0f);
}

// Rows [k0, k0 + nk) of K and V for (b, g), as f32 [key_tile, dp]; rows
// [nk, nk_padded) are zero. Also prefetches rows [next_k0, next_k0 + nk) (the
// next tile), so their cache misses overlap this tile's compute instead of
// stalling the next conversion: decode is bound by exactly these reads.
inline void LoadKeyValueTile(const FlashParams& p, const Tiling& t, const Item& it, int64_t k0,
                             int64_t nk, int64_t nk_padded, int64_t next_k0, int64_t next_nk,
                             float* HWY_RESTRICT k, float* HWY_RESTRICT v) {
  const size_t d = static_cast<size_t>(p.head_dim), dp = static_cast<size_t>(t.dp);
  const size_t es = DTypeSize(p.k.dtype);
  const char* kbase = static_cast<const char*>(p.k.data);
  const char* vbase = static_cast<const char*>(p.v.data);
  const size_t row_bytes = static_cast<size_t>(p.head_dim - 1) * p.k.strides[3] * es + es;
  const KvRows& rows = p.kv_rows;
  for (int64_t j = 0; j < nk; ++j) {
    if (j < next_nk) {
      const char* kn = kbase + rows.Offset(p.k, it.b, it.g, next_k0 + j) * es;
      const char* vn = vbase + rows.Offset(p.v, it.b, it.g, next_k0 + j) * es;
      for (size_t off = 0; off < row_bytes; off += 64) {
        hwy::Prefetch(kn + off);
        hwy::Prefetch(vn + off);
      }
    }
    const char* kp = kbase + rows.Offset(p.k, it.b, it.g, k0 + j) * es;
    const char* vp = vbase + rows.Offset(p.v, it.b, it.g, k0 + j) * es;
    LoadRowAsF32(kp, p.k.dtype, p.k.strides[3], d, dp, k + j * dp);
    LoadRowAsF32(vp, p.v.dtype, p.v.strides[3], d, dp, v + j * dp);
    if (p.int8()) {  // int8 rows times their scales: the dequantized values
      const float ks = p.k_scale[rows.ScaleOffset(p.k_scale_view, it.b, it.g, k0 + j)];
      const float vs = p.v_scale[rows.ScaleOffset(p.v_scale_view, it.b, it.g, k0 + j)];
      for (size_t c = 0; c < d; ++c) {
        k[j * dp + c] *= ks;
        v[j * dp + c] *= vs;
      }
    }
  }
  for (int64_t j = nk; j < nk_padded; ++j) {
    for (size_t c = 0; c < dp; ++c) k[j * dp + c] = v[j * dp + c] = 0.0f;
  }
}
// Prefetches rows [k0, k0 + nk) of K and V for (b, g): the first rows of a
// direct decode item, before the kernels' own prefetching (AheadRows) starts.
inline void PrefetchKeyValueRows(const FlashParams& p, const Item& it, int64_t k0, int64_t nk) {
  const size_t es = DTypeSize(p.k.dtype);
  const size_t row_bytes = static_cast<size_t>(p.head_dim) * es;
  for (int64_t j = 0; j < nk; ++j) {
    const char* kp =
        static_cast<const char*>(p.k.data) + p.kv_rows.Offset(p.k, it.b, it.g, k0 + j) * es;
    const char* vp =
        static_cast<const char*>(p.v.data) + p.kv_rows.Offset(p.v, it.b, it.g, k0 + j) * es;
    for (size_t off = 0; off < row_bytes; off += 64) {
      hwy::Prefetch(kp + off);
      hwy::Prefetch(vp + off);
    }
  }
}

// The scales of int8 rows [k0, k0 + nk) of (b, g), which lie in one run
// (a direct tile never crosses a page): out[j] for j < nk.
inline void GatherRowScales(const FlashParams& p, const float* scale, const TensorView& view,
                            const Item& it, int64_t k0, int64_t nk, float* HWY_RESTRICT out) {
  const float* s = scale + p.kv_rows.ScaleOffset(view, it.b, it.g, k0);
  const int64_t stride = p.kv_rows.paged() ? view.strides[1] : view.strides[2];
  for (int64_t j = 0; j < nk; ++j) out[j] = s[j * stride];
}

// The optional per-pair inputs on tile [k0, k0 + nk), on the raw scores
// (before soft-capping): a pair the dense mask blocks, or whose bias is -inf,
// becomes -inf (its K and V rows are not read for that row). Of the other
// pairs the structured mask lets through, a non-finite raw score (NaN or Inf
// in Q or K) or a NaN or +inf bias sets bad[r]. With add_bias (no softcap)
// the bias is added here; otherwise AddBiasToUnblocked adds it after the cap.
// Scalar: these inputs are per (h, i, j).
inline void ApplyPairInputs(const FlashParams& p, const Item& it, int64_t k0, int64_t nk,
                            bool add_bias, const ScoreLayout& lay, float* HWY_RESTRICT s,
                            float* HWY_RESTRICT bad) {
  const float kInf = std::numeric_limits<float>::infinity();
  const int64_t kv_length = p.KvLength(it.b);
  for (int64_t r = 0; r < it.nh * it.nq; ++r) {
    const int64_t h = it.h0 + r / it.nq, i = it.q0 + r % it.nq;
    const KeyRange range = VisibleKeys(p.mask, i, kv_length);
    const float* bias = p.bias != nullptr ? p.bias + p.bias_view.Offset(it.b, h, i, k0) : nullptr;
    const int64_t bs = p.bias != nullptr ? p.bias_view.strides[3] : 0;
    const uint8_t* blocked =
        p.blocked != nullptr ? p.blocked + p.blocked_view.Offset(it.b, h, i, k0) : nullptr;
    const int64_t ms = p.blocked != nullptr ? p.blocked_view.strides[3] : 0;
    bool row_bad = false;
    for (int64_t j = 0; j < nk; ++j) {
      float& x = s[lay.At(j, r)];
      const float b = bias != nullptr ? bias[j * bs] : 0.0f;
      if ((blocked != nullptr && blocked[j * ms] != 0) || b == -kInf) {
        x = -kInf;
        continue;
      }
      const bool visible = k0 + j >= range.begin && k0 + j < range.end;
      row_bad = row_bad || (visible && (!std::isfinite(x) || !(b < kInf)));
      if (add_bias) x += b;
    }
    if (row_bad) bad[r] = 1.0f;
  }
}

// s += bias on tile [k0, k0 + nk) where s is not -inf (blocked or masked):
// the bias after soft-capping.
inline void AddBiasToUnblocked(const FlashParams& p, const Item& it, int64_t k0, int64_t nk,
                               const ScoreLayout& lay, float* HWY_RESTRICT s) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < it.nh * it.nq; ++r) {
    const int64_t h = it.h0 + r / it.nq, i = it.q0 + r % it.nq;
    const float* bias = p.bias + p.bias_view.Offset(it.b, h, i, k0);
    const int64_t bs = p.bias_view.strides[3];
    for (int64_t j = 0; j < nk; ++j) {
      float& x = s[lay.At(j, r)];
      if (x != kNegInf) x += bias[j * bs];
    }
  }
}

// The V rows of tile keys j < nk that hold a NaN or Inf: their indices go to
// bad_keys (returns how many), and every real row that sees such a key (a
// score not -inf after masking) is flagged in bad. The caller leaves those
// keys out of P.V: 0 * NaN is NaN, and a row that does not see a key must
// not be changed by it (a key no row sees may hold anything: padding, or keys
// the dense mask blocks, found by `attnkit fuzz` with poison_blocked).
// Only tiles where some row may not see some key need this; on the others a
// non-finite V row reaches every row's accumulator, which the final check
// catches. v [nk, ldv] of T: a converted tile or V storage (dp values).
template <typename T>
int64_t FlagNonFiniteValueRows(const T* HWY_RESTRICT v, size_t ldv, int64_t nk, int64_t dp,
                               const float* HWY_RESTRICT s, const ScoreLayout& lay, int64_t rows,
                               float* HWY_RESTRICT bad, int32_t* HWY_RESTRICT bad_keys) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  int64_t n = 0;
  for (int64_t j = 0; j < nk; ++j) {
    if (AllFinite(v + j * ldv, static_cast<size_t>(dp))) continue;
    bad_keys[n++] = static_cast<int32_t>(j);
    for (int64_t r = 0; r < rows; ++r) {
      if (s[lay.At(j, r)] != kNegInf) bad[r] = 1.0f;
    }
  }
  return n;
}

// Tile-relative visible key range [kb, ke) of every row; padded rows see all.
inline void RowKeyRanges(const FlashParams& p, const Tiling& t, const Item& it, int64_t k0,
                         int64_t nk, float* HWY_RESTRICT kb, float* HWY_RESTRICT ke) {
  const int64_t kv_length = p.KvLength(it.b);
  const int64_t rows = it.nh * it.nq;
  auto clamp = [nk](int64_t x) {
    return static_cast<float>(std::min<int64_t>(std::max<int64_t>(x, -1), nk + 1));
  };
  for (int64_t r = 0; r < rows; ++r) {
    const KeyRange range = VisibleKeys(p.mask, it.q0 + r % it.nq, kv_length);
    kb[r] = clamp(range.begin - k0);
    ke[r] = clamp(std::min(range.end, k0 + nk) - k0);
  }
  for (int64_t r = rows; r < t.rows_padded; ++r) {
    kb[r] = 0.0f;
    ke[r] = static_cast<float>(nk + 1);
  }
}

#if HWY_TARGET != HWY_SCALAR  // kHavePackedScores
// One direct tile [k0, k0 + nk) of a packed item (t.packed; see
// packed_scores-inl.h): each row group's scores, then, as RunItemAs does for
// row-per-lane tiles, the pair inputs, masks and NaN flags, the online
// softmax and O = alpha * O + P.V. ktile, vtile: the tile's K and V storage
// rows; k_scales, v_scales: int8 rows' scales (nk each).
template <typename T>
void PackedTileUpdate(const FlashParams& p, const Tiling& t, const Item& it, int64_t k0, int64_t nk,
                      TileVisibility vis, const T* HWY_RESTRICT ktile, size_t ldk,
                      const T* HWY_RESTRICT vtile, size_t ldv, const AheadRows<T>& k_ahead,
                      const AheadRows<T>& v_ahead, const float* HWY_RESTRICT k_scales,
                      const float* HWY_RESTRICT v_scales, float* scratch) {
  const int64_t dp = t.dp, rows = it.nh * it.nq;
  const int64_t groups = CeilDiv(rows, kGroupRows);
  const int64_t nk4 = RoundUp(nk, static_cast<int64_t>(PackedKeysPerVec()));
  const ScoreLayout lay{kGroupRows, RoundUp(t.key_tile, 4) * kGroupRows};
  const size_t n = static_cast<size_t>(nk4) * kGroupRows;  // floats per group tile
  const float* HWY_RESTRICT qrows = scratch + t.off_q;
  float* HWY_RESTRICT s = scratch + t.off_s;
  float* HWY_RESTRICT o = scratch + t.off_o;
  float* HWY_RESTRICT m = scratch + t.off_m;
  float* HWY_RESTRICT l = scratch + t.off_l;
  float* HWY_RESTRICT alpha = scratch + t.off_alpha;
  float* HWY_RESTRICT kb = scratch + t.off_kb;
  float* HWY_RESTRICT ke = scratch + t.off_ke;
  float* HWY_RESTRICT bad = scratch + t.off_bad;
  const float kNegInf = -std::numeric_limits<float>::infinity();
  constexpr bool kInt8 = std::is_same<T, int8_t>::value;
  for (int64_t g = 0; g < groups; ++g) {
    float* HWY_RESTRICT sg = s + g * lay.group_stride;
    // The first group prefetches the rows ahead (the same rows for all).
    QDotKRows(qrows + g * kGroupRows * dp, static_cast<size_t>(dp), ktile, ldk,
              static_cast<size_t>(dp), kGroupRows, kGroupRows, static_cast<size_t>(nk), sg,
              kGroupRows, g == 0 ? k_ahead : AheadRows<T>{}, g == 0 ? v_ahead : AheadRows<T>{});
    std::fill(sg + nk * kGroupRows, sg + n, kNegInf);  // keys past the tile
  }
  if constexpr (kInt8) {  // integer dot products times the key scales
    for (int64_t g = 0; g < groups; ++g) {
      PackedScale(s + g * lay.group_stride, static_cast<size_t>(nk4), k_scales,
                  /*keep_zero=*/false);
    }
  }
  const bool per_pair = p.bias != nullptr || p.blocked != nullptr;
  const bool structured = vis != TileVisibility::kVisible || nk4 != nk;
  if (structured) RowKeyRanges(p, t, it, k0, nk, kb, ke);
  if (per_pair) ApplyPairInputs(p, it, k0, nk, /*add_bias=*/p.softcap == 0.0f, lay, s, bad);
  for (int64_t g = 0; g < groups; ++g) {
    float* HWY_RESTRICT sg = s + g * lay.group_stride;
    const int64_t r0 = g * kGroupRows;
    if (structured) {
      PackedMaskKeyRange(sg, static_cast<size_t>(nk4), kb + r0, ke + r0,
                         per_pair ? nullptr : bad + r0);
    } else if (!per_pair) {
      PackedFlagNonFinite(sg, static_cast<size_t>(nk4), bad + r0);
    }
    if (p.softcap > 0.0f) SoftCap(sg, n, p.softcap);
  }
  if (p.softcap > 0.0f && p.bias != nullptr) AddBiasToUnblocked(p, it, k0, nk, lay, s);
  // Keys some row may not see: V rows with a NaN or Inf are left out.
  int32_t bad_keys[kMaxKeyTile];
  const int64_t n_bad = per_pair || structured ? FlagNonFiniteValueRows(vtile, ldv, nk, dp, s, lay,
                                                                        rows, bad, bad_keys)
                                               : 0;
  for (int64_t g = 0; g < groups; ++g) {
    float* HWY_RESTRICT sg = s + g * lay.group_stride;
    const int64_t r0 = g * kGroupRows;
    PackedSoftmaxUpdate(sg, static_cast<size_t>(nk4), m + r0, l + r0, alpha + r0);
    // int8: P times the value scales, after l has summed P itself.
    if constexpr (kInt8) {
      PackedScale(sg, static_cast<size_t>(nk4), v_scales, /*keep_zero=*/true);
    }
    const float* rescale = alpha + r0;  // the first product applies it
    int64_t j0 = 0;
    for (int64_t x = 0; x <= n_bad; ++x) {
      const int64_t j1 = x < n_bad ? bad_keys[x] : nk;
      WeightedSumV(sg + j0 * kGroupRows, kGroupRows, vtile + j0 * ldv, ldv,
                   static_cast<size_t>(j1 - j0), rescale, kGroupRows, static_cast<size_t>(dp),
                   o + r0 * dp, static_cast<size_t>(dp));
      rescale = nullptr;
      j0 = j1 + 1;
    }
  }
}
#endif  // HWY_TARGET != HWY_SCALAR

// Runs one item, reading K and V as T: f32 scratch tiles, or (t.direct) the
// storage of type T itself. Passes each normalised row and its lse to
// store_row(r, row, lse). Fully blocked rows give 0 and -inf; rows that read a
// NaN or Inf give NaN and NaN (oracle/reference.h).
template <typename T, class StoreRow>
void RunItemAs(const FlashParams& p, const Tiling& t, const Item& it, float* scratch,
               const StoreRow& store_row) {
  const int64_t mp = t.rows_padded, dp = t.dp, d = p.head_dim;
  float* HWY_RESTRICT qt = scratch + t.off_qt;
  float* HWY_RESTRICT qrows = scratch + t.off_q;
  float* HWY_RESTRICT k = scratch + t.off_k;
  float* HWY_RESTRICT v = scratch + t.off_v;
  float* HWY_RESTRICT s = scratch + t.off_s;
  float* HWY_RESTRICT o = scratch + t.off_o;
  float* HWY_RESTRICT m = scratch + t.off_m;
  float* HWY_RESTRICT l = scratch + t.off_l;
  float* HWY_RESTRICT alpha = scratch + t.off_alpha;
  float* HWY_RESTRICT kb = scratch + t.off_kb;
  float* HWY_RESTRICT ke = scratch + t.off_ke;
  float* HWY_RESTRICT bad = scratch + t.off_bad;  // 1: the row reads a NaN/Inf
  const float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t rows = it.nh * it.nq;
  const int64_t value_rows = RoundUp(rows, kValueRows);
  const int key_step = t.narrow ? kNarrowKeys : kWideKeys;
  const ScoreLayout lay{mp, 4};  // row-per-lane score tiles

  for (int64_t r = 0; r < mp; ++r) {
    m[r] = kNegInf;
    l[r] = 0.0f;
    bad[r] = 0.0f;
  }
  std::fill(o, o + mp * dp, 0.0f);
  // BF16Pairs: position c of a row holds column perm[c] (see LoadF32Vecs);
  // Q rows are stored, and output rows come out, in that order.
  constexpr bool kPairs = std::is_same<T, BF16Pairs>::value;
  uint32_t perm[2 * HWY_MAX_BYTES / sizeof(float)];
  if (kPairs) BF16PairColumns(perm);
  const int64_t pair = 2 * static_cast<int64_t>(hn::Lanes(DF()));
  auto column_at = [&](int64_t c) { return c - c % pair + perm[c % pair]; };
  float* HWY_RESTRICT row = scratch + t.off_row;
  if (it.k_begin < it.k_end) {
    if (t.narrow) {
      LoadQueryRows(p, t, it, qrows);
    } else {
      LoadQueryTile(p, t, it, qt);
    }
    if (kPairs) {
      for (int64_t r = 0; r < rows; ++r) {
        float* HWY_RESTRICT q = qrows + r * dp;
        std::copy(q, q + dp, row);
        for (int64_t c = 0; c < dp; ++c) q[c] = row[column_at(c)];
      }
    }
  }

  const int64_t kv_length = p.KvLength(it.b);
  if (t.direct) {  // the rows the kernels below do not prefetch
    PrefetchKeyValueRows(p, it, it.k_begin, std::min(t.ahead_keys, it.k_end - it.k_begin));
  }
  constexpr bool kInt8 = std::is_same<T, int8_t>::value;
  // int8 direct tiles (zeroed: PackedScale loads whole vectors of them).
  static_assert(kMaxKeyTile >= kDirectKeyTile + HWY_MAX_BYTES / sizeof(float),
                "PackedScale reads a vector past a direct tile's last key");
  float k_scales[kMaxKeyTile] = {}, v_scales[kMaxKeyTile] = {};
  // Tiles start at multiples of key_tile (the item's first may be shorter).
  for (int64_t k0 = it.k_begin, nk = 0; k0 < it.k_end; k0 += nk) {
    nk = std::min(t.key_tile - k0 % t.key_tile, it.k_end - k0);
    const TileVisibility vis = ClassifyTile(p.mask, kv_length, it.q0, it.q0 + it.nq, k0, k0 + nk);
    if (vis == TileVisibility::kHidden) continue;  // skipped, not computed
    const int64_t nkp = RoundUp(nk, key_step);
    const int64_t next_k0 = k0 + nk;
    const int64_t next_nk = std::max<int64_t>(0, std::min(t.key_tile, it.k_end - next_k0));
    // K/V rows of this tile as the kernels read them: [nkp, ldk], [nkp, ldv].
    const T* HWY_RESTRICT ktile = nullptr;
    const T* HWY_RESTRICT vtile = nullptr;
    size_t ldk = 0, ldv = 0;
    if constexpr (std::is_same<T, float>::value) {
      if (!t.direct) {
        LoadKeyValueTile(p, t, it, k0, nk, nkp, next_k0, next_nk, k, v);
        ktile = k;
        vtile = v;
        ldk = ldv = static_cast<size_t>(dp);
      }
    }
    AheadRows<T> k_ahead, v_ahead;  // direct: rows t.ahead_keys past this tile's
    if (t.direct) {
      const KvRows& kv = p.kv_rows;
      ktile = static_cast<const T*>(p.k.data) + kv.Offset(p.k, it.b, it.g, k0);
      vtile = static_cast<const T*>(p.v.data) + kv.Offset(p.v, it.b, it.g, k0);
      ldk = static_cast<size_t>(p.k_row_stride);
      ldv = static_cast<size_t>(p.v_row_stride);
      // The rows t.ahead_keys past these, as far as one run (page) reaches.
      const int64_t ahead = k0 + t.ahead_keys;
      const size_t count = static_cast<size_t>(
          std::max<int64_t>(0, std::min({nk, it.k_end - ahead, kv.RunLength(ahead)})));
      if (count > 0) {  // no pointer past the item's rows otherwise
        k_ahead = {static_cast<const T*>(p.k.data) + kv.Offset(p.k, it.b, it.g, ahead), ldk, count,
                   t.ahead_into_l1};
        v_ahead = {static_cast<const T*>(p.v.data) + kv.Offset(p.v, it.b, it.g, ahead), ldv, count,
                   t.ahead_into_l1};
      }
      if constexpr (kInt8) {
        GatherRowScales(p, p.k_scale, p.k_scale_view, it, k0, nk, k_scales);
        GatherRowScales(p, p.v_scale, p.v_scale_view, it, k0, nk, v_scales);
      }
    }
#if HWY_TARGET != HWY_SCALAR
    if (t.packed) {
      PackedTileUpdate<T>(p, t, it, k0, nk, vis, ktile, ldk, vtile, ldv, k_ahead, v_ahead, k_scales,
                          v_scales, scratch);
      continue;
    }
#endif
    if (t.narrow) {
      QDotKRows(qrows, dp, ktile, ldk, dp, rows, mp, nkp, s, mp, k_ahead, v_ahead);
    } else {
      QDotK<kWideKeys, kWideRowVecs>(qt, mp, k, dp, d, mp, nkp, s, mp);
    }
    // int8 direct: integer dot products times the key scales (nkp == nk).
    if constexpr (kInt8) ScaleKeyColumns(s, mp, nk, mp, k_scales, /*keep_zero=*/false);
    // Raw scores: flag non-finite ones of visible pairs, then mask. Fully
    // visible tiles skip the per-element structured mask.
    const bool per_pair = p.bias != nullptr || p.blocked != nullptr;
    const bool structured = vis != TileVisibility::kVisible || nkp != nk;
    if (structured) RowKeyRanges(p, t, it, k0, nk, kb, ke);
    if (per_pair) {
      ApplyPairInputs(p, it, k0, nk, /*add_bias=*/p.softcap == 0.0f, lay, s, bad);
      if (structured) MaskKeyRange(s, mp, nkp, mp, kb, ke);
    } else if (structured) {
      MaskKeyRange(s, mp, nkp, mp, kb, ke, bad);
    } else {
      FlagNonFiniteScores(s, mp, nkp, mp, bad);
    }
    if (p.softcap > 0.0f) {
      SoftCap(s, static_cast<size_t>(nkp * mp), p.softcap);
      if (p.bias != nullptr) AddBiasToUnblocked(p, it, k0, nk, lay, s);
    }
    // Keys some row may not see: V rows with a NaN or Inf are left out.
    int32_t bad_keys[kMaxKeyTile];
    const int64_t n_bad = per_pair || structured ? FlagNonFiniteValueRows(vtile, ldv, nk, dp, s,
                                                                          lay, rows, bad, bad_keys)
                                                 : 0;
    OnlineSoftmaxUpdate(s, mp, nkp, mp, m, l, alpha);
    // int8 direct: P times the value scales, after l has summed P itself.
    if constexpr (kInt8) ScaleKeyColumns(s, mp, nk, mp, v_scales, /*keep_zero=*/true);
    const float* rescale = alpha;  // the first product applies it
    int64_t j0 = 0;
    for (int64_t x = 0; x <= n_bad; ++x) {
      const int64_t j1 = x < n_bad ? bad_keys[x] : nkp;
      WeightedSumV(s + j0 * mp, mp, vtile + j0 * ldv, ldv, static_cast<size_t>(j1 - j0), rescale,
                   value_rows, dp, o, dp);
      rescale = nullptr;
      j0 = j1 + 1;
    }
  }

  for (int64_t r = 0; r < rows; ++r) {
    float* orow = o + r * dp;
    float lse = kNegInf;
    if (bad[r] != 0.0f || !AllFinite(orow, static_cast<size_t>(dp))) {
      // The row read a NaN or Inf (a V row's reaches its accumulator).
      lse = std::numeric_limits<float>::quiet_NaN();
      std::fill(orow, orow + dp, lse);
    } else if (l[r] > 0.0f) {
      const float inv = 1.0f / l[r];
      for (int64_t c = 0; c < dp; ++c) orow[c] *= inv;
      lse = m[r] + std::log(l[r]);
    } else {
      std::fill(orow, orow + dp, 0.0f);
    }
    if (kPairs) {  // back to column order
      for (int64_t c = 0; c < dp; ++c) row[column_at(c)] = orow[c];
      orow = row;
    }
    store_row(r, orow, lse);
  }
}
// Runs one item (see RunItemAs), choosing how K and V are read.
template <class StoreRow>
void RunItem(const FlashParams& p, const Tiling& t, const Item& it, float* scratch,
             const StoreRow& store_row) {
  if (t.bf16_pairs) {
    RunItemAs<BF16Pairs>(p, t, it, scratch, store_row);
  } else if (t.direct && p.k.dtype == DType::kBF16) {
    RunItemAs<hwy::bfloat16_t>(p, t, it, scratch, store_row);
  } else if (t.direct && p.k.dtype == DType::kF16) {
    RunItemAs<hwy::float16_t>(p, t, it, scratch, store_row);
  } else if (t.direct && p.k.dtype == DType::kI8) {
    RunItemAs<int8_t>(p, t, it, scratch, store_row);
  } else {
    RunItemAs<float>(p, t, it, scratch, store_row);
  }
}

// Writes one finished row of `it` to O (and lse), converting to O's dtype.
inline void StoreOutputRow(const FlashParams& p, const Item& it, int64_t r,
                           const float* HWY_RESTRICT row, float lse) {
  const int64_t h = it.h0 + r / it.nq, i = it.q0 + r % it.nq;
  const int64_t base = p.o.Offset(it.b, h, i, 0);
  const int64_t cs = p.o.strides[3];
  if (p.o.dtype == DType::kF32 && cs == 1) {
    std::copy(row, row + p.head_dim, static_cast<float*>(p.o.data) + base);
  } else {
    for (int64_t c = 0; c < p.head_dim; ++c)
      StoreFromF32(p.o.data, p.o.dtype, base + c * cs, row[c]);
  }
  if (p.lse != nullptr) p.lse[p.lse_view.Offset(it.b, h, i)] = lse;
}

// Runs split `split` of base item `base` of (p, t): stores the rows, or
// (split-K) writes them and their lse to the item's slot of `partials`
// ([base_items * splits, rows_padded, dp + 1], lse after the rows).
inline void RunWorkItem(const FlashParams& p, const Tiling& t, int64_t base, int64_t split,
                        float* partials, float* scratch) {
  const Item it = DecodeItem(p, t, base, split);
  if (t.splits == 1) {
    RunItem(p, t, it, scratch,
            [&](int64_t r, const float* row, float lse) { StoreOutputRow(p, it, r, row, lse); });
    return;
  }
  const int64_t mp = t.rows_padded, dp = t.dp;
  float* part = partials + static_cast<size_t>(base * t.splits + split) * mp * (dp + 1);
  RunItem(p, t, it, scratch, [&](int64_t r, const float* row, float lse) {
    std::copy(row, row + dp, part + r * dp);
    part[mp * dp + r] = lse;
  });
}

// Merges the split-K partials of base item `base` through their
// log-sum-exp and stores its rows.
inline void MergeWorkItem(const FlashParams& p, const Tiling& t, int64_t base,
                          const float* partials, float* scratch) {
  const Item it = DecodeItem(p, t, base, 0);
  const int64_t mp = t.rows_padded, dp = t.dp;
  float* lses = scratch + t.off_m;  // t.splits <= kMinItemsBeforeSplit floats
  float* merged = scratch + t.off_o;
  const size_t stride = static_cast<size_t>(mp * (dp + 1));
  const float* first = partials + static_cast<size_t>(base * t.splits) * stride;
  for (int64_t r = 0; r < it.nh * it.nq; ++r) {
    for (int64_t s = 0; s < t.splits; ++s) lses[s] = first[s * stride + mp * dp + r];
    const float lse = MergeLsePartials(first + r * dp, stride, lses, t.splits, dp, merged);
    StoreOutputRow(p, it, r, merged, lse);
  }
}

inline void FillRunInfo(const Tiling& t, int64_t items, int threads, FlashRunInfo* info) {
  info->target = HWY_TARGET;
  info->q_rows = t.rows_padded;
  info->key_tile = t.key_tile;
  // Narrow tiles use QDotKRows: 4 rows x 1 key of dot products.
  info->score_rows = t.narrow ? 4 : static_cast<int>(kWideRowVecs * hn::Lanes(DF()));
  info->score_keys = t.narrow ? 1 : kWideKeys;
  info->value_rows = kValueRows;
  info->value_cols = static_cast<int>(kValueColVecs * hn::Lanes(DF()));
  info->splits = t.splits;
  info->items = items;
  info->threads = threads;
}

// Computes one problem (not ragged) on this target. The workspace grows on
// first use only; the pool is reused.
inline absl::Status FlashForwardOne(const FlashParams& p, ThreadPool* pool, Workspace* ws,
                                    FlashRunInfo* info) {
  const Tiling t = PlanTiling(p);
  ATTNKIT_RETURN_IF_ERROR(ws->Reserve(pool->num_threads(), t.scratch_floats, t.partial_floats));
  const int64_t items = t.base_items * t.splits;
  float* partials = ws->shared_area();
  // Largest work first: later query tiles see more keys under causal masks.
  // Decode items (one query tile) are all alike: walk them forward, so K/V
  // storage is read in address order (10% faster than backwards on Zen 3).
  pool->Run(items, [&](int64_t w, int thread) HWY_ATTR {
    const int64_t item = t.q_tiles > 1 ? items - 1 - w : w;
    RunWorkItem(p, t, item / t.splits, item % t.splits, partials, ws->thread_area(thread));
  });
  if (t.splits > 1) {
    pool->Run(t.base_items, [&](int64_t base, int thread) HWY_ATTR {
      MergeWorkItem(p, t, base, partials, ws->thread_area(thread));
    });
  }
  FillRunInfo(t, items, pool->num_threads(), info);
  return absl::OkStatus();
}

// One sequence of a ragged batch: its problem, its plan and where its
// split-K partials live in the shared area.
struct RaggedPart {
  const FlashParams* p;
  Tiling t;
  size_t partials_at = 0;  // floats into the shared area
  double item_cost = 0;    // work estimate of one base item
};

// One unit of parallel work of a ragged batch.
struct RaggedWork {
  double cost;
  int64_t part, base, split;
};

// A ragged batch: every sequence's items in one parallel loop, so a long
// sequence next to many short ones does not leave threads idle. Work is
// estimated per item as (query rows + 8) x keys: visible pairs, plus a
// per-key term for the K/V bytes a decode row reads. An item whose estimate
// exceeds 1/32 of the batch's total is split over its keys (split-K, at most
// 16 ways), and items start in decreasing order of cost, each taken by the
// next free thread. The plan depends on the shapes only, so the output is
// the same bit for bit for any thread count.
inline absl::Status FlashForwardRagged(const FlashParams* params, size_t n, ThreadPool* pool,
                                       Workspace* ws, FlashRunInfo* info) {
  std::vector<RaggedPart> parts(n);
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    RaggedPart& part = parts[i];
    part.p = &params[i];
    part.t = PlanTiling(params[i]);
    const Tiling& t = part.t;
    const double rows = static_cast<double>(
        std::min(t.heads_per_chunk * t.q_tile, params[i].group * params[i].q_len));
    part.item_cost = (rows + 8) * static_cast<double>(params[i].KvLength(0));
    total += part.item_cost * static_cast<double>(t.base_items);
  }
  const double target = total / 32;
  size_t scratch = 0, shared = 0;
  std::vector<RaggedWork> work;
  for (size_t i = 0; i < n; ++i) {
    RaggedPart& part = parts[i];
    Tiling& t = part.t;
    const int64_t key_tiles = CeilDiv(part.p->kv_len, t.key_tile);
    const int64_t wanted =
        target > 0 ? static_cast<int64_t>(std::ceil(part.item_cost / target)) : 1;
    t.splits = std::max<int64_t>(
        1, std::min({wanted, kMinItemsBeforeSplit, std::max<int64_t>(1, key_tiles / 2)}));
    t.partial_floats = PartialFloats(t);
    part.partials_at = shared;
    shared += RoundUp(static_cast<int64_t>(t.partial_floats), kAlignFloats);
    scratch = std::max(scratch, t.scratch_floats);
    for (int64_t base = 0; base < t.base_items; ++base) {
      for (int64_t split = 0; split < t.splits; ++split) {
        work.push_back(
            {part.item_cost / static_cast<double>(t.splits), static_cast<int64_t>(i), base, split});
      }
    }
  }
  ATTNKIT_RETURN_IF_ERROR(ws->Reserve(pool->num_threads(), scratch, shared));
  std::stable_sort(work.begin(), work.end(),
                   [](const RaggedWork& a, const RaggedWork& b) { return a.cost > b.cost; });
  float* partials = ws->shared_area();
  // Time in work items per thread, for the utilisation report (two clock
  // reads per item: well under 1% of even a decode item).
  std::vector<int64_t> busy_ns(static_cast<size_t>(pool->num_threads()), 0);
  auto timed = [&busy_ns](int thread, auto&& fn) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    busy_ns[static_cast<size_t>(thread)] += std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                std::chrono::steady_clock::now() - start)
                                                .count();
  };
  const auto wall_start = std::chrono::steady_clock::now();
  pool->Run(static_cast<int64_t>(work.size()), [&](int64_t w, int thread) HWY_ATTR {
    const RaggedWork& u = work[static_cast<size_t>(w)];
    const RaggedPart& part = parts[static_cast<size_t>(u.part)];
    timed(thread, [&]() HWY_ATTR {
      RunWorkItem(*part.p, part.t, u.base, u.split, partials + part.partials_at,
                  ws->thread_area(thread));
    });
  });
  std::vector<std::pair<int64_t, int64_t>> merges;  // (part, base) of split items
  for (size_t i = 0; i < n; ++i) {
    if (parts[i].t.splits == 1) continue;
    for (int64_t base = 0; base < parts[i].t.base_items; ++base) {
      merges.emplace_back(static_cast<int64_t>(i), base);
    }
  }
  if (!merges.empty()) {
    pool->Run(static_cast<int64_t>(merges.size()), [&](int64_t w, int thread) HWY_ATTR {
      const RaggedPart& part = parts[static_cast<size_t>(merges[w].first)];
      timed(thread, [&]() HWY_ATTR {
        MergeWorkItem(*part.p, part.t, merges[w].second, partials + part.partials_at,
                      ws->thread_area(thread));
      });
    });
  }
  const double wall_ns = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                 std::chrono::steady_clock::now() - wall_start)
                                                 .count());
  // Report the plan of the sequence with the most work.
  size_t busiest = 0;
  for (size_t i = 1; i < n; ++i) {
    if (parts[i].item_cost * static_cast<double>(parts[i].t.base_items) >
        parts[busiest].item_cost * static_cast<double>(parts[busiest].t.base_items)) {
      busiest = i;
    }
  }
  FillRunInfo(parts[busiest].t, static_cast<int64_t>(work.size()), pool->num_threads(), info);
  double busy = 0;
  for (int64_t ns : busy_ns) busy += static_cast<double>(ns);
  info->utilisation = wall_ns > 0 ? busy / (wall_ns * static_cast<double>(busy_ns.size())) : 1.0;
  info->sequences = static_cast<int64_t>(n);
  return absl::OkStatus();
}

// Computes `n` problems (one, or the sequences of a ragged batch).
inline absl::Status FlashForward(const FlashParams* params, size_t n, ThreadPool* pool,
                                 Workspace* ws, FlashRunInfo* info) {
  if (n == 1) return FlashForwardOne(params[0], pool, ws, info);
  return FlashForwardRagged(params, n, pool, ws, info);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#endif  // toggle guard
