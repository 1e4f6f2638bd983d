// The forward's tiling plan (tiling.h): tiles, items and scratch offsets
// from the problem's shape and the target's kernel shape.
#include "backends/highway/tiling.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backends/highway/flash_params.h"
#include "core/dtype.h"
#include "core/mask.h"

namespace attnkit {
namespace highway_plan {

size_t PartialFloats(const Tiling& t) {
  return t.splits > 1 ? static_cast<size_t>(t.base_items * t.splits * t.rows_padded * (t.dvp + 1))
                      : 0;
}

Tiling PlanTiling(const FlashParams& p, const KernelShape& k) {
  Tiling t;
  const int64_t d = p.head_dim, dv = p.value_dim;
  // Rows of an item share each K/V row it reads. Above 256 dims 32 rows
  // keep the tiles in L2, but a decode item's rows are the group's heads
  // alone (MLA: 128 over one latent head), and with 32 of them each K/V row
  // (and the f32 V prepared from it) streamed from memory four times: Zen 5,
  // MLA decode B8 H128 d576/512 bf16, one thread, alternating: 63-70 ms at
  // 32 rows, 48-50 at 64, 43-46 at 128.
  const int64_t target_rows = std::max(d, dv) <= 256 ? 64 : p.q_len == 1 ? 128 : 32;
  t.head_chunks = CeilDiv(p.group, target_rows);
  t.heads_per_chunk = CeilDiv(p.group, t.head_chunks);
  t.q_tile = std::min<int64_t>(p.q_len, std::max<int64_t>(1, target_rows / t.heads_per_chunk));
  t.q_tiles = CeilDiv(p.q_len, t.q_tile);
  const int64_t rows = t.heads_per_chunk * t.q_tile;
  t.narrow = rows <= k.lanes;
  const int64_t row_block =
      std::max<int64_t>(k.value_rows, (t.narrow ? k.narrow_row_vecs : k.wide_row_vecs) * k.lanes);
  t.rows_padded = RoundUp(rows, row_block);
  t.dp = RoundUp(d, k.lanes);
  t.dvp = RoundUp(dv, k.lanes);
  // Decode reads K and V in place (converting 16-bit types in registers):
  // the kernels load whole vectors, so rows must be contiguous and d a
  // multiple of Lanes (d and Ev); otherwise tiles are converted to f32
  // scratch first.
  // A dense mask can hide a key from every row of a tile; such V rows must be
  // zeroed (0 * NaN is NaN), which needs the scratch copy, so it reads tiles.
  // Structured masks never hide a key inside an item's range from all rows.
  t.direct = t.narrow && p.k.dtype == p.v.dtype && p.k.strides[3] == 1 && p.v.strides[3] == 1 &&
             p.k_row_stride > 0 && p.v_row_stride > 0 && t.dp == d && t.dvp == dv &&
             p.blocked == nullptr;
  t.packed = k.packed_scores && t.direct;
  t.bf16_dec = t.packed && k.bf16_dots && p.k.dtype == DType::kBF16 && p.fast;
  // Decode-like tiles (one vector of rows) do little work per key: keep the
  // converted K and V tile (key_tile x (dp + dvp) floats) within 16 KiB of L1.
  const int64_t kv_floats = (t.dp + t.dvp) / 2;  // per key and tensor, on average
  t.key_tile = t.narrow ? std::min<int64_t>(kMaxKeyTile, RoundUp(2048 / kv_floats, k.narrow_keys))
                        : (std::max(d, dv) <= 256 ? kMaxKeyTile : kMaxKeyTile / 2);
  if (t.direct) {  // a power of two (kDirectKeyTile, kPackedInt8KeyTile)
    // fp8 under FAST too (x86_dot::Fp8QDotK4, Fp8WeightedSumV4; tiles that
    // fall back run the f32 products run by run alike).
    const bool fp8_fast = IsFp8(p.k.dtype) && p.round_q;
    if (fp8_fast && k.packed_scores) {
      t.key_tile = std::min(kPackedFp8KeyTile, FloorPow2(std::max<int64_t>(1, 8192 / kv_floats)));
    } else if (t.bf16_dec) {  // 32 keys: 16 KiB at d = 128
      t.key_tile = std::min(kPackedBF16KeyTile, FloorPow2(std::max<int64_t>(1, 4096 / kv_floats)));
    } else if (p.k.dtype == DType::kI8 && k.packed_scores) {  // 64 keys: 16 KiB at d = 128
      t.key_tile = std::min(kPackedInt8KeyTile, FloorPow2(std::max<int64_t>(1, 8192 / kv_floats)));
    } else {
      const int64_t cap = DTypeSize(p.k.dtype) == 2 ? kDirectKeyTile16 : kDirectKeyTile;
      t.key_tile = std::min(cap, FloorPow2(std::max<int64_t>(1, 2048 / kv_floats)));
    }
  }
  // BF16Pairs permutes the columns of Q, K, V and O alike, in blocks of two
  // vectors: both padded dims must be whole blocks.
  t.bf16_pairs = k.bf16_pairs && t.direct && !t.bf16_dec && p.k.dtype == DType::kBF16 &&
                 t.dp % (2 * k.lanes) == 0 && t.dvp % (2 * k.lanes) == 0;
  const int64_t row_bytes = d * static_cast<int64_t>(DTypeSize(p.k.dtype));
  t.ahead_keys = std::max<int64_t>(t.key_tile, kAheadBytes / row_bytes);
  // f32 rows that lie back to back (dense BHTD) only: see AheadRows.
  t.ahead_into_l1 = t.direct && DTypeSize(p.k.dtype) == 4 && !p.kv_rows.paged() &&
                    p.k_row_stride == d && p.v_row_stride == dv;
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
  t.ldv = PaddedRowFloats(t.dvp);
  t.off_v = take(t.direct ? 0 : kt * t.ldv);
  // Packed tiles hold key_tile rounded up to whole vectors (at most 4 keys
  // each) for each row group of 4 rows (4 * groups <= rows_padded).
  t.off_s = take((t.packed ? RoundUp(kt, 4) : kt) * mp);
  t.off_o = take(mp * t.dvp);
  t.off_m = take(mp);
  t.off_l = take(mp);
  t.off_alpha = take(mp);
  t.off_kb = take(mp);
  t.off_ke = take(mp);
  t.off_bad = take(mp);
  t.off_alibi_slope = take(p.alibi_vector ? mp : 0);  // AddAlibi's per-row slope and diagonal
  t.off_alibi_diag = take(p.alibi_vector ? mp : 0);
  t.off_row = take(t.bf16_pairs ? std::max(t.dp, t.dvp) : 0);  // a Q or an O row
  t.off_qrow = take(d);  // LoadQueryPairs' and LoadQueryInt8's row
  // bf16 dot products (wide tiles): P as bf16 pairs, [key_tile / 2, mp].
  t.off_pp = take(t.narrow ? 0 : RoundUp(kt, 2) / 2 * mp);
  // VNNI decode (direct int8 tiles, FAST): int8 Q rows [mp, ldq8] (ldq8 =
  // d rounded up to 64 bytes), then mp int32 row sums and mp row scales.
  t.ldq8 = RoundUp(d, 64);
  const bool int8_q = t.direct && p.k.dtype == DType::kI8 && p.round_q;
  t.off_q8 = take(int8_q ? mp * t.ldq8 / 4 : 0);
  t.off_qsum = take(int8_q ? mp : 0);
  t.off_qscale = take(int8_q ? mp : 0);
  // Direct fp8 tiles: Q rows [mp, dp] times 2^bias (Fp8Folded); under FAST
  // also Q rows as bf16 in x86_dot::Fp8QDotK4's block layout, [mp, 4 d]
  // two-byte values.
  t.off_qfold = take(t.packed && IsFp8(p.k.dtype) ? mp * t.dp : 0);
  // and E4M3's times 2^8 (Fp8HalfFolded), [mp, dp].
  t.off_qhalf = take(t.packed && p.k.dtype == DType::kF8E4M3 ? mp * t.dp : 0);
  t.off_qbf = take(t.packed && IsFp8(p.k.dtype) && p.round_q ? mp * 2 * d : 0);
  // Direct bf16 tiles under FAST: Q rows as bf16 for x86_dot::BF16QDotK4,
  // [mp, ldqb16] two-byte values, zero past d.
  t.ldqb16 = RoundUp(d, 32);
  t.off_qb16 = take(t.bf16_dec ? mp * t.ldqb16 / 2 : 0);
  t.scratch_floats = off;
  t.partial_floats = PartialFloats(t);
  return t;
}

Item DecodeItem(const FlashParams& p, const Tiling& t, int64_t base, int64_t split) {
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

}  // namespace highway_plan
}  // namespace attnkit
