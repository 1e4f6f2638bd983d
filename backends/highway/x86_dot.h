// Dot-product kernels in the storage type, for x86 CPUs that have them:
// AVX512_BF16 (vdpbf16ps: pairs of bf16 products, exact in f32, summed into
// f32 lanes; with AVX512_VBMI's byte tables, for fp8 codes too) and
// AVX512_VNNI or AVX-VNNI (vpdpbusd, 512- or 256-bit: four u8 x s8 products
// summed into int32 lanes, exact). Highway 1.0.3 has none of these
// operations, so they are written with intrinsics in their own translation
// units (x86_bf16_dot.cc, x86_fp8_dot.cc, x86_vnni_dot.cc, x86_avxvnni_dot.cc),
// each function compiled for its ISA by a target attribute, and called only
// when the CPU has it (Have*() below) and the per-target flash loop runs at
// HWY_AVX3 or better (AVX-VNNI: at HWY_AVX2), so a process's target cap, or
// a forced target, turns them off. Every other target keeps the f32 kernels
// of microkernels-inl.h. Plain C++ interface: no Highway types.
//
// Layouts. A "pair" is one uint32: a bf16 in the low half (the even index)
// and the next one in the high half, as vdpbf16ps multiplies them.
#ifndef ATTNKIT_BACKENDS_HIGHWAY_X86_DOT_H_
#define ATTNKIT_BACKENDS_HIGHWAY_X86_DOT_H_

#include <cstddef>
#include <cstdint>

#include "platform/prefetch.h"

namespace attnkit {
namespace x86_dot {

// Bytes [c, c + 64) of a row of n bytes that lie below n, as the mask of a
// 64-byte masked load (bit i: byte c + i); 0 where c >= n.
inline uint64_t RowBytesMask(size_t c, size_t n) {
  return c + 64 <= n ? ~uint64_t{0} : c >= n ? 0 : (uint64_t{1} << (n - c)) - 1;
}

// Rows an int8 or fp8 decode kernel prefetches into L1 (prefetcht0) as it
// goes: row j (bytes [0, bytes) at rows + j * ld) as the kernel reaches key
// j of its own, for j < count; rows past its last key right after it.
// Q.K takes the tile's V rows (so P.V reads them from L1) while it brings
// the K rows ahead into L2; P.V takes the V rows ahead. So requests to
// memory go out through the whole tile, a few lines a key, where one burst
// of the tile's V lines at its start stalled the core until they came
// (Zen 5, B8 H32/8 Tk4096 d128 int8 decode under FAST, dense rows, twelve
// alternating rounds in one process: one thread 4.56 -> 3.97 ms, two 2.14
// -> 1.99 ms; each round won), and Q.K asking for both K and V rows ahead
// queued twice the lines behind its own (P.V taking the V rows ahead
// instead of the next tile's K, caches swept before each call, seven
// rounds, a quiet host: int8 one thread 3.49-3.67 -> 2.76-2.78 ms, two
// 2.02-2.11 -> 1.82-1.91; fp8 E4M3 3.50 -> 3.38 and 2.19 -> 2.01; each
// round or all but one won). AVX2's AvxVnniQDotK4 and
// AvxVnniWeightedQuadsV4 take them as the 512-bit kernels do.
// (Fp8FmaQDotK4's caller passes it the K rows ahead as its L1 rows, and
// P.V takes the V rows ahead: sdpa-inl.h's fp8_fma_l1. int8's on Intel's
// CPUs passes P.V the next tile's K rows, and has the 512-bit Q.K ask for
// the V rows ahead into L2 beside the K rows, which did not queue too many
// lines there, or with several threads P.V: sdpa-inl.h's int8_next_k,
// v_ahead_l2 and pv_v_ahead_l2.)
// Empty (count 0): nothing. (PrefetchL2Rows asks for such rows into L2
// instead: prefetcht1.)
struct L1Rows {
  const uint8_t* rows = nullptr;
  size_t ld = 0;     // bytes from one row to the next
  size_t bytes = 0;  // bytes of a row
  size_t count = 0;  // rows
};
// Prefetches rows [from, to) of l1, those below its count, into L1
// (platform/prefetch.h: a loop of builtin prefetches, GCC 12 deleted).
inline void PrefetchL1Rows(const L1Rows& l1, size_t from, size_t to) {
  if (to > l1.count) to = l1.count;
  if (from < to) PrefetchRowsL1(l1.rows, l1.ld, l1.bytes, from, to);
}
inline void PrefetchL2Rows(const L1Rows& l2, size_t from, size_t to) {
  if (to > l2.count) to = l2.count;
  if (from < to) PrefetchRowsL2(l2.rows, l2.ld, l2.bytes, from, to);
}
// Rows [from, to) of l1 into L1 and of l2 into L2, each list's below its
// own count (the int8 P.V kernels' two lists: x86_dot's WeightedQuadsV4).
inline void PrefetchRowLists(const L1Rows& l1, const L1Rows& l2, size_t from, size_t to) {
  PrefetchL1Rows(l1, from, to);
  PrefetchL2Rows(l2, from, to);
}

// Key j's rows `ahead` of a decode tile into L2, as the kernels' Q.K asks
// for them: the first `bytes` bytes of K's row (pf_k + j * ld_pf_k) and of
// V's (pf_v + j * ld_pf_v; K alone where pf_v is null), a line at a time.
inline void PrefetchAheadKeyL2(const void* pf_k, size_t ld_pf_k, const void* pf_v, size_t ld_pf_v,
                               size_t j, size_t bytes) {
  const uint8_t* k = static_cast<const uint8_t*>(pf_k) + j * ld_pf_k;
  const uint8_t* v = pf_v == nullptr ? nullptr : static_cast<const uint8_t*>(pf_v) + j * ld_pf_v;
  for (size_t off = 0; off < bytes; off += 64) {
    PrefetchL2(k + off);
    if (v != nullptr) PrefetchL2(v + off);
  }
}

// The CPU has AVX512F/BW/VL/DQ and AVX512_BF16 (checked once, by CPUID).
bool HaveBF16Dot();
// HaveBF16Dot(), and the CPU's vdpbf16ps outruns its f32 FMAs, so that the
// kernels below beat the f32 ones on widened values: AMD's (Zen 5, 2
// threads: 1148 GFLOP/s against 571). Intel's run at half the FMA rate
// (a Xeon with AMX, 2 threads: 203 against 386 GFLOP/s; the FAST bf16
// decode B8 H32/8 Tk4096 d128 took 8.03 ms on them against EXACT's 6.16 on
// FMAs, fp8 FAST 5.50 against 4.63), so there the kernels run only where a
// test calls them, and the flash loop keeps FMAs (and AMX for prefill).
bool PreferBF16Dot();
// The CPU has AVX512F/BW/VL and AVX512_VNNI.
bool HaveVnni();
// CPUID's vendor is GenuineIntel: for choices measured on Intel's CPUs only
// (sdpa-inl.h's int8_next_k).
bool IntelCpu();
// The CPU has AVX2, FMA and AVX-VNNI (the VEX-encoded 256-bit vpdpbusd).
bool HaveAvxVnni();

// ---- bf16 (x86_bf16_dot.cc) ----

// The machine limit of bf16 products (harness/machine.cc): `iterations`
// rounds of 16 independent vdpbf16ps on registers; returns the FLOPs done
// (64 per instruction: 32 multiply-adds), for the caller to time.
double BF16DotPeakLoop(int64_t iterations);

// Q.K of a wide tile: s[j * lds + r] = scale * sum_{c < d} Q[r, c] K[j, c]
// for r < rows (a multiple of 32) and j < keys; the f32 products are exact,
// the sums f32 (each lane: two products per step, in column order).
//   qp:  Q as pairs along the head dim, qp[(c / 2) * ldq + r] = (Q[r, c],
//        Q[r, c + 1]), for c < d (d even).
//   k:   bf16 rows k + j * ldk, d values each (storage, read as is).
void BF16QDotK(const uint32_t* qp, size_t ldq, const uint16_t* k, size_t ldk, size_t d, size_t rows,
               size_t keys, float scale, float* s, size_t lds);

// P as pairs along the keys, rounded to bf16 (nearest even): pp[(j / 2) *
// ldpp + r] = (P[j, r], P[j + 1, r]) for j < keys (a missing odd last key
// is 0) and r < rows (a multiple of 16), from key-major f32 p[j * ldp + r].
void BF16PackWeights(const float* p, size_t ldp, size_t keys, size_t rows, uint32_t* pp,
                     size_t ldpp);

// V as pairs along the keys: vp[(j / 2) * ldvp + c] = (V[j, c], V[j + 1, c])
// for c < dp (columns d.. dp are 0), j < keys, from the bf16 rows rows[j]
// of d values each (paged rows need not be evenly spaced). A null row (one
// holding a NaN or Inf, which only rows already flagged as poisoned see)
// and a missing odd last row are packed as 0.
void BF16PackValues(const uint16_t* const* rows, size_t keys, size_t d, size_t dp, uint32_t* vp,
                    size_t ldvp);

// 16 rows of bf16 pairs transposed: qp[c2 * ldq + r] = the pair (rows[r][2
// c2], rows[r][2 c2 + 1]) for r < 16 and c2 < pairs; a null row is 0.
void BF16TransposePairs(const uint16_t* const* rows, size_t pairs, uint32_t* qp, size_t ldq);

// O[r, c] = alpha[r] O[r, c] + sum_{j < 2 key_pairs} P[j, r] V[j, c] for r <
// rows (a multiple of 4), c < dp (a multiple of 16); alpha null = 1. pp and
// vp as the packers above give them. key_end (null: every key) says where
// each row's visible keys end (masking-inl.h's RowKeyRanges, ke): its
// weights past it are 0, so a block of rows (8 or 4, aligned) stops at the
// pair holding the last key one of them sees (half of a causal diagonal
// tile's products) and never reads the pairs past it, which may then hold
// anything: the FAST softmax (OnlineSoftmaxUpdateToBF16Pairs) does not
// write them past its own vectors of 16 rows, each a whole number of
// these blocks.
void BF16WeightedSumV(const uint32_t* pp, size_t ldpp, const uint32_t* vp, size_t ldvp,
                      size_t key_pairs, const float* alpha, size_t rows, size_t dp, float* o,
                      size_t ldo, const float* key_end = nullptr);

// ---- bf16 on AMX (x86_amx_dot.cc) ----

// The CPU has HaveBF16Dot()'s instructions, AMX-TILE and AMX-BF16, Linux
// granted this process the tile state, and ATTNKIT_AMX is not "0" (checked
// once).
bool HaveAmxBF16();

// BF16QDotK on AMX (tdpbf16ps): the same contract, layouts and results but
// for the order of the f32 sums, for d a multiple of 32 (rows a multiple of
// 32). Reads K rows [0, keys) only; a key's sums do not depend on the keys
// beside it. The scale takes a pass over the scores of its own (a third of
// the call at d 128 here), so callers that can apply it later pass 1.
void AmxQDotK(const uint32_t* qp, size_t ldq, const uint16_t* k, size_t ldk, size_t d, size_t rows,
              size_t keys, float scale, float* s, size_t lds);

// BF16WeightedSumV on AMX: the same contract but for the order of the f32
// sums and key_end's blocks, which are aligned blocks of 16 rows (the AMX
// tile's): a block reads the pairs up to the last key one of its 16 rows
// sees, so pairs past a row's own last key must be 0 up to that block's
// end (the FAST softmax, OnlineSoftmaxUpdateToBF16Pairs, writes whole
// vectors of 16 rows). Any rows (pp holding them rounded up to 16 in each
// of its pair rows), dp a multiple of 16, 2 key_pairs <= kMaxAmxKeys.
// Reads V's pair rows [0, key_pairs) only.
constexpr size_t kMaxAmxKeys = 128;
void AmxWeightedSumV(const uint32_t* pp, size_t ldpp, const uint32_t* vp, size_t ldvp,
                     size_t key_pairs, const float* alpha, size_t rows, size_t dp, float* o,
                     size_t ldo, const float* key_end = nullptr);

// The machine limit of AMX bf16 products (harness/machine.cc):
// `iterations` rounds of 6 independent tdpbf16ps on tiles; returns the
// FLOPs done (16384 per instruction: 16 x 16 sums of 32 products), for
// the caller to time. Call only where HaveAmxBF16().
double AmxBF16PeakLoop(int64_t iterations);

// Decode's kernels stay off AMX. A group of 4 query rows fills a quarter
// of a tile, and both designs tried ran slower end to end than the vector
// kernels (a Xeon with AMX, B8 H32/8 Tk4096 d128, 2 threads, alternating
// runs): int8 Q.K with tdpbssd on K's rows as stored, 2.1 against 4.3 ns
// a key with the rows in L1, took the FAST decode from 2.7-3.1 to 3.8-4.3
// ms (tile loads that miss L1 hold the tile pipeline where vector loads
// overlap); fp8 under FAST, the codes widened into L1 buffers for
// tdpbf16ps (Q.K 10-13 and P.V 11-13 ns a key against vdpbf16ps's 16-17),
// took 6.0-6.9 ms against 4.5-4.8 on f32 FMAs (a tile load waits for the
// stores it reads to reach L1). Tried again with P.V on AMX too, with no
// relayout of V: V's rows as stored are the right operand of tdpbusd (16
// keys x 16 groups of 4 columns), the left one holds the u8 weights, row
// (r, i) with row r's weight of key j in byte i of group j and zeros
// elsewhere, so its sums (r, i) column n are row r's column 4 n + i
// (bit for bit WeightedQuadsV4's results). One thread, rows in L1, ns a
// key: Q.K 3.83 -> 1.57, P.V 4.05 -> 3.2 (the weights' stores, the tile
// loads that wait for them and the sums' way back through memory
// chain); two threads, the whole B8 problem's K and V in L1
// (decode_floor_bench's in L1): both kernels 1.12-1.24 -> 0.85-0.93 ms,
// P.V alone 0.67 either way. Streamed from the last-level cache they took
// about the read loop plus their L1 time (1.9-2.6 against the vector
// kernels' 1.7-2.0 ms, whichever rows were prefetched into L1 a tile
// ahead), and in the decode, problem 19 at two threads, 2.5-2.9 ms
// against 2.1-2.3.

// ---- bf16 decode (x86_bf16_decode.cc) ----

// Decode's Q.K for a group of 4 query rows against bf16 keys, Q rows
// rounded to bf16 (FAST) or bf16 already: s[4 j + r] = scale * sum_{c < d}
// Q[r, c] K[j, c] for r < 4, j < keys (the packed layout); the products
// exact in f32, the sums f32 (vdpbf16ps: pairs of columns per lane, lanes
// summed by a tree at the end).
//   q:  bf16 rows q + r * ldq, zero from d to d rounded up to 32 (ldq >=
//       that).
//   k:  bf16 rows k + j * ldk (storage), d values each (d even).
// Prefetches as VnniQDotK4 does: into L2 the first `ahead` rows of pf_k and
// pf_v (ld_pf_k, ld_pf_v in values), into L1 the rows of l1.
void BF16QDotK4(const uint16_t* q, size_t ldq, const uint16_t* k, size_t ldk, size_t d, size_t keys,
                float scale, float* s, const uint16_t* pf_k, size_t ld_pf_k, const uint16_t* pf_v,
                size_t ld_pf_v, size_t ahead, const L1Rows& l1 = {});

// Weights of a group of 4 rows, packed p[4 j + r] = P[j, r] (j < keys),
// rounded to bf16 (nearest even) as pairs of keys per row: pw[4 jp + r] =
// (P[2 jp, r], P[2 jp + 1, r]), a missing odd last key 0. pw holds keys
// rounded up to 4, times 2 uint32. Returns false where a weight is NaN or
// Inf (pw then holds anything).
bool BF16WeightPairs4(const float* p, size_t keys, uint32_t* pw);

// Decode's P.V for a group of 4 query rows against bf16 values (FAST: P
// rounded to bf16 by BF16WeightPairs4):
//   O[r, c] = alpha[r] O[r, c] + sum_{j < keys} P[j, r] V[j, c]
// for r < 4, c < dvp (alpha null: 1), in pairs of keys (vdpbf16ps). v[j]:
// key j's row of dv values (j < keys rounded up to 2; an extra key's weight
// is 0); no value past dv is read. Columns [dv, dvp) of O are only
// rescaled: dv <= dvp, dvp a multiple of 16. Returns false, having changed
// nothing, where a weight is NaN or Inf. keys <= kMaxWeightedPairsKeys.
// Prefetches the rows of l1 into L1 as it goes, whatever it returns.
bool BF16WeightedSumV4(const float* p, size_t keys, const uint16_t* const* v, size_t dv, size_t dvp,
                       const float* alpha, float* o, size_t ldo, const L1Rows& l1 = {});

// ---- fp8 through bf16 (x86_fp8_dot.cc) ----

// The CPU has HaveBF16Dot()'s instructions and AVX512_VBMI (vpermi2b).
bool HaveFp8BF16Dot();

// fp8 decode under FAST (core/fast_compute.h: Q and P rounded to bf16): the
// codes are widened to bf16 exactly (bf16 holds every E4M3 and E5M2 value,
// subnormals, Inf and NaN included) by a 128-entry table per byte of the
// bf16 (vpermi2b on the code's magnitude, the sign ORed in), then meet Q or
// the weights in vdpbf16ps. About half the instructions per code of the f32
// decode and FMAs, which bind fp8 decode. Rows are codes (uint8), values of
// the format given by e4m3.

// Q.K for a group of 4 query rows: s[4 j + r] = scale * sum_{c < d} Q[r, c]
// code(K[j, c]) for r < 4, j < keys (the packed layout), f32 sums. Four
// keys at a time share each vector, one per 128-bit block (16 codes of a
// key each), so one accumulator per row serves the four keys and a short
// tree leaves their 16 sums in the packed order.
//   qb: the 4 rows in the block layout Fp8QueryBlocks writes, rows
//       qb + r * ldq (ldq >= 4 d).
//   k:  fp8 rows k + j * ldk, d codes each (d a multiple of 16, at most
//       kMaxFp8QDotD).
// Also prefetches (into L2) the first `ahead` rows of pf_k and pf_v (K
// alone where pf_v is null), and into L1 the rows of l1 (the tile's V), as
// VnniQDotK4 does.
constexpr size_t kMaxFp8QDotD = 1024;  // core/problem.h's kProblemMaxHeadDim
void Fp8QDotK4(const uint16_t* qb, size_t ldq, const uint8_t* k, size_t ldk, size_t d, size_t keys,
               bool e4m3, float scale, float* s, const uint8_t* pf_k, size_t ld_pf_k,
               const uint8_t* pf_v, size_t ld_pf_v, size_t ahead, const L1Rows& l1 = {});

// One bf16 Q row q[0, d) (d a multiple of 8) in Fp8QDotK4's layout: each 8
// consecutive values repeated four times (one copy per 128-bit block),
// out[32 c8 + 8 b + i] = q[8 c8 + i] for b < 4, i < 8: 4 d values.
inline void Fp8QueryBlocks(const uint16_t* q, size_t d, uint16_t* out) {
  for (size_t c8 = 0; c8 < d / 8; ++c8) {
    for (size_t b = 0; b < 4; ++b) {
      for (size_t i = 0; i < 8; ++i) out[32 * c8 + 8 * b + i] = q[8 * c8 + i];
    }
  }
}

// P.V for a group of 4 query rows: each weight P[j, r] = p[4 j + r] (the
// softmax weights times V's row scales) rounded to bf16 (nearest even), then
//   O[r, c] = alpha[r] O[r, c] + sum_{j < keys} P[j, r] code(V[j, c])
// for r < 4, c < dvp (alpha null: 1), in pairs of keys (vdpbf16ps). v[j]:
// key j's row of dv codes (j < keys rounded up to 2; an extra key's weight
// is 0, so p must hold 0 there); no byte past dv is read. Columns [dv,
// dvp) of O are only rescaled: dv <= dvp, dvp a multiple of 16.
// Returns false, having changed nothing, where a weight is NaN or Inf.
// keys <= kMaxWeightedPairsKeys. Prefetches the rows of l1 (the V
// rows ahead) into L1 as it goes, whatever it returns, as WeightedQuadsV4
// does.
constexpr size_t kMaxWeightedPairsKeys = 512;
bool Fp8WeightedSumV4(const float* p, size_t keys, const uint8_t* const* v, size_t dv, size_t dvp,
                      bool e4m3, const float* alpha, float* o, size_t ldo, const L1Rows& l1 = {});

// ---- fp8 on f32 FMAs (x86_fp8_fma.cc) ----

// The CPU has AVX512F/BW/VL/DQ (checked once).
bool HaveFp8FmaDot();

// fp8 decode's Q.K on f32 FMAs, for the CPUs whose vdpbf16ps does not
// outrun their FMAs (!PreferBF16Dot()), EXACT and FAST alike: for r < 4,
// j < keys (the packed layout)
//   s[4 j + r] = sum_{c < d} Q[r, c] * code(K[j, c]) * 2^-bias
// in f32 (bias 120 for E4M3, 112 for E5M2: the caller's Q rows carry
// 2^bias, microkernels-inl.h's Fp8Folded). Each product is of the f32 Q
// value and the code's exact value, as the Highway kernels' are; the sums
// f32 in another order. Four keys at a time share each Q vector, and one
// transposing tree (x86_bf16_ops.h) leaves their 16 sums in order.
//   q:  f32 rows q + r * ldq, d values each (zero past d to d rounded up
//       to 16: ldq at least that).
//   k:  fp8 rows k + j * ldk, d codes each (any d: no byte past d is
//       read). A special code (E4M3's NaN, E5M2's Inf and NaN) widens to
//       a finite value of no meaning, and a subnormal code to an f32
//       subnormal, exact, but FMAs on those take a microcode assist on
//       Intel (decode_kernels_bench says how much; a cache quantized with
//       one scale per tensor holds many): the caller checks the rows for
//       both before the products (Fp8RowsNeedDecoding) and runs a tile
//       with a special code or many subnormal ones another way.
// Prefetches as VnniQDotK4 does: into L2 the first `ahead` rows of pf_k and
// pf_v (K alone where pf_v is null), into L1 the rows of l1.
void Fp8FmaQDotK4(const float* q, size_t ldq, const uint8_t* k, size_t ldk, size_t d, size_t keys,
                  bool e4m3, float* s, const uint8_t* pf_k, size_t ld_pf_k, const uint8_t* pf_v,
                  size_t ld_pf_v, size_t ahead, const L1Rows& l1 = {});

// ---- int8 (x86_vnni_dot.cc) ----

// Decode's Q.K for a group of 4 query rows against int8 keys:
// s[j * lds + r] = row_scale[r] * sum_{c < d} Q[r, c] K[j, c] for r < 4,
// j < keys, the integer sum exact (vpdpbusd on K + 128 as u8, less 128 *
// sum_c Q[r, c]: q_sum128[r]).
//   q:  int8 rows q + r * ldq (d values, d a multiple of 16 and at most
//       kMaxVnniQDotD; zero past d to d rounded up to 64, ldq at least
//       that).
//   k:  int8 rows k + j * ldk (storage).
// Also prefetches (into L2) the first `ahead` rows of pf_k and pf_v (rows
// pf_k + j * ld_pf_k, pf_v + j * ld_pf_v), one K and one V row per key (K
// alone where pf_v is null), to overlap memory with this tile's products as
// the f32 kernels do; and into L1 the rows of l1 (L1Rows: the tile's V),
// row j with key j.
constexpr size_t kMaxVnniQDotD = 1024;  // core/problem.h's kProblemMaxHeadDim
void VnniQDotK4(const int8_t* q, size_t ldq, const int32_t* q_sum128, const float* row_scale,
                const int8_t* k, size_t ldk, size_t d, size_t keys, float* s, size_t lds,
                const int8_t* pf_k, size_t ld_pf_k, const int8_t* pf_v, size_t ld_pf_v,
                size_t ahead, const L1Rows& l1 = {});

// Decode's P.V for a group of 4 query rows against int8 values, P
// quantized to u8 (FAST with int8 V, core/fast_compute.h): per row r < 4,
// q[j] = round(P[j, r] * 255 / max_j P[j, r]) to nearest even, then
//   O[r, c] = alpha[r] O[r, c] + (max / 255) * sum_{j < keys} q[j] V[j, c]
// for c < dvp (alpha null: 1), the integer sum exact (vpdpbusd on quads of
// keys: the weights u8, V's bytes s8, interleaved four keys to a lane).
// P[j, r] = p[4 j + r], the weights times V's scales, zero for keys up to
// `keys` rounded up to 4; v[j]: key j's row of dv int8 values (j < keys
// rounded up to 4; the extra keys' weights are 0). Columns [dv, dvp) of O
// are only rescaled: dv <= dvp, dvp a multiple of 16 (whole vectors of O
// are stored). keys <= kMaxWeightedQuadsKeys.
// Returns false, having changed nothing, where a weight is NaN, Inf or
// negative (a negative V scale), or a row's largest weight is tiny (below
// 1e-30, not 0). Prefetches the rows of l1 (L1Rows: the next tile's V rows,
// on Intel's CPUs its K rows: sdpa-inl.h's int8_next_k) into L1 as it goes,
// and those of l2 (the V rows ahead, in a call of several threads on
// Intel's CPUs: sdpa-inl.h's pv_v_ahead_l2) into L2, whatever it returns;
// both over its first block of 64 columns, a quad of rows with each quad
// of keys.
constexpr size_t kMaxWeightedQuadsKeys = 512;
bool WeightedQuadsV4(const float* p, size_t keys, const int8_t* const* v, size_t dv, size_t dvp,
                     const float* alpha, float* o, size_t ldo, const L1Rows& l1 = {},
                     const L1Rows& l2 = {});

// ---- int8 (x86_avxvnni_dot.cc) ----

// VnniQDotK4 with AVX-VNNI's 256-bit vpdpbusd, for AVX2 CPUs without
// AVX-512: the same contract, results (bit for bit) and prefetches. Reads
// no byte of a K or Q row past d (VnniQDotK4 reads Q to d rounded up to 64).
void AvxVnniQDotK4(const int8_t* q, size_t ldq, const int32_t* q_sum128, const float* row_scale,
                   const int8_t* k, size_t ldk, size_t d, size_t keys, float* s, size_t lds,
                   const int8_t* pf_k, size_t ld_pf_k, const int8_t* pf_v, size_t ld_pf_v,
                   size_t ahead, const L1Rows& l1 = {});

// WeightedQuadsV4 with AVX-VNNI's 256-bit vpdpbusd, for AVX2 CPUs without
// AVX-512: the same contract, refusals, results (bit for bit: the same
// quantized weights, exact integer sums and f32 operations) and
// prefetches (the decode passes it no l2 rows: pv_v_ahead_l2 is for the
// 512-bit kernels), but for dvp, which is a multiple of 8 here (AVX2's f32
// vectors). Reads no byte of a V row past dv.
bool AvxVnniWeightedQuadsV4(const float* p, size_t keys, const int8_t* const* v, size_t dv,
                            size_t dvp, const float* alpha, float* o, size_t ldo,
                            const L1Rows& l1 = {}, const L1Rows& l2 = {});

}  // namespace x86_dot
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_HIGHWAY_X86_DOT_H_
