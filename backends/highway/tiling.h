// The forward's tiling plan: how a problem is cut into work items (query
// heads x positions x key ranges) and tiles, and each thread's scratch
// layout. Plain C++, compiled once; the target's kernel shape is a parameter.
#ifndef ATTNKIT_BACKENDS_HIGHWAY_TILING_H_
#define ATTNKIT_BACKENDS_HIGHWAY_TILING_H_

#include <cstddef>
#include <cstdint>

#include "backends/highway/flash_params.h"
#include "core/problem.h"

namespace attnkit {
namespace highway_plan {

constexpr int64_t kMinItemsBeforeSplit = 16;  // split K below this many items
constexpr size_t kAlignFloats = 16;           // 64-byte sub-buffer alignment
// Direct decode tiles prefetch the K and V rows about kAheadBytes (of each)
// past the tile, a line at a time from inside the product kernels
// (AheadRows), and 16-bit tiles hold kDirectKeyTile16 keys. On Zen 3
// (d = 128, B = 8) 8, 16 and 32 KiB ahead and 16-64-key fp32 tiles were
// within this machine's noise of each other; 8 KiB disturbs L1 least.
constexpr int64_t kAheadBytes = 8 << 10;
// Floats between f32 rows of n values that P.V reads a column block at a
// time: n, one line more where n is a multiple of 256 (1 KiB: MLA's 512).
// At such a stride the block's lines of successive rows fall into a few L1
// sets and evict each other. Zen 5, MLA decode B8 H128 d576/512 bf16, one
// thread: P.V 28.4 -> 20.8 ms over the padded scratch V tile (75 -> 99 % of
// a thread's peak), 25.4-27.5 -> 23.8-24.8 ms over prepared rows.
inline int64_t PaddedRowFloats(int64_t n) { return n % 256 == 0 ? n + 16 : n; }
constexpr int64_t kDirectKeyTile16 = 16;
// Direct tiles of 32-bit and int8 rows hold at most this many keys. Direct
// tiles start at multiples of their (power-of-two) size, so with pages of at
// least kMinPageSize keys a tile never crosses a page, and a paged problem
// runs exactly the tiles of its dense twin (bit for bit the same output).
constexpr int64_t kDirectKeyTile = 16;
static_assert(kMinPageSize % kDirectKeyTile == 0, "direct tiles must not cross pages");
// Packed direct tiles of int8 rows hold up to this many keys: their per-tile
// work (the softmax update, the scale passes) is then spread over twice the
// keys. Zen 5, B8 H32/8 Tk4096 d128 decode, one thread, alternating runs
// against 16-key tiles (phase_bench, 5 rounds, min / median): int8 FAST
// 4.14 / 5.00 -> 3.88 / 4.18 ms, int8 4.69 / 5.15 -> 4.47 / 4.63; at two
// threads within the host's noise. fp8 measured no faster at one thread
// and slower at two (2.71 -> 3.11 ms, best of 5) and keeps kDirectKeyTile;
// bf16 rows got slower with 32 (5.9-6.0 -> 6.4-6.7) and keep
// kDirectKeyTile16. Such a tile may span kMaxTileRuns pages of kMinPageSize
// keys: the packed kernel reads it run by run (TileRuns, one page's rows
// each), so a paged problem still computes its dense twin's tiles.
// 64 keys (16 KiB of K and V at d = 128) against those 32, same problem
// and machine, alternating runs of three rounds: int8 FAST one thread
// 4.96-5.00 -> 4.70-4.93 ms (phase_bench), two 2.57-2.58 -> 2.50-2.54
// (phase_bench; `compare`, which reads 256 MiB between calls, within its
// noise: 2.76-2.96 -> 2.84-2.86); int8 one thread within the noise, two
// (`compare`) 3.69-3.78 -> 3.47-3.56 ms.
constexpr int64_t kPackedInt8KeyTile = 64;
// Packed tiles of fp8 rows under FAST (x86_dot::Fp8QDotK4, Fp8WeightedSumV4)
// hold up to 64 keys (16 KiB of K and V at d = 128), spreading the per-tile
// work further: Zen 5, B8 H32/8 Tk4096 d128 E4M3 decode, alternating runs
// against 32-key tiles (phase_bench, 3 rounds): one thread 6.35-6.65 ->
// 6.11-6.42 ms, two 3.26-3.35 -> 3.12-3.22 ms.
constexpr int64_t kPackedFp8KeyTile = 64;
// Direct bf16 tiles under FAST, with bf16 products (x86_dot::BF16QDotK4,
// BF16WeightedSumV4), hold up to this many keys, 16 KiB of K and V at d =
// 128: each tile's P.V permutes O's columns in and out, and its softmax
// and masks have a cost per tile. Zen 5, B8 H32/8 Tk4096 d128 bf16-kv
// FAST decode, one thread, phase_bench, two rounds: 16 keys 4.30-4.54 ms,
// 32 keys 3.91-4.02, 64 keys 3.90-4.09.
constexpr int64_t kPackedBF16KeyTile = 32;
constexpr int kMaxTileRuns = static_cast<int>(kPackedFp8KeyTile / kMinPageSize);
static_assert(kPackedInt8KeyTile % kMinPageSize == 0 && kPackedFp8KeyTile % kMinPageSize == 0 &&
                  kPackedBF16KeyTile % kMinPageSize == 0,
              "a packed tile must hold whole minimum pages (tiles start at its multiples)");
static_assert(kPackedInt8KeyTile <= kPackedFp8KeyTile && kPackedBF16KeyTile <= kPackedFp8KeyTile,
              "a packed tile spans at most kMaxTileRuns runs");
constexpr int64_t kMaxKeyTile = 64;  // every key_tile PlanTiling chooses is at most this

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t RoundUp(int64_t a, int64_t b) { return CeilDiv(a, b) * b; }
inline int64_t FloorPow2(int64_t a) {
  int64_t p = 1;
  while (p * 2 <= a) p *= 2;
  return p;
}

// What the plan needs to know of one target's kernels (microkernels-inl.h,
// packed_scores-inl.h); the per-target code fills it (KernelShapeOfTarget).
struct KernelShape {
  int64_t lanes;            // f32 lanes of one vector
  int64_t value_rows;       // kValueRows: rows of the P.V register tile
  int64_t narrow_row_vecs;  // kNarrowRowVecs, kWideRowVecs: vectors of query
  int64_t wide_row_vecs;    // rows of the QK^T register tile
  int64_t narrow_keys;      // kNarrowKeys: key step of narrow tiles
  bool bf16_pairs;          // kHaveBF16Pairs
  bool packed_scores;       // kHavePackedScores
  bool bf16_dots;           // x86_dot's bf16 kernels run here (AVX-512, AVX512_BF16)
};

// How the problem is cut into work items and tiles.
struct Tiling {
  int64_t heads_per_chunk;  // query heads of one kv head processed together
  int64_t head_chunks;      // ceil(group / heads_per_chunk)
  int64_t q_tile;           // query positions per item
  int64_t q_tiles;
  int64_t rows_padded;  // heads_per_chunk * q_tile, padded for the kernels
  int64_t key_tile;
  int64_t dp;          // head_dim padded to Lanes: Q and K rows
  int64_t dvp;         // value_dim padded to Lanes: V rows and the O accumulator
  int64_t base_items;  // B * G * head_chunks * q_tiles
  int64_t splits;      // key ranges per base item (split-K)
  bool narrow;         // rows fit one vector: use the 8-key x 1-vector QK^T
  bool direct;         // narrow, and K/V rows are read from storage as is
  bool bf16_pairs;     // direct bf16 read as BF16Pairs (columns permuted)
  bool packed;         // direct, with packed score tiles (packed_scores-inl.h)
  // packed bf16 tiles under FAST with x86_dot's bf16 kernels (BF16QDotK4,
  // BF16WeightedSumV4), which read the rows as they lie (not as BF16Pairs)
  bool bf16_dec;
  int64_t ahead_keys;  // direct: keys past the tile whose rows are prefetched
  bool ahead_into_l1;  // direct: prefetch them into L1 (AheadRows::into_l1)
  // Per-thread scratch offsets, in floats.
  size_t off_qt, off_q, off_k, off_v, off_s, off_o, off_m, off_l, off_alpha, off_kb, off_ke,
      off_bad, off_row, off_qrow, off_pp, off_q8, off_qsum, off_qscale, off_alibi_slope,
      off_alibi_diag, off_qfold,  // off_qfold: fp8 direct Q rows times 2^bias
      off_qhalf,                  // off_qhalf: E4M3 direct Q rows times 2^8 (Fp8HalfFolded)
      off_qbf,                    // off_qbf: fp8 direct Q rows as bf16 (FAST)
      off_qb16;                   // off_qb16: bf16 direct Q rows as bf16 (BF16QDotK4)
  int64_t ldq8;                   // bytes per int8 Q row of the VNNI tiles
  int64_t ldqb16;                 // values per bf16 Q row of off_qb16
  int64_t ldv;  // floats between rows of the f32 V tile at off_v (PaddedRowFloats)
  size_t scratch_floats;
  size_t partial_floats;  // split-K partials: [base_items, splits, rows, dvp + 1]
  // The threads that run the plan's items at once (the pool's, at most
  // one per item), set by the caller after planning, unlike the rest,
  // which the problem alone decides: it chooses prefetch schedules
  // (sdpa-inl.h's pv_v_ahead_l2), never what is computed.
  int threads = 1;
};

// Floats of t's split-K partials: [base_items, splits, rows_padded, dvp + 1]
// (0 without splits). Set again whenever t.splits changes.
size_t PartialFloats(const Tiling& t);

// The tiling of one problem (not ragged) for kernels of shape `k`. Split-K
// depends on the shape only, never on the thread count.
Tiling PlanTiling(const FlashParams& p, const KernelShape& k);

// One work item: query heads [h0, h0 + nh) of kv head g in batch b at
// positions [q0, q0 + nq), over keys [k_begin, k_end).
struct Item {
  int64_t b, g, h0, nh, q0, nq;
  int64_t k_begin, k_end;
};

// Split `split` of base item `base` (base items in order q tile, head
// chunk, kv head, batch entry, the first fastest).
Item DecodeItem(const FlashParams& p, const Tiling& t, int64_t base, int64_t split);

}  // namespace highway_plan
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_HIGHWAY_TILING_H_
