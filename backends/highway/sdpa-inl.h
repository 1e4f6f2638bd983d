// Per-target flash attention: query tiles (all heads of one kv-head group at
// a few positions) stream over key/value tiles with an online softmax, so the
// Tq x Tk score matrix never exists. This file holds the compute loop and its
// execution; the plans are plain C++ (tiling.h, ragged_schedule.h), loads and
// masks per-target headers of their own. Included once per target (toggle guard).

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
#include "backends/highway/masking-inl.h"
#include "backends/highway/microkernels-inl.h"
#include "backends/highway/packed_scores-inl.h"
#include "backends/highway/phase_timing.h"
#include "backends/highway/ragged_schedule.h"
#include "backends/highway/sdpa.h"
#include "backends/highway/tile_loads-inl.h"
#include "backends/highway/tiling.h"
#include "backends/highway/workspace.h"
#include "backends/highway/x86_dot.h"
#include "core/fast_compute.h"
#include "core/mask.h"
#include "core/sinks.h"
#include "core/status_macros.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "platform/prefetch.h"
#include "platform/thread_pool.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {

using highway_plan::CeilDiv;
using highway_plan::DecodeItem;
using highway_plan::Item;
using highway_plan::kDirectKeyTile;
using highway_plan::KernelShape;
using highway_plan::kMaxKeyTile;
using highway_plan::PaddedRowFloats;
using highway_plan::PlanRagged;
using highway_plan::PlanTiling;
using highway_plan::RaggedPart;
using highway_plan::RaggedSchedule;
using highway_plan::RaggedWork;
using highway_plan::RoundUp;
using highway_plan::Tiling;

// Which products run in the storage type (x86_dot.h), for one problem on
// this target: decided per call, the same for every item.
//   bf16_qk: wide tiles, bf16 K, and Q bf16 or rounded to it (FAST):
//            vdpbf16ps on Q pairs against K storage (no K conversion).
//   bf16_pv: also FAST with bf16 V: P rounded to bf16, vdpbf16ps against V
//            packed in key pairs (no V conversion).
//   vnni_qk: direct (decode) int8 tiles under FAST: Q quantized per row,
//            vpdpbusd against K storage.
//   vnni_256: vnni_qk (and vnni_pv) by AVX-VNNI's 256-bit vpdpbusd
//            (AvxVnniQDotK4, AvxVnniWeightedQuadsV4), not AVX512_VNNI's
//            (VnniQDotK4, WeightedQuadsV4).
//   vnni_pv: also int8 V: P times V's scales quantized to u8 per row and
//            tile, vpdpbusd against V storage.
//   fp8_bf16: direct (decode) fp8 tiles under FAST (AVX-512 with BF16 and
//            VBMI): Q and P rounded to bf16, the codes widened to bf16 by
//            byte tables, vdpbf16ps (Fp8QDotK4, Fp8WeightedSumV4).
//   fp8_fma: direct (decode) fp8 tiles that widen codes to f32 (Fp8Folded:
//            Q and the V scales fold 2^bias, no special code and at most
//            kFp8SubnormalCodesFolded subnormal ones), on CPUs
//            whose vdpbf16ps does not outrun their FMAs (!PreferBF16Dot:
//            Intel's, where it was measured), EXACT and FAST: Q.K by
//            Fp8FmaQDotK4, P.V by the f32 kernels.
//   bf16_dec: direct (decode) bf16 tiles under FAST: Q and P rounded to
//            bf16, vdpbf16ps on Q rows against K storage (BF16QDotK4) and
//            on P against pairs of V rows (BF16WeightedSumV4). (Under
//            EXACT, bf16 Q alone, with P.V in f32, ran slower than the f32
//            kernels on BF16Pairs: Zen 5, B8 H32/8 Tk4096 d128 all-bf16
//            decode, one thread, 4.80-4.84 -> 5.36-5.52 ms.)
// Only on CPUs that have the instructions, and on AVX-512 targets but for
// vnni_qk and vnni_pv, which the AVX2 target also takes with AVX-VNNI (the
// 256-bit kernels, which give the 512-bit ones' bits; AVX-512 targets keep
// the 512-bit ones where the CPU has both). A forced or capped lower
// target keeps the f32 kernels.
struct DotChoice {
  bool bf16_qk = false;
  bool bf16_pv = false;
  bool amx = false;  // bf16_qk and bf16_pv's products on AMX tiles
  bool vnni_qk = false;
  bool vnni_256 = false;
  bool vnni_pv = false;
  bool fp8_bf16 = false;
  bool fp8_fma = false;
  bool bf16_dec = false;
};
inline DotChoice ChooseDots(const FlashParams& p, const Tiling& t) {
  DotChoice c;
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
  // Direct tiles need only d % 8 == 0 here (8 f32 lanes); the kernel
  // steps 16 bytes at least.
  c.vnni_qk = t.packed && p.k.dtype == DType::kI8 && p.round_q && p.head_dim % 16 == 0 &&
              x86_dot::HaveAvxVnni();
  c.vnni_256 = c.vnni_qk;
  c.vnni_pv = c.vnni_qk && p.fast && p.v.dtype == DType::kI8;
#elif HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // K storage read in pairs along d: contiguous rows and an even d. d a
  // multiple of Lanes keeps dp == d for the V rows read as storage.
  const bool bf16_operands = !t.narrow && p.k.dtype == DType::kBF16 &&
                             (p.q.dtype == DType::kBF16 || p.round_q) && p.k.strides[3] == 1 &&
                             p.head_dim % 16 == 0 && t.dp == p.head_dim && x86_dot::HaveBF16Dot();
  // AMX takes d in steps of 32 (a tile row is 32 bf16); the choice is the
  // problem's, so paged and dense runs of it multiply alike. vdpbf16ps only
  // where it outruns the FMAs (PreferBF16Dot).
  c.amx = bf16_operands && p.head_dim % 32 == 0 && x86_dot::HaveAmxBF16();
  c.bf16_qk = bf16_operands && (c.amx || x86_dot::PreferBF16Dot());
  c.bf16_pv = c.bf16_qk && p.fast && p.v.dtype == DType::kBF16 && p.v.strides[3] == 1 &&
              p.value_dim % 16 == 0 && t.dvp == p.value_dim;
  c.vnni_qk = t.packed && p.k.dtype == DType::kI8 && p.round_q && x86_dot::HaveVnni();
  c.vnni_pv = c.vnni_qk && p.fast && p.v.dtype == DType::kI8;
  c.fp8_bf16 = t.packed && IsFp8(p.k.dtype) && p.round_q && p.head_dim % 16 == 0 &&
               x86_dot::HaveFp8BF16Dot() && x86_dot::PreferBF16Dot();
  c.fp8_fma = t.packed && IsFp8(p.k.dtype) && x86_dot::HaveFp8FmaDot() && !x86_dot::PreferBF16Dot();
  // Planned with this target's KernelShape::bf16_dots (PreferBF16Dot());
  // direct tiles: contiguous rows, d and Ev multiples of 16 (t.dp == d).
  c.bf16_dec = t.bf16_dec;
  static_assert(kMaxKeyTile <= static_cast<int64_t>(x86_dot::kMaxWeightedQuadsKeys),
                "WeightedQuadsV4's integer sums hold at most kMaxWeightedQuadsKeys keys");
  static_assert(kProblemMaxHeadDim <= static_cast<int64_t>(x86_dot::kMaxVnniQDotD),
                "VnniQDotK4 takes head dims up to kMaxVnniQDotD");
  static_assert(kProblemMaxHeadDim <= static_cast<int64_t>(x86_dot::kMaxFp8QDotD),
                "Fp8QDotK4 takes head dims up to kMaxFp8QDotD");
  static_assert(kMaxKeyTile <= static_cast<int64_t>(x86_dot::kMaxAmxKeys),
                "AmxWeightedSumV takes at most kMaxAmxKeys keys");
  static_assert(kMaxKeyTile <= static_cast<int64_t>(x86_dot::kMaxWeightedPairsKeys),
                "Fp8WeightedSumV4 and BF16WeightedSumV4 take at most kMaxWeightedPairsKeys keys");
  static_assert(kMaxKeyTile <= kFastWeightBlock,
                "FAST quantizes int8 V's weights per block of at most kFastWeightBlock keys "
                "(core/fast_compute.h); a tile is one block");
#else
  (void)p;
  (void)t;
#endif
  return c;
}

// This target's kernel shape, for the plans (tiling.h).
inline KernelShape KernelShapeOfTarget() {
  return {
    static_cast<int64_t>(hn::Lanes(DF())), kValueRows, kNarrowRowVecs, kWideRowVecs, kNarrowKeys,
        kHaveBF16Pairs, kHavePackedScores,
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
        x86_dot::PreferBF16Dot()
#else
        false
#endif
  };
}

#if HWY_TARGET != HWY_SCALAR  // kHavePackedScores
// One direct tile [k0, k0 + nk) of a packed item (t.packed; see
// packed_scores-inl.h): each row group's scores, then, as RunItemAs does for
// row-per-lane tiles, the pair inputs, masks and NaN flags, the online
// softmax and O = alpha * O + P.V. runs: the tile's K and V storage rows,
// a run (page) at a time, each key's products taken from its own run's rows
// in the order a one-run tile takes them (so paged equals dense bit for
// bit); k_scales, v_scales: int8 rows' scales (nk each, readable to a
// vector past nk: PackedScale); dots.vnni_qk: int8
// Q.K by x86_dot::VnniQDotK4 (AvxVnniQDotK4 if dots.vnni_256) on the rows
// LoadQueryInt8 stored. Returns false, having changed no state (m, l,
// alpha, O, the flags), when T is Fp8Finite or Fp8Folded (either format)
// and the tile holds a special code (NaN; E5M2's Inf) or many subnormal
// ones after all (Fp8RowsNeedDecoding): the caller then runs it as
// Fp8HalfFolded (E4M3 with subnormal codes alone, x86 from AVX2 up, Q and
// the V scales below kFp8HalfFoldLimit), or as Fp8E4M3 or Fp8E5M2, which
// build the special values and widen subnormal codes without f32
// subnormals (LoadFp8AsF32).
template <typename T>
bool PackedTileUpdate(const FlashParams& p, const Tiling& t, const Item& it, int64_t k0, int64_t nk,
                      TileVisibility vis, const TileRuns<T>& runs, const AheadRows<T>& k_ahead,
                      const AheadRows<T>& v_ahead, const float* HWY_RESTRICT k_scales,
                      const float* HWY_RESTRICT v_scales, const DotChoice& dots, float* scratch) {
  const int64_t dp = t.dp, dvp = t.dvp, rows = it.nh * it.nq;
  const int64_t groups = CeilDiv(rows, kGroupRows);
  const int64_t nk4 = RoundUp(nk, static_cast<int64_t>(PackedKeysPerVec()));
  const ScoreLayout lay{kGroupRows, RoundUp(t.key_tile, 4) * kGroupRows};
  const size_t n = static_cast<size_t>(nk4) * kGroupRows;  // floats per group tile
  const float* HWY_RESTRICT qrows = scratch + (kFp8FoldedTag<T> ? t.off_qfold
                                               : kFp8HalfTag<T> ? t.off_qhalf
                                                                : t.off_q);
  float* HWY_RESTRICT s = scratch + t.off_s;
  float* HWY_RESTRICT o = scratch + t.off_o;
  float* HWY_RESTRICT m = scratch + t.off_m;
  float* HWY_RESTRICT l = scratch + t.off_l;
  float* HWY_RESTRICT alpha = scratch + t.off_alpha;
  float* HWY_RESTRICT kb = scratch + t.off_kb;
  float* HWY_RESTRICT ke = scratch + t.off_ke;
  float* HWY_RESTRICT bad = scratch + t.off_bad;
  const float kNegInf = -std::numeric_limits<float>::infinity();
  constexpr bool kScaled = kScaledStorage<T>;  // int8 or fp8: rows times scales
  // fp8 read without building its special codes, and with subnormal codes
  // on f32 subnormals: checked for both (Fp8RowsNeedDecoding)
  constexpr bool kCheckNaN = kFp8FastTag<T>;
  // fp8 codes under FAST (dots.fp8_bf16): Q.K and P.V in bf16 (P.V in f32
  // where a row must leave out a bad V row, or a weight is not finite).
  // Paged or strided fp8 rows take no burst of V rows into L1 below:
  // Fp8QDotK4 brings them into L2 ahead, and a 64-key tile's 128 lines at
  // once stalled the tile's start on a busy host (Zen 5, B8 d128 E4M3
  // decode, alternating runs: one thread 6.15-6.23 -> 5.69-5.87 ms, two
  // 3.10-3.23 -> 2.96-3.09), though on a quiet one it gained 8-10 % on
  // dense rows (which x86_dot::L1Rows now serves, below).
  constexpr bool kFp8Codes = std::is_same<T, Fp8E4M3>::value || std::is_same<T, Fp8E5M2>::value;
  constexpr bool kE4M3Codes = std::is_same<T, Fp8E4M3>::value;
  const bool fp8_bf16 = kFp8Codes && dots.fp8_bf16;
  // bf16 rows under FAST (dots.bf16_dec): Q.K and P.V in bf16 (P.V in f32
  // as fp8's: where a weight is not finite or a row must leave out a bad V
  // row).
  const bool bf16_dec = std::is_same<T, hwy::bfloat16_t>::value && dots.bf16_dec;
  const size_t ldk = runs.ldk, ldv = runs.ldv;
  // Dense rows (back to back, no stride, not paged) spread their memory
  // requests over the tile: Q.K brings the K rows ahead (AheadRows), P.V
  // the V rows of the tile after, each a few lines a key (int8 on Intel:
  // see int8_next_k).
  //  - int8 with VNNI products on both sides, fp8 and bf16 under FAST
  //    (l1_rows):
  //    into L1 from inside their kernels (x86_dot::L1Rows says why and
  //    what it measured), Q.K also taking the tile's own V rows (int8:
  //    P.V the next tile's K rows instead, int8_next_k below).
  //  - f32 and 16-bit rows under f32 products (pv_prefetches_v): P.V's
  //    WeightedSumV brings the V rows ahead (AheadRows). B8 H32/8 Tk4096
  //    d128 decode, caches swept before each call, seven alternating rounds
  //    in one process, Zen 5 AVX-512 on a quiet host, against Q.K bringing
  //    both: bf16 one thread 4.76-5.97 -> 4.35-5.02 ms, two 2.48-3.92 ->
  //    2.37-3.44; f32 9.02 -> 8.66 and 6.36 -> 6.04 (every round won but
  //    one). int8 and fp8 rows under f32 products gained nothing or lost up
  //    to 4 %.
  //  - fp8 rows widened to f32 with Q.K by Fp8FmaQDotK4 (fp8_fma_l1, below).
  // The rest (paged or strided rows, int8 and other fp8 under f32
  // products) have Q.K bring both the K and the V rows ahead, and int8
  // under VNNI and fp8 a burst of the tile's V rows below.
  const bool dense =
      !p.kv_rows.paged() && p.k_row_stride == p.head_dim && p.v_row_stride == p.value_dim;
  const bool int8_vnni_pv = std::is_same<T, int8_t>::value && dots.vnni_pv;
  const bool l1_rows = (int8_vnni_pv || fp8_bf16 || bf16_dec) && dense;
  const bool pv_prefetches_v = sizeof(T) >= 2 && dense && !l1_rows;
  // fp8 codes widened to f32 (Fp8Folded) with Q.K by Fp8FmaQDotK4
  // (dots.fp8_fma) on dense rows: each side takes its rows ahead
  // (AheadRows: 8 KiB on, the next tile at d 128 under FAST) into L1 as
  // it goes, Q.K the K rows and P.V (WeightedSumV) the V rows, one
  // prefetch a line spread over the tile, so that the
  // check of the codes finds the V rows in L1 without a burst of them at
  // the tile's start. Against the K and V rows ahead into L2 during Q.K
  // and that burst, B8 H32/8 Tk4096 d128 E4M3 FAST decode (24), Xeon with
  // AMX, phase_bench, two threads, four alternating rounds: 3.94-4.11 ->
  // 3.82-3.88 ms (each round won); the kernel alone with the old
  // prefetches 3.85-4.16. Under EXACT (23, 16-key tiles) within the noise,
  // three rounds: old kernel and prefetches 4.74-4.99, new 4.71-4.98. Q.K
  // also asks for the K and V rows ahead into L2 (the K rows' requests
  // repeat its L1 ones; the V rows' are the new ones): with each call
  // after a problem-sized read (`phase_bench ... paired`, as `compare`'s calls,
  // three alternating rounds), 24 at one thread 10.86-11.31 -> 10.29-10.56
  // ms (41.4-42.3 -> 43.4-44.5 % of the paired read loop), two 5.36-5.50
  // -> 5.19-5.39 (43.8-44.4 -> 45.3-46.6 %), 23 at two 5.82-5.97 ->
  // 5.66-5.72 (37.7-38.4 -> 40.7-41.5 %); 24 back to back 4.59 -> 4.64.
  const bool fp8_fma = kFp8FoldedTag<T> && dots.fp8_fma;
  const bool fp8_fma_l1 = fp8_fma && dense;
  auto l1_of = [](const T* rows, size_t ld, int64_t values, size_t count) {
    return x86_dot::L1Rows{reinterpret_cast<const uint8_t*>(rows), ld * sizeof(T),
                           static_cast<size_t>(values) * sizeof(T), count};
  };
  // int8 under VNNI products on both sides, dense rows, on Intel's CPUs
  // (int8_next_k; measured there only, and on Zen 5 an earlier schedule
  // found P.V taking the next tile's V rows better than its K rows): P.V
  // takes the next tile's K rows into L1 instead of its V rows, so every
  // row reaches L1 a kernel before the kernel that reads it (Q.K takes
  // the tile's own V rows into L1, and asks for the K rows ahead into L2,
  // the 512-bit kernels the V rows ahead too at one thread, P.V with
  // several: v_ahead_l2 and pv_v_ahead_l2 below). Measured
  // with `phase_bench ... paired`, each call after a problem-sized read as
  // `compare`'s are (and as a model's decode meets a layer's cache, after
  // the other layers' traffic): B8 H32/8 Tk4096 d128
  // int8 FAST decode (19), Xeon with AMX, AVX3_DL, four alternating
  // rounds, % of the paired read loop. The next K rows against the next V
  // rows: one thread 56.6-58.2 -> 59.6-60.5 %, two even (57.6-61.6 either
  // way). Q.K's K rows ahead against none (an earlier stop's choice): two
  // threads 2.79-3.22 -> 2.70-2.93 ms (55.1-59.9 -> 57.9-62.0 %), one
  // 6.68-7.08 -> 6.55-6.82 ms (57.0-57.8 -> 59.6-60.5 %), the AVX2
  // target's AVX-VNNI kernels 46.7-51.4 -> 50.7-54.4 %; `compare` 57.2-61.1
  // -> 64.3-65.9 % (three rounds). Calls back to back, on the cache the
  // last call left in the LLC, rank the K rows ahead the other way (none
  // 2.00-2.04 ms, with them 2.33): the earlier choice was made there.
  // Q.K asking for the V rows ahead into L2 beside the K rows (so that
  // the tile's own V rows, which it takes into L1, come from L2 rather
  // than memory), four alternating rounds as above: one thread 63.3-64.1
  // -> 65.3-66.6 % (each won; seven more rounds of a scratch build that
  // switched it at run time, each won too), two 60.9-63.7 -> 61.1-65.6 %
  // (three won). Not for the AVX2 target's AVX-VNNI kernels, which have
  // less time to spare for the requests: two threads 54.7-56.3 -> 51.6-53.5
  // % (three rounds, each lost).
  const bool int8_next_k = int8_vnni_pv && l1_rows && x86_dot::IntelCpu();
  // With several threads (their cores sharing the memory system), P.V
  // asks for the V rows ahead into L2 instead of Q.K, so that the tile's
  // requests to memory go out over both kernels rather than in one burst
  // during Q.K (4 lines a key there at d 128, none in P.V). 19 with
  // `phase_bench ... paired`, Xeon with AMX, AVX3_DL, a run-time switch in
  // one build, alternating: two threads 64.0-66.2 -> 65.8-68.3 % of the
  // paired read loop (eleven rounds, each won), and in this code 61.4-67.4
  // -> 66.6-68.0 % (five rounds, four won; the median call 2.56-2.97 ->
  // 2.67-2.79 ms, as the read loop swung 35-43 GB/s); one thread lost
  // (62.9-65.5 -> 61.1-64.0 %, ten rounds of eleven, one even), so one
  // thread keeps Q.K's requests. The 512-bit kernels only, as v_ahead_l2.
  const bool pv_v_ahead_l2 = int8_next_k && !dots.vnni_256 && t.threads > 1;
  x86_dot::L1Rows pv_next;  // l1_rows: the next tile's V rows (int8_next_k: K rows), for P.V
  if (l1_rows) {            // tiles start at multiples of key_tile: the next one at k0 + nk
    const int64_t next = k0 + nk, count = std::min(t.key_tile, it.k_end - next);
    const TensorView& rows = int8_next_k ? p.k : p.v;
    if (count > 0) {
      pv_next = l1_of(static_cast<const T*>(rows.data) + p.kv_rows.Offset(rows, it.b, it.g, next),
                      int8_next_k ? ldk : ldv, int8_next_k ? p.head_dim : p.value_dim,
                      static_cast<size_t>(count));
    }
  }
  if ((kCheckNaN && !fp8_fma_l1) || (int8_vnni_pv && !l1_rows)) {
    // V's rows into L1 while Q.K runs, for fp8's check of them after it
    // (fp8_fma_l1: the last tile's P.V took them), or
    // for WeightedQuadsV4, which reads four rows at a time (int8 FAST
    // decode, one thread, against none, paired runs: median 5.96-7.29 ->
    // 5.74-6.15 ms; at two threads within the host's noise).
    for (int r = 0; r < runs.count; ++r) {
      PrefetchRowsL1(runs.v[r], ldv * sizeof(T), static_cast<size_t>(p.value_dim) * sizeof(T), 0,
                     static_cast<size_t>(runs.Keys(r)));
    }
  }
  // K's rows before Q.K: many subnormal codes would cost the FMAs a
  // microcode assist each (Fp8RowsNeedDecoding), so such a tile goes back
  // to the caller before any product. The tile before asked for the rows
  // ahead (an item's first tile excepted), and Q.K reads them from L1
  // after the check.
  if constexpr (kCheckNaN) {
    if (Fp8RowsNeedDecoding<kFp8TagE4M3<T>>(runs.k, runs.begin, runs.count, ldk,
                                            static_cast<size_t>(p.head_dim))) {
      return false;
    }
  }
  // The ahead rows (AheadRows) of the run's keys from key j0 on.
  auto ahead_from = [](const AheadRows<T>& a, int64_t j0) {
    const size_t j = static_cast<size_t>(j0);
    return j < a.count ? AheadRows<T>{a.rows + j * a.ld, a.ld, a.count - j, a.into_l1}
                       : AheadRows<T>{};
  };
  for (int64_t g = 0; g < groups; ++g) {
    float* HWY_RESTRICT sg = s + g * lay.group_stride;
    for (int r = 0; r < runs.count; ++r) {
      const int64_t j0 = runs.begin[r];
      const size_t keys = static_cast<size_t>(runs.Keys(r));
      // The first group prefetches the rows ahead (the same rows for all).
      const AheadRows<T> ka = g == 0 ? ahead_from(k_ahead, j0) : AheadRows<T>{};
      const AheadRows<T> va = g == 0 ? ahead_from(v_ahead, j0) : AheadRows<T>{};
      const x86_dot::L1Rows v_l1 =
          l1_rows && g == 0 ? l1_of(runs.v[r], ldv, p.value_dim, keys) : x86_dot::L1Rows{};
      if (std::is_same<T, int8_t>::value &&
          dots.vnni_qk) {  // int8 Q rows (LoadQueryInt8): scale * q_scale * q8.k8
        const int8_t* q8 = reinterpret_cast<const int8_t*>(scratch + t.off_q8);
        const int32_t* qsum = reinterpret_cast<const int32_t*>(scratch + t.off_qsum);
        const auto qdotk4 = dots.vnni_256 ? &x86_dot::AvxVnniQDotK4 : &x86_dot::VnniQDotK4;
        // The V rows ahead into L2 too: under l1_rows only for the 512-bit
        // kernels on Intel's CPUs (int8_next_k says why), at one thread
        // (with several P.V asks for them: pv_v_ahead_l2).
        const bool v_ahead_l2 = !l1_rows || (int8_next_k && !dots.vnni_256 && !pv_v_ahead_l2);
        qdotk4(q8 + g * kGroupRows * t.ldq8, static_cast<size_t>(t.ldq8), qsum + g * kGroupRows,
               scratch + t.off_qscale + g * kGroupRows, reinterpret_cast<const int8_t*>(runs.k[r]),
               ldk, static_cast<size_t>(p.head_dim), keys, sg + j0 * kGroupRows, kGroupRows,
               reinterpret_cast<const int8_t*>(ka.rows), ka.ld,
               v_ahead_l2 ? reinterpret_cast<const int8_t*>(va.rows) : nullptr, va.ld,
               std::min(ka.count, va.count), v_l1);
      } else if (bf16_dec) {  // bf16 Q rows (LoadQueryRowsBF16): scale * q.k
        x86_dot::BF16QDotK4(
            reinterpret_cast<const uint16_t*>(scratch + t.off_qb16) + g * kGroupRows * t.ldqb16,
            static_cast<size_t>(t.ldqb16), reinterpret_cast<const uint16_t*>(runs.k[r]), ldk,
            static_cast<size_t>(p.head_dim), keys, p.scale, sg + j0 * kGroupRows,
            reinterpret_cast<const uint16_t*>(ka.rows), ka.ld,
            l1_rows ? nullptr : reinterpret_cast<const uint16_t*>(va.rows), va.ld,
            std::min(ka.count, va.count), v_l1);
      } else if (fp8_bf16) {  // bf16 Q rows (LoadQueryBlocksBF16): scale * q.code
        const int64_t ldqb = 4 * p.head_dim;
        x86_dot::Fp8QDotK4(
            reinterpret_cast<const uint16_t*>(scratch + t.off_qbf) + g * kGroupRows * ldqb,
            static_cast<size_t>(ldqb), reinterpret_cast<const uint8_t*>(runs.k[r]), ldk,
            static_cast<size_t>(p.head_dim), keys, kE4M3Codes, p.scale, sg + j0 * kGroupRows,
            reinterpret_cast<const uint8_t*>(ka.rows), ka.ld,
            l1_rows ? nullptr : reinterpret_cast<const uint8_t*>(va.rows), va.ld,
            std::min(ka.count, va.count), v_l1);
      } else if (fp8_fma) {  // f32 Q rows times 2^bias (Fp8Folded): q.code
        const bool e4m3 = std::is_same<T, Fp8Folded<true>>::value;
        const auto* k_ahead_rows = reinterpret_cast<const uint8_t*>(ka.rows);
        const x86_dot::L1Rows k_ahead_l1 =
            fp8_fma_l1 ? l1_of(ka.rows, ka.ld, p.head_dim, ka.count) : x86_dot::L1Rows{};
        x86_dot::Fp8FmaQDotK4(qrows + g * kGroupRows * dp, static_cast<size_t>(dp),
                              reinterpret_cast<const uint8_t*>(runs.k[r]), ldk,
                              static_cast<size_t>(p.head_dim), keys, e4m3, sg + j0 * kGroupRows,
                              k_ahead_rows, ka.ld, reinterpret_cast<const uint8_t*>(va.rows), va.ld,
                              std::min(ka.count, va.count), k_ahead_l1);
      } else {
        QDotKRows(qrows + g * kGroupRows * dp, static_cast<size_t>(dp), runs.k[r], ldk,
                  static_cast<size_t>(dp), kGroupRows, kGroupRows, keys, sg + j0 * kGroupRows,
                  kGroupRows, ka,
                  // With pv_prefetches_v, K's rows stand in for V's: the
                  // kernels prefetch a pair of ahead rows per key without a
                  // branch, and a line asked for twice costs one
                  // instruction.
                  pv_prefetches_v ? ka : va);
      }
    }
    std::fill(sg + nk * kGroupRows, sg + n, kNegInf);  // keys past the tile
  }
  if constexpr (kCheckNaN) {  // V's rows are in L1 now or on their way
    if (Fp8RowsNeedDecoding<kFp8TagE4M3<T>>(runs.v, runs.begin, runs.count, ldv,
                                            static_cast<size_t>(p.value_dim))) {
      return false;
    }
  }
  if constexpr (kScaled) {  // integer dot products times the key scales
    for (int64_t g = 0; g < groups; ++g) {
      PackedScale(s + g * lay.group_stride, static_cast<size_t>(nk4), k_scales,
                  /*keep_zero=*/false);
    }
  }
  // WeightedSumV's V rows ahead from key a on (fp8_fma_l1: into L1).
  auto pv_ahead = [&](int64_t a) {
    AheadRows<T> x = ahead_from(v_ahead, a);
    x.into_l1 = x.into_l1 || fp8_fma_l1;
    return x;
  };
  const bool per_pair = p.per_pair();
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
  if (p.softcap > 0.0f && p.adds_to_scores()) AddBiasToUnblocked(p, it, k0, nk, lay, s);
  if (p.alibi_vector) {
    AddAlibi(p, it, k0, nk, lay, s, scratch + t.off_alibi_slope, scratch + t.off_alibi_diag);
  }
  // Keys some row may not see: V rows with a NaN or Inf are left out.
  int32_t bad_keys[kMaxKeyTile];
  const int64_t n_bad = per_pair || structured ? FlagNonFiniteValueRowsAt<T>(
                                                     [&runs](int64_t j) { return runs.VRow(j); },
                                                     nk, dvp, s, lay, rows, bad, bad_keys)
                                               : 0;
  // int8 V under FAST (dots.vnni_pv): each key's V row, for
  // x86_dot::WeightedQuadsV4; a tile with a bad V row takes the f32
  // products below. fp8 V under FAST likewise (Fp8WeightedSumV4): its
  // table widens NaN and Inf codes to bf16 NaN and Inf, which reach the
  // accumulators of the rows that read them (each row reads every key of a
  // tile without structure, and RunItemAs finishes a row with a non-finite
  // O as NaN); tiles where a row may not see a key flagged such V rows
  // above (n_bad).
  const bool fp8_pv = fp8_bf16 && n_bad == 0;
  const bool int_pv = std::is_same<T, int8_t>::value && dots.vnni_pv && n_bad == 0;
  const bool bf16_pv = bf16_dec && n_bad == 0;
  // (bf16 rows: pointers to T, read as x86_dot's uint16_t rows)
  const T* vrows[kMaxKeyTile + 3];
  if (int_pv || fp8_pv || bf16_pv) {
    for (int r = 0; r < runs.count; ++r) {  // a run at a time (VRow per key searched the runs)
      const T* row = runs.v[r];
      for (int64_t j = runs.begin[r]; j < runs.begin[r + 1]; ++j, row += ldv) vrows[j] = row;
    }
    // A last quad (pair for fp8 and bf16) of keys past the tile: weight 0.
    std::fill(vrows + nk, vrows + RoundUp(nk, int64_t{4}), vrows[nk - 1]);
  }
  for (int64_t g = 0; g < groups; ++g) {
    float* HWY_RESTRICT sg = s + g * lay.group_stride;
    const int64_t r0 = g * kGroupRows;
    PackedSoftmaxUpdate(sg, static_cast<size_t>(nk4), m + r0, l + r0, alpha + r0);
    // int8: P times the value scales, after l has summed P itself.
    if constexpr (kScaled) {
      PackedScale(sg, static_cast<size_t>(nk4), v_scales, /*keep_zero=*/true);
    }
    // The first group's P.V takes the next tile's V rows (int8_next_k: K
    // rows) into L1: the kernels below as they go, the f32 products (which
    // do not) here.
    const x86_dot::L1Rows next_rows = g == 0 ? pv_next : x86_dot::L1Rows{};
    // pv_v_ahead_l2: the V rows ahead into L2 too (the rows AheadRows
    // holds, within one run: dense rows).
    const x86_dot::L1Rows v_ahead_rows =
        pv_v_ahead_l2 && g == 0 ? l1_of(v_ahead.rows, v_ahead.ld, p.value_dim, v_ahead.count)
                                : x86_dot::L1Rows{};
    if (!int_pv && !fp8_pv && !bf16_pv) {
      x86_dot::PrefetchL1Rows(next_rows, 0, next_rows.count);
      x86_dot::PrefetchL2Rows(v_ahead_rows, 0, v_ahead_rows.count);
    }
    // The weights quantized to u8 and the tile's P.V one exact integer
    // sum per element, whatever its runs: unless a row's weights are not
    // finite (or tiny), which the f32 products below then take. The
    // kernels read P a quad of keys at a time; with 8 f32 lanes (AVX2) the
    // softmax stops at a pair, leaving a last quad's other pair as it was.
    const auto weighted_quads =
        dots.vnni_256 ? &x86_dot::AvxVnniWeightedQuadsV4 : &x86_dot::WeightedQuadsV4;
    if (int_pv) std::fill(sg + nk * kGroupRows, sg + RoundUp(nk, int64_t{4}) * kGroupRows, 0.0f);
    if (int_pv &&
        weighted_quads(sg, static_cast<size_t>(nk), reinterpret_cast<const int8_t* const*>(vrows),
                       static_cast<size_t>(p.value_dim), static_cast<size_t>(dvp), alpha + r0,
                       o + r0 * dvp, static_cast<size_t>(dvp), next_rows, v_ahead_rows)) {
      continue;
    }
    if (bf16_pv && x86_dot::BF16WeightedSumV4(
                       sg, static_cast<size_t>(nk), reinterpret_cast<const uint16_t* const*>(vrows),
                       static_cast<size_t>(p.value_dim), static_cast<size_t>(dvp), alpha + r0,
                       o + r0 * dvp, static_cast<size_t>(dvp), next_rows)) {
      continue;
    }
    if (fp8_pv && x86_dot::Fp8WeightedSumV4(
                      sg, static_cast<size_t>(nk), reinterpret_cast<const uint8_t* const*>(vrows),
                      static_cast<size_t>(p.value_dim), static_cast<size_t>(dvp), kE4M3Codes,
                      alpha + r0, o + r0 * dvp, static_cast<size_t>(dvp), next_rows)) {
      continue;
    }
    const float* rescale = alpha + r0;  // the first product applies it
    // Keys [j0, j1) between bad V rows, a run at a time: each key adds its
    // product to O in key order whatever the cuts (WeightedSumV's sums run
    // over keys), so the cuts change no bit.
    int64_t j0 = 0;
    for (int64_t x = 0; x <= n_bad; ++x) {
      const int64_t j1 = x < n_bad ? bad_keys[x] : nk;
      for (int64_t a = j0;;) {
        const int run = runs.RunOf(std::min(a, nk - 1));
        const int64_t b = std::max(a, std::min(j1, runs.begin[run + 1]));
        WeightedSumV(sg + a * kGroupRows, kGroupRows,
                     runs.v[run] + (a - runs.begin[run]) * static_cast<int64_t>(ldv), ldv,
                     static_cast<size_t>(b - a), rescale, kGroupRows, static_cast<size_t>(dvp),
                     o + r0 * dvp, static_cast<size_t>(dvp),
                     // (keys of bad V rows skipped: their ahead rows too)
                     (pv_prefetches_v || fp8_fma_l1) && g == 0 ? pv_ahead(a) : AheadRows<T>{});
        rescale = nullptr;
        a = b;
        if (a >= j1) break;
      }
      j0 = j1 + 1;
    }
  }
  return true;
}
#endif  // HWY_TARGET != HWY_SCALAR

// Runs one item, reading K and V as T: f32 scratch tiles, or (t.direct) the
// storage of type T itself. Passes each normalised row and its lse to
// store_row(r, row, lse). Fully blocked rows give 0 and -inf; rows that read a
// NaN or Inf give NaN and NaN (oracle/reference.h). The lse of other rows is
// computed only where it is read (p.lse, split-K partials, a sink); elsewhere
// store_row gets -inf for it and must not read it.
template <typename T, class StoreRow>
void RunItemAs(const FlashParams& p, const Tiling& t, const Item& it, float* scratch,
               const StoreRow& store_row) {
  // Q and K rows: d padded to dp; V rows and O: dv padded to dvp.
  const int64_t mp = t.rows_padded, dp = t.dp, d = p.head_dim, dvp = t.dvp, dv = p.value_dim;
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
  constexpr bool kF32Tiles = std::is_same<T, float>::value;
  ATTNKIT_PHASE_TIMER(phase_timer);  // benchmark builds only (phase_timing.h)
  const DotChoice dots = ChooseDots(p, t);
  const bool bf16_qk = kF32Tiles && dots.bf16_qk, bf16_pv = kF32Tiles && dots.bf16_pv;
  // AMX Q.K leaves the scale to the softmax (score_scale != 1) where no pass
  // between them needs scaled scores and no finite score can overflow: the
  // same rounded scores, where AmxQDotK's own pass over them took a third of
  // its call (d 128, 64 x 64, Xeon with AMX: 1.22 -> 0.83 us without it).
  const float score_scale = bf16_qk && dots.amx && !p.per_pair() && p.softcap == 0.0f &&
                                    !p.alibi_vector && p.scale > 0.0f && p.scale <= 1.0f
                                ? p.scale
                                : 1.0f;
  // Wide tiles of f32 K and V with contiguous rows of dp floats need no
  // conversion: whole tiles are read in place (rows of one run of the cache).
  const bool f32_in_place = kF32Tiles && !t.direct && !t.narrow && p.k.dtype == DType::kF32 &&
                            p.v.dtype == DType::kF32 && p.k.strides[3] == 1 &&
                            p.v.strides[3] == 1 && dp == d && dvp == dv && p.k_row_stride > 0 &&
                            p.v_row_stride > 0;
  // The bf16 tiles: Q pairs in qt's space, P pairs at off_pp, V pairs in v's.
  uint32_t* HWY_RESTRICT qp = reinterpret_cast<uint32_t*>(qt);
  uint32_t* HWY_RESTRICT pp = reinterpret_cast<uint32_t*>(scratch + t.off_pp);
  uint32_t* HWY_RESTRICT vp = reinterpret_cast<uint32_t*>(v);

  for (int64_t r = 0; r < mp; ++r) {
    m[r] = kNegInf;
    l[r] = 0.0f;
    bad[r] = 0.0f;
  }
  std::fill(o, o + mp * dvp, 0.0f);
  // BF16Pairs: position c of a row holds column perm[c] (see LoadF32Vecs);
  // Q rows are stored, and output rows come out, in that order.
  constexpr bool kPairs = std::is_same<T, BF16Pairs>::value;
  uint32_t perm[2 * HWY_MAX_BYTES / sizeof(float)];
  if (kPairs) BF16PairColumns(perm);
  const int64_t pair = 2 * static_cast<int64_t>(hn::Lanes(DF()));
  auto column_at = [&](int64_t c) { return c - c % pair + perm[c % pair]; };
  float* HWY_RESTRICT row = scratch + t.off_row;
  // fp8: Q rows times 2^bias at off_qfold (Fp8Folded), E4M3's times 2^8
  // at off_qhalf (Fp8HalfFolded).
  constexpr bool kFp8 = std::is_same<T, Fp8E4M3>::value || std::is_same<T, Fp8E5M2>::value;
  bool q_folds = false, q_halves = false;
  if (it.k_begin < it.k_end) {
    if (t.narrow && std::is_same<T, int8_t>::value && dots.vnni_qk) {
      LoadQueryInt8(p, t, it, static_cast<size_t>(t.ldq8),
                    reinterpret_cast<int8_t*>(scratch + t.off_q8),
                    reinterpret_cast<int32_t*>(scratch + t.off_qsum), scratch + t.off_qscale,
                    scratch + t.off_qrow);
    } else if (t.narrow && kFp8 && dots.fp8_bf16) {
      LoadQueryBlocksBF16(p, it, reinterpret_cast<uint16_t*>(scratch + t.off_qbf),
                          scratch + t.off_qrow);
    } else if (t.narrow && std::is_same<T, hwy::bfloat16_t>::value && dots.bf16_dec) {
      LoadQueryRowsBF16(p, it, t.ldqb16, reinterpret_cast<uint16_t*>(scratch + t.off_qb16),
                        scratch + t.off_qrow);
    } else if (t.narrow) {
      LoadQueryRows(p, t, it, qrows);
      if constexpr (kFp8) {
        if (t.packed) {
          // Every row the row groups read: the zero rows past `rows` too.
          q_folds = FoldBelowLimit(qrows, mp * dp, kFp8TwoToBias<std::is_same<T, Fp8E4M3>::value>,
                                   scratch + t.off_qfold);
          if (std::is_same<T, Fp8E4M3>::value && kFp8CountsSubnormal) {
            q_halves = FoldBelowLimit(qrows, mp * dp, kFp8HalfFactor, scratch + t.off_qhalf,
                                      kFp8HalfFoldLimit);
          }
        }
      }
    } else if (bf16_qk) {
      LoadQueryPairs(p, t, it, qp, scratch + t.off_qrow);
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

  ATTNKIT_PHASE_MARK(phase_timer, kQuery);
  const int64_t kv_length = p.KvLength(it.b);
  constexpr bool kScaled = kScaledStorage<T>;  // int8 or fp8: rows times scales
  // The item's first rows, which the kernels below do not prefetch.
  if (t.direct) {
    const int64_t first = std::min(t.ahead_keys, it.k_end - it.k_begin);
    PrefetchKeyValueRows(p, it, it.k_begin, first);
  }
  // int8 and fp8 direct tiles' row scales (zeroed: PackedScale loads whole
  // vectors of them, up to a vector past the tile's last key).
  constexpr int64_t kScales = kMaxKeyTile + HWY_MAX_BYTES / sizeof(float);
  static_assert(kMaxKeyTile >= std::max({kDirectKeyTile, highway_plan::kPackedInt8KeyTile,
                                         highway_plan::kPackedFp8KeyTile}),
                "every direct tile fits the scale arrays");
  float k_scales[kScales] = {}, v_scales[kScales] = {};
  // fp8: v_scales times 2^bias (Fp8Folded), or E4M3's times 2^8
  // (Fp8HalfFolded); unused where no target folds.
  [[maybe_unused]] float v_folded[kScales] = {};
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
    bool prepared_vtile = false;  // vtile: p.prepared_v's rows (no zero rows past nk)
    // bf16 dot products read K (and under FAST V) storage as is: row j of
    // the tile (paged rows are evenly spaced within a run only).
    auto k16_row = [&](int64_t j) {
      return static_cast<const uint16_t*>(p.k.data) + p.kv_rows.Offset(p.k, it.b, it.g, k0 + j);
    };
    auto v16_row = [&](int64_t j) {
      return static_cast<const uint16_t*>(p.v.data) + p.kv_rows.Offset(p.v, it.b, it.g, k0 + j);
    };
    if constexpr (std::is_same<T, float>::value) {
      if (!t.direct) {
        ktile = k;
        vtile = v;
        ldk = static_cast<size_t>(dp);
        ldv = static_cast<size_t>(t.ldv);
        if (bf16_qk && !bf16_pv && p.prepared_v != nullptr) {  // f32 V converted once per call
          vtile = p.prepared_v + (it.b * p.num_kv_heads + it.g) * p.prepared_stride +
                  k0 * p.prepared_ld;
          ldv = static_cast<size_t>(p.prepared_ld);
          prepared_vtile = true;
        } else if (f32_in_place && nk == nkp && p.kv_rows.RunLength(k0) >= nk) {
          // Whole f32 tiles are read where they lie (a copy was 10-14 % of
          // an f32 prefill on Zen 5): the next tile's rows are prefetched as
          // LoadKeyValueTile would.
          ktile = static_cast<const T*>(p.k.data) + p.kv_rows.Offset(p.k, it.b, it.g, k0);
          vtile = static_cast<const T*>(p.v.data) + p.kv_rows.Offset(p.v, it.b, it.g, k0);
          ldk = static_cast<size_t>(p.k_row_stride);
          ldv = static_cast<size_t>(p.v_row_stride);
          PrefetchKeyValueRows(p, it, next_k0, next_nk);
        } else if (!bf16_pv) {
          LoadKeyValueTile(p, t, it, k0, nk, nkp, next_k0, next_nk, k, v, /*with_k=*/!bf16_qk);
        }
      }
    }
    // int8 and fp8 direct tiles: the tile's row scales (TileRowScales: where
    // they lie, or gathered into k_scales and v_scales).
    [[maybe_unused]] const float* tile_k_scales = k_scales;
    [[maybe_unused]] const float* tile_v_scales = v_scales;
    AheadRows<T> k_ahead, v_ahead;  // direct: rows t.ahead_keys past this tile's
    TileRuns<T> runs;               // direct: the tile's rows, a run (page) at a time
    if (t.direct) {
      // Packed tiles read every run; the others never cross a page
      // (kDirectKeyTile), so their one run is ktile and vtile.
      const KvRows& kv = p.kv_rows;
      runs = DirectTileRuns<T>(p, it, k0, nk);
      ktile = runs.k[0];
      vtile = runs.v[0];
      ldk = runs.ldk;
      ldv = runs.ldv;
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
      if constexpr (kScaled) {
        tile_k_scales = TileRowScales(p, p.k_scale, p.k_scale_view, it, k0, nk, k_scales);
        tile_v_scales = TileRowScales(p, p.v_scale, p.v_scale_view, it, k0, nk, v_scales);
      }
    }
    ATTNKIT_PHASE_MARK(phase_timer, kKvLoad);
#if HWY_TARGET != HWY_SCALAR
    if (t.packed) {  // int8, fp8 and bf16 FAST tiles may span pages (kMaxTileRuns)
      if constexpr (kFp8) {
        if (dots.fp8_bf16) {  // FAST: bf16 dot products on the codes
          PackedTileUpdate<T>(p, t, it, k0, nk, vis, runs, k_ahead, v_ahead, tile_k_scales,
                              tile_v_scales, dots, scratch);
          ATTNKIT_PHASE_MARK(phase_timer, kDecodeTile);
          continue;
        }
        // fp8 decodes at about half the cost where a tile holds no special
        // code and few subnormal ones (Fp8Finite), cheaper still with the 2^bias
        // folded into Q and the V scales where neither can overflow
        // (Fp8Folded); a tile that holds one runs again through f16
        // (Fp8HalfFolded: E4M3 without a special code, x86 from AVX2 up) or
        // decoded (LoadFp8AsF32: NaN and Inf built, subnormal codes through
        // f16).
        constexpr bool kE4M3 = std::is_same<T, Fp8E4M3>::value;
        // The tile's storage read as tag U (the type of `tag`).
        auto update_as = [&](auto tag, const float* HWY_RESTRICT value_scales) HWY_ATTR {
          using U = decltype(tag);
          return PackedTileUpdate<U>(p, t, it, k0, nk, vis, RecastTileRuns<U>(runs),
                                     RecastAheadRows<U>(k_ahead), RecastAheadRows<U>(v_ahead),
                                     tile_k_scales, value_scales, dots, scratch);
        };
        const bool folds =
            q_folds && FoldBelowLimit(tile_v_scales, nk, kFp8TwoToBias<kE4M3>, v_folded);
        if (folds ? update_as(Fp8Folded<kE4M3>{}, v_folded)
                  : update_as(Fp8Finite<kE4M3>{}, tile_v_scales)) {
          ATTNKIT_PHASE_MARK(phase_timer, kDecodeTile);
          continue;
        }
        // E4M3 handed back for its subnormal codes alone: through f16, the
        // 2^8 folded into Q and the V scales (Fp8HalfFolded).
        if constexpr (kE4M3 && kFp8CountsSubnormal) {
          const size_t d_k = static_cast<size_t>(p.head_dim),
                       d_v = static_cast<size_t>(p.value_dim);
          if (q_halves &&
              FoldBelowLimit(tile_v_scales, nk, kFp8HalfFactor, v_folded, kFp8HalfFoldLimit) &&
              !Fp8RowsHaveSpecial<true>(runs.k, runs.begin, runs.count, runs.ldk, d_k) &&
              !Fp8RowsHaveSpecial<true>(runs.v, runs.begin, runs.count, runs.ldv, d_v)) {
            if (update_as(Fp8HalfFolded{}, v_folded)) {  // (it checks no codes: true)
              CountFp8TileRunHalf();
              ATTNKIT_PHASE_MARK(phase_timer, kDecodeTile);
              continue;
            }
          }
        }
        CountFp8TileRunDecoded();
      }
      PackedTileUpdate<T>(p, t, it, k0, nk, vis, runs, k_ahead, v_ahead, tile_k_scales,
                          tile_v_scales, dots, scratch);
      ATTNKIT_PHASE_MARK(phase_timer, kDecodeTile);
      continue;
    }
#endif
    if (t.narrow) {
      QDotKRows(qrows, dp, ktile, ldk, dp, rows, mp, nkp, s, mp, k_ahead, v_ahead);
    } else if (bf16_qk) {  // scale * Q.K from bf16 pairs, a run of rows at a time; 0 past nk
      for (int64_t j = 0, len = 0; j < nk; j += len) {
        len = std::min(nk - j, p.kv_rows.RunLength(k0 + j));
        (dots.amx ? x86_dot::AmxQDotK : x86_dot::BF16QDotK)(
            qp, static_cast<size_t>(mp), k16_row(j), static_cast<size_t>(p.k_row_stride),
            static_cast<size_t>(d), static_cast<size_t>(mp), static_cast<size_t>(len),
            score_scale == 1.0f ? p.scale : 1.0f, s + j * mp, static_cast<size_t>(mp));
      }
      std::fill(s + nk * mp, s + nkp * mp, 0.0f);
    } else {
      if constexpr (kF32Tiles) {  // K converted (ktile = k) or in place
        QDotK<kWideKeys, kWideRowVecs>(qt, mp, ktile, ldk, d, mp, nkp, s, mp);
      } else {
        QDotK<kWideKeys, kWideRowVecs>(qt, mp, k, dp, d, mp, nkp, s, mp);
      }
    }
    // int8 direct: integer dot products times the key scales (nkp == nk).
    if constexpr (kScaled) ScaleKeyColumns(s, mp, nk, mp, tile_k_scales, /*keep_zero=*/false);
    ATTNKIT_PHASE_MARK(phase_timer, kQK);
    // Raw scores: flag non-finite ones of visible pairs, then mask. Fully
    // visible tiles skip the per-element structured mask.
    const bool per_pair = p.per_pair();
    const bool structured = vis != TileVisibility::kVisible || nkp != nk;
    // A tile with no other pass over its raw scores flags them in the
    // softmax's max pass.
    const bool flag_in_max = !per_pair && !structured && p.softcap == 0.0f && !p.alibi_vector;
    if (structured) RowKeyRanges(p, t, it, k0, nk, kb, ke);
    if (per_pair) {
      ApplyPairInputs(p, it, k0, nk, /*add_bias=*/p.softcap == 0.0f, lay, s, bad);
      if (structured) MaskKeyRange(s, mp, nkp, mp, kb, ke);
    } else if (structured) {
      MaskKeyRange(s, mp, nkp, mp, kb, ke, bad);
    } else if (!flag_in_max) {
      FlagNonFiniteScores(s, mp, nkp, mp, bad);
    }
    if (p.softcap > 0.0f) {
      SoftCap(s, static_cast<size_t>(nkp * mp), p.softcap);
      if (p.adds_to_scores()) AddBiasToUnblocked(p, it, k0, nk, lay, s);
    }
    if (p.alibi_vector) {
      AddAlibi(p, it, k0, nk, lay, s, scratch + t.off_alibi_slope, scratch + t.off_alibi_diag);
    }
    // Keys some row may not see: V rows with a NaN or Inf are left out.
    int32_t bad_keys[kMaxKeyTile];
    int64_t n_bad = 0;
    // FAST bf16 P.V reads V's pairs prepared once per call where the tile
    // holds whole pairs (below): their scan leaves them in cache for it.
    const uint32_t* prepared_pairs =
        bf16_pv && p.prepared_v != nullptr && k0 % 2 == 0 && nk % 2 == 0
            ? reinterpret_cast<const uint32_t*>(p.prepared_v) +
                  (it.b * p.num_kv_heads + it.g) * p.prepared_stride + k0 / 2 * dvp
            : nullptr;
    if (prepared_pairs != nullptr && (per_pair || structured)) {
      n_bad = FlagNonFiniteValuePairs(prepared_pairs, static_cast<size_t>(dvp), nk, s, lay, rows,
                                      bad, bad_keys);
    } else if (bf16_pv && (per_pair || structured)) {  // V storage itself (dvp == dv)
      n_bad = FlagNonFiniteValueRowsAt<hwy::bfloat16_t>(
          [&](int64_t j) { return reinterpret_cast<const hwy::bfloat16_t*>(v16_row(j)); }, nk, dvp,
          s, lay, rows, bad, bad_keys);
    } else if (per_pair || structured) {
      n_bad = FlagNonFiniteValueRows(vtile, ldv, nk, dvp, s, lay, rows, bad, bad_keys);
    }
    ATTNKIT_PHASE_MARK(phase_timer, kMask);
    float* const flags = flag_in_max ? bad : nullptr;
#if HWY_TARGET == HWY_AVX3_DL && defined(__x86_64__) && defined(__GNUC__)
    // FAST bf16 P.V: P straight to bf16 pairs (bf16_pv: the CPU has BF16).
    if (bf16_pv) {
      OnlineSoftmaxUpdateToBF16Pairs(s, mp, nkp, mp, m, l, alpha, flags, structured ? ke : nullptr,
                                     pp, mp, score_scale);
    } else {
      OnlineSoftmaxUpdate(s, mp, nkp, mp, m, l, alpha, flags, score_scale);
    }
    constexpr bool kPairsFromSoftmax = true;
#else
    OnlineSoftmaxUpdate(s, mp, nkp, mp, m, l, alpha, flags, score_scale);
    constexpr bool kPairsFromSoftmax = false;
#endif
    ATTNKIT_PHASE_MARK(phase_timer, kSoftmax);
    if (bf16_pv) {  // FAST: O = alpha O + bf16(P) . V, with V rows that hold a NaN as 0
      if (!kPairsFromSoftmax) {
        x86_dot::BF16PackWeights(s, static_cast<size_t>(mp), static_cast<size_t>(nk),
                                 static_cast<size_t>(mp), pp, static_cast<size_t>(mp));
      }
      // The pairs prepared once per call serve tiles of whole pairs with no
      // NaN row to leave out; others pack their own.
      const uint32_t* vpairs = vp;
      if (prepared_pairs != nullptr && n_bad == 0) {
        vpairs = prepared_pairs;
      } else {  // rows holding a NaN or Inf as zeros
        const uint16_t* vrows[kMaxKeyTile];
        for (int64_t j = 0; j < nk; ++j) vrows[j] = v16_row(j);
        for (int64_t x = 0; x < n_bad; ++x) vrows[bad_keys[x]] = nullptr;
        x86_dot::BF16PackValues(vrows, static_cast<size_t>(nk), static_cast<size_t>(dv),
                                static_cast<size_t>(dvp), vp, static_cast<size_t>(dvp));
      }
      (dots.amx ? x86_dot::AmxWeightedSumV : x86_dot::BF16WeightedSumV)(
          pp, static_cast<size_t>(mp), vpairs, static_cast<size_t>(dvp),
          static_cast<size_t>((nk + 1) / 2), alpha, static_cast<size_t>(value_rows),
          static_cast<size_t>(dvp), o, static_cast<size_t>(dvp), structured ? ke : nullptr);
      ATTNKIT_PHASE_MARK(phase_timer, kPV);
      continue;
    }
    // int8 direct: P times the value scales, after l has summed P itself.
    if constexpr (kScaled) ScaleKeyColumns(s, mp, nk, mp, tile_v_scales, /*keep_zero=*/true);
    const float* rescale = alpha;  // the first product applies it
    int64_t j0 = 0;
    // Prepared V has no zero rows past nk: stop there (their P is 0 anyway).
    const int64_t v_end = prepared_vtile ? nk : nkp;
    for (int64_t x = 0; x <= n_bad; ++x) {
      const int64_t j1 = x < n_bad ? bad_keys[x] : v_end;
      WeightedSumV(s + j0 * mp, mp, vtile + j0 * ldv, ldv, static_cast<size_t>(j1 - j0), rescale,
                   value_rows, dvp, o, dvp);
      rescale = nullptr;
      j0 = j1 + 1;
    }
    ATTNKIT_PHASE_MARK(phase_timer, kPV);
  }

  // Without split-K the head's sink joins each row's sum here (core/sinks.h);
  // split-K partials keep their keys' lse and MergeWorkItem folds it.
  const bool fold_sink = p.sinks != nullptr && t.splits == 1;
  // A row's lse is read by split-K merges and the caller's lse output
  // only, and a sink needs it (NormalizeWithSink, below); elsewhere its log
  // is left out (a libm call a row: 1 % of a bf16 d64 prefill).
  const bool needs_lse = p.lse != nullptr || t.splits > 1;
  for (int64_t r = 0; r < rows; ++r) {
    float* orow = o + r * dvp;
    float lse = kNegInf;
    const float sink = fold_sink ? p.sinks[p.sinks_view.Offset(it.h0 + r / it.nq)] : kNegInf;
    if (bad[r] != 0.0f || !AllFinite(orow, static_cast<size_t>(dvp)) || std::isnan(sink) ||
        sink == -kNegInf) {
      // The row read a NaN or Inf (a V row's reaches its accumulator), or
      // its head's sink is NaN or +inf.
      lse = std::numeric_limits<float>::quiet_NaN();
      std::fill(orow, orow + dvp, lse);
    } else if (l[r] > 0.0f && !needs_lse && sink == kNegInf) {
      ScaleRowInPlace(orow, static_cast<size_t>(dvp), 1.0f / l[r]);  // lse unread
    } else if (l[r] > 0.0f) {
      const SinkNorm norm = NormalizeWithSink(m[r], l[r], sink);
      ScaleRowInPlace(orow, static_cast<size_t>(dvp), norm.inv);
      lse = norm.lse;
    } else {
      std::fill(orow, orow + dvp, 0.0f);
      lse = sink;  // -inf without a sink
    }
    if (kPairs) {  // back to column order
      for (int64_t c = 0; c < dvp; ++c) row[column_at(c)] = orow[c];
      orow = row;
    }
    store_row(r, orow, lse);
  }
  ATTNKIT_PHASE_MARK(phase_timer, kFinish);
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
  } else if (t.direct && p.k.dtype == DType::kF8E4M3) {
    RunItemAs<Fp8E4M3>(p, t, it, scratch, store_row);
  } else if (t.direct && p.k.dtype == DType::kF8E5M2) {
    RunItemAs<Fp8E5M2>(p, t, it, scratch, store_row);
  } else {
    RunItemAs<float>(p, t, it, scratch, store_row);
  }
}

// A vector of row as bf16, rounded to nearest even with NaN kept quiet
// (BF16FromF32's rule, core/dtype.h), in half a vector of u16.
HWY_INLINE hn::Vec<hn::Rebind<uint16_t, DF>> BF16OfVector(const float* HWY_RESTRICT row) {
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto bits = hn::BitCast(du, hn::LoadU(df, row));
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  const auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du, 0x7fffu), lsb)));
  const auto quiet = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du, 0x40u));
  const auto magnitude = hn::BitCast(di, hn::And(bits, hn::Set(du, 0x7fffffffu)));
  const auto is_nan = hn::RebindMask(du, hn::Gt(magnitude, hn::Set(di, 0x7f800000)));
  const auto out = hn::BitCast(di, hn::IfThenElse(is_nan, quiet, rounded));  // <= 0xffff
  return hn::DemoteTo(hn::Rebind<uint16_t, DF>(), out);
}

// dst[c] = row[c] as bf16 for c < n, a vector at a time (BF16OfVector):
// bf16 outputs were converted one element per call, 4 % of an all-bf16
// prefill.
HWY_INLINE void StoreRowAsBF16(const float* HWY_RESTRICT row, size_t n,
                               uint16_t* HWY_RESTRICT dst) {
  const DF df;
  const hn::Rebind<uint16_t, DF> d16;
  const size_t N = hn::Lanes(df);
  size_t c = 0;
  for (; c + N <= n; c += N) hn::StoreU(BF16OfVector(row + c), d16, dst + c);
  for (; c < n; ++c) dst[c] = BF16FromF32(row[c]);
}

// StoreRowAsBF16 with non-temporal stores of whole vectors (see
// kStreamOutputBytes): dst 64-byte aligned, n a multiple of 32. False
// where the target's vectors are narrower than two halves (SCALAR) or two
// vectors do not divide n.
HWY_INLINE bool StreamRowAsBF16(const float* HWY_RESTRICT row, size_t n,
                                uint16_t* HWY_RESTRICT dst) {
#if HWY_TARGET == HWY_SCALAR
  (void)row;
  (void)n;
  (void)dst;
  return false;
#else
  const DF df;
  const hn::Repartition<uint16_t, DF> d16;  // twice BF16OfVector's lanes
  const size_t N = hn::Lanes(df);
  if (n % (2 * N) != 0) return false;  // vectors wider than a line (not on x86)
  for (size_t c = 0; c < n; c += 2 * N) {
    hn::Stream(hn::Combine(d16, BF16OfVector(row + c + N), BF16OfVector(row + c)), d16, dst + c);
  }
  return true;
#endif
}

// f32 and bf16 outputs of at least this many bytes are written with
// non-temporal stores (past the caches: O is not read again by the call, and
// a store that misses first reads its line from memory; 5 % of a GQA d128
// prefill).
constexpr int64_t kStreamOutputBytes = int64_t{8} << 20;
inline bool StreamsOutput(const FlashParams& p) {
  const bool rows_of_lines = p.o.dtype == DType::kF32    ? p.value_dim % 16 == 0
                             : p.o.dtype == DType::kBF16 ? p.value_dim % 32 == 0
                                                         : false;
  return rows_of_lines && p.o.strides[3] == 1 &&
         p.batch * p.num_heads * p.q_len * p.value_dim *
                 static_cast<int64_t>(DTypeSize(p.o.dtype)) >=
             kStreamOutputBytes;
}

// Writes one finished row of `it` to O (and lse), converting to O's dtype;
// with fold_sink, folds the head's sink in first (core/sinks.h), in place in
// `row` (merged split-K rows; RunItem folds it into the others).
inline void StoreOutputRow(const FlashParams& p, const Item& it, int64_t r, float* HWY_RESTRICT row,
                           float lse, bool fold_sink) {
  const int64_t h = it.h0 + r / it.nq, i = it.q0 + r % it.nq;
  if (fold_sink && p.sinks != nullptr) {
    const SinkFold fold = FoldSink(lse, p.sinks[p.sinks_view.Offset(h)]);
    if (fold.scale != 1.0f) {
      ScaleRowInPlace(row, static_cast<size_t>(p.value_dim), fold.scale);
    }
    lse = fold.lse;
  }
  const int64_t base = p.o.Offset(it.b, h, i, 0);
  const int64_t cs = p.o.strides[3];
  if (p.o.dtype == DType::kF32 && cs == 1) {
    float* o32 = static_cast<float*>(p.o.data) + base;
    if (StreamsOutput(p) && reinterpret_cast<uintptr_t>(o32) % 64 == 0) {
      const DF df;
      const size_t N = hn::Lanes(df);  // divides 16, so value_dim
      for (size_t c = 0; c < static_cast<size_t>(p.value_dim); c += N) {
        hn::Stream(hn::LoadU(df, row + c), df, o32 + c);
      }
    } else {
      std::copy(row, row + p.value_dim, o32);
    }
  } else if (p.o.dtype == DType::kBF16 && cs == 1) {
    uint16_t* o16 = static_cast<uint16_t*>(p.o.data) + base;
    if (!StreamsOutput(p) || reinterpret_cast<uintptr_t>(o16) % 64 != 0 ||
        !StreamRowAsBF16(row, static_cast<size_t>(p.value_dim), o16)) {
      StoreRowAsBF16(row, static_cast<size_t>(p.value_dim), o16);
    }
  } else {
    for (int64_t c = 0; c < p.value_dim; ++c)
      StoreFromF32(p.o.data, p.o.dtype, base + c * cs, row[c]);
  }
  if (p.lse != nullptr) p.lse[p.lse_view.Offset(it.b, h, i)] = lse;
}

// Runs split `split` of base item `base` of (p, t): stores the rows, or
// (split-K) writes them and their lse to the item's slot of `partials`
// ([base_items * splits, rows_padded, dvp + 1], lse after the rows).
inline void RunWorkItem(const FlashParams& p, const Tiling& t, int64_t base, int64_t split,
                        float* partials, float* scratch) {
  const Item it = DecodeItem(p, t, base, split);
  if (t.splits == 1) {
    RunItem(p, t, it, scratch,
            [&](int64_t r, float* row, float lse) { StoreOutputRow(p, it, r, row, lse, false); });
    if (StreamsOutput(p)) hwy::FlushStream();  // this thread's stores before the pool's join
    return;
  }
  const int64_t mp = t.rows_padded, dvp = t.dvp;
  float* part = partials + static_cast<size_t>(base * t.splits + split) * mp * (dvp + 1);
  RunItem(p, t, it, scratch, [&](int64_t r, const float* row, float lse) {
    std::copy(row, row + dvp, part + r * dvp);
    part[mp * dvp + r] = lse;
  });
}

// Merges the split-K partials of base item `base` through their
// log-sum-exp and stores its rows.
inline void MergeWorkItem(const FlashParams& p, const Tiling& t, int64_t base,
                          const float* partials, float* scratch) {
  const Item it = DecodeItem(p, t, base, 0);
  const int64_t mp = t.rows_padded, dvp = t.dvp;
  float* lses = scratch + t.off_m;  // t.splits <= kMinItemsBeforeSplit floats
  float* merged = scratch + t.off_o;
  const size_t stride = static_cast<size_t>(mp * (dvp + 1));
  const float* first = partials + static_cast<size_t>(base * t.splits) * stride;
  for (int64_t r = 0; r < it.nh * it.nq; ++r) {
    for (int64_t s = 0; s < t.splits; ++s) lses[s] = first[s * stride + mp * dvp + r];
    const float lse = MergeLsePartials(first + r * dvp, stride, lses, t.splits, dvp, merged);
    StoreOutputRow(p, it, r, merged, lse, /*fold_sink=*/true);
  }
  if (StreamsOutput(p)) hwy::FlushStream();
}

// products: what the problem's tiles run (a tile that cannot, such as an
// int8 tile whose weights hold a NaN, takes the f32 products instead).
inline void FillRunInfo(const FlashParams& p, const Tiling& t, int64_t items, int threads,
                        FlashRunInfo* info) {
  const DotChoice dots = ChooseDots(p, t);
  info->products = dots.amx && dots.bf16_pv        ? "qk=bf16amx pv=bf16amx"
                   : dots.amx                      ? "qk=bf16amx"
                   : dots.bf16_pv                  ? "qk=bf16dot pv=bf16dot"
                   : dots.bf16_qk                  ? "qk=bf16dot"
                   : dots.vnni_256 && dots.vnni_pv ? "qk=int8avxvnni pv=u8avxvnni"
                   : dots.vnni_256                 ? "qk=int8avxvnni"
                   : dots.vnni_pv                  ? "qk=int8vnni pv=u8vnni"
                   : dots.vnni_qk                  ? "qk=int8vnni"
                   : dots.fp8_bf16                 ? "qk=fp8bf16dot pv=fp8bf16dot"
                   : dots.fp8_fma                  ? "qk=fp8fma"
                   : dots.bf16_dec                 ? "qk=bf16dot4 pv=bf16dot4"
                                                   : "";
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
// The bf16 tiles' V, once per call instead of once per item (each query
// tile of a head re-read and re-converted every V tile it sees: 14 % of an
// all-bf16 d64 prefill, 9 % packing pairs under FAST): per (b, g), V as f32
// rows (EXACT) or bf16 key pairs (FAST), at `out`, laid out as
// p.prepared_ld and p.prepared_stride say (PreparedRowFloats floats per row,
// PreparedRowsPerHead rows per (b, g); set before the call).
inline int64_t PreparedRowsPerHead(const FlashParams& p, const DotChoice& dots) {
  return dots.bf16_pv ? (p.kv_len + 1) / 2 : p.kv_len;
}
// Floats between prepared rows: f32 rows padded as PaddedRowFloats says;
// bf16 key pairs (read by BF16WeightedSumV) unpadded.
inline int64_t PreparedRowFloats(const DotChoice& dots, int64_t dvp) {
  return dots.bf16_pv ? dvp : PaddedRowFloats(dvp);
}
inline void PrepareValues(const FlashParams& p, const Tiling& t, const DotChoice& dots,
                          ThreadPool* pool, float* out) {
  constexpr int64_t kBlock = 256;  // keys per work item
  const int64_t blocks = CeilDiv(p.kv_len, kBlock), dvp = t.dvp;
  const int64_t ld = p.prepared_ld, stride = p.prepared_stride;
  pool->Run(p.batch * p.num_kv_heads * blocks, [&](int64_t w, int) HWY_ATTR {
    const int64_t bg = w / blocks, k0 = w % blocks * kBlock;
    const int64_t b = bg / p.num_kv_heads, g = bg % p.num_kv_heads;
    // Keys past the sequence's length are never read (a paged table need
    // not hold pages for them).
    const int64_t n = std::min(kBlock, p.KvLength(b) - k0);
    if (n <= 0) return;
    const uint16_t* rows[kBlock];  // dense or paged, row by row
    for (int64_t j = 0; j < n; ++j) {
      rows[j] = static_cast<const uint16_t*>(p.v.data) + p.kv_rows.Offset(p.v, b, g, k0 + j);
    }
    float* head = out + bg * stride;
    if (dots.bf16_pv) {
      x86_dot::BF16PackValues(
          rows, static_cast<size_t>(n), static_cast<size_t>(p.value_dim), static_cast<size_t>(dvp),
          reinterpret_cast<uint32_t*>(head) + k0 / 2 * dvp, static_cast<size_t>(dvp));
      return;
    }
    // Rows kRowsAhead on into L1 as BF16PackValues does: V comes from
    // memory, and each row's conversion otherwise waits on its load.
    constexpr int64_t kRowsAhead = 16;
    const size_t row_bytes = static_cast<size_t>(p.value_dim) * DTypeSize(p.v.dtype);
    for (int64_t j = 0; j < n; ++j) {
      if (j + kRowsAhead < n && p.v.strides[3] == 1) {
        PrefetchSpanL1(rows[j + kRowsAhead], row_bytes);
      }
      LoadRowAsF32(rows[j], p.v.dtype, p.v.strides[3], static_cast<size_t>(p.value_dim),
                   static_cast<size_t>(dvp), head + (k0 + j) * ld);
    }
  });
}

inline absl::Status FlashForwardOne(const FlashParams& params, ThreadPool* pool, Workspace* ws,
                                    FlashRunInfo* info) {
  Tiling t = PlanTiling(params, KernelShapeOfTarget());
  t.threads = static_cast<int>(std::min<int64_t>(pool->num_threads(), t.base_items * t.splits));
  const DotChoice dots = ChooseDots(params, t);
  // Prepared V takes B G Tk d floats (f32 rows) or half that (pairs), kept
  // by the workspace: beyond kMaxPreparedFloats tiles convert their own.
  // So do the tiles where one item reads each (b, g)'s V (decode over all
  // of a group's heads: MLA): preparing would only add a round trip of
  // twice V's bytes through memory (Zen 5, MLA decode B8 H128 d576/512
  // bf16, alternating runs: 44.5-46.4 -> 42.5-43.5 ms at one thread,
  // 24.5-25.3 -> 24.2-24.4 at two).
  constexpr int64_t kMaxPreparedFloats = int64_t{32} << 20;  // 128 MiB
  const bool v_read_once = t.head_chunks * t.q_tiles == 1;
  const int64_t want_prepared = dots.bf16_qk && !v_read_once
                                    ? params.batch * params.num_kv_heads *
                                          PreparedRowsPerHead(params, dots) *
                                          PreparedRowFloats(dots, t.dvp)
                                    : 0;
  const size_t prepared_floats =
      want_prepared <= kMaxPreparedFloats ? static_cast<size_t>(want_prepared) : 0;
  ATTNKIT_RETURN_IF_ERROR(
      ws->Reserve(pool->num_threads(), t.scratch_floats, t.partial_floats + prepared_floats));
  const int64_t items = t.base_items * t.splits;
  float* partials = ws->shared_area();
  FlashParams p = params;
  if (prepared_floats > 0) {
    float* prepared = partials + t.partial_floats;
    p.prepared_ld = PreparedRowFloats(dots, t.dvp);
    p.prepared_stride = PreparedRowsPerHead(p, dots) * p.prepared_ld;
    PrepareValues(p, t, dots, pool, prepared);
    p.prepared_v = prepared;
  }
  // Largest work first: later query tiles see more keys under causal masks.
  // Decode items (one query tile) are all alike: walk them forward, so K/V
  // storage is read in address order (10% faster than backwards on Zen 3).
  const int64_t threads = pool->num_threads();
  auto item_at = [&](int64_t w) { return t.q_tiles > 1 ? items - 1 - w : w; };
  pool->Run(items, [&](int64_t w, int thread) HWY_ATTR {
    const int64_t item = item_at(w);
    // The Q rows of the item this thread likely takes next (items are
    // claimed in order, about one per thread at a time) into L2 now.
    if (t.q_tiles > 1 && w + threads < items) {
      const int64_t next = item_at(w + threads);
      PrefetchQueryRowsL2(p, DecodeItem(p, t, next / t.splits, next % t.splits));
    }
    RunWorkItem(p, t, item / t.splits, item % t.splits, partials, ws->thread_area(thread));
  });
  if (t.splits > 1) {
    pool->Run(t.base_items, [&](int64_t base, int thread) HWY_ATTR {
      MergeWorkItem(p, t, base, partials, ws->thread_area(thread));
    });
  }
  FillRunInfo(p, t, items, pool->num_threads(), info);
  return absl::OkStatus();
}

// A ragged batch (ragged_schedule.h) on this target: the work of every
// sequence in one parallel loop, in the schedule's order, then the merges of
// split items. Also reports the threads' utilisation.
inline absl::Status FlashForwardRagged(const FlashParams* params, size_t n, ThreadPool* pool,
                                       Workspace* ws, FlashRunInfo* info) {
  RaggedSchedule plan = PlanRagged(params, n, KernelShapeOfTarget());
  const int64_t ragged_threads =
      std::min<int64_t>(pool->num_threads(), static_cast<int64_t>(plan.work.size()));
  for (RaggedPart& part : plan.parts) part.t.threads = static_cast<int>(ragged_threads);
  const std::vector<RaggedPart>& parts = plan.parts;
  const std::vector<RaggedWork>& work = plan.work;
  const std::vector<std::pair<int64_t, int64_t>>& merges = plan.merges;
  ATTNKIT_RETURN_IF_ERROR(
      ws->Reserve(pool->num_threads(), plan.scratch_floats, plan.shared_floats));
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
  FillRunInfo(*parts[plan.busiest].p, parts[plan.busiest].t, static_cast<int64_t>(work.size()),
              pool->num_threads(), info);
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
