// fp8 decode kernels (x86_dot.h) for FAST: fp8 codes widened to bf16 by
// byte tables (AVX512_VBMI vpermi2b), multiplied by vdpbf16ps (AVX512_BF16)
// with Q rows and weights rounded to bf16 (core/fast_compute.h). Compiled
// for AVX-512 with BF16 and VBMI by its target attribute; callers check
// HaveFp8BF16Dot().
//
// Why tables: an fp8 code's bf16 is a function of its 7 magnitude bits
// (the sign bit moves to bf16's), so two 128-byte tables (the bf16's low
// and high bytes) give it exactly for every code, E4M3's subnormals (which
// a shift and an exponent add would get wrong) and NaN/Inf included; the
// bf16 values are normal, so vdpbf16ps flushes none. Per 64 codes: two
// table lookups, one sign OR and two byte interleaves give 64 bf16, where
// the f32 decode takes 3 operations per 16 codes and then one f32 FMA per
// code and row instead of half of one.
#include <cstring>

#include "backends/highway/x86_dot.h"
#include "core/fp8.h"
#include "platform/prefetch.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "backends/highway/x86_bf16_ops.h"

// GCC 12's AVX-512 headers start some intrinsics from an undefined vector,
// which -Wmaybe-uninitialized reports at every use.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define ATTNKIT_TARGET_FP8 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi")))

namespace attnkit {
namespace x86_dot {
namespace {

// The bf16 of each fp8 magnitude m < 128 (the code without its sign), as
// two byte tables per format: lo[m] and hi[m], bf16 = lo | hi << 8, with
// the sign bits, in the order Fp8DotsOfEightKeys loads them into its
// registers. Also the byte orders of Widener (built once: a call decodes
// one tile).
struct Fp8ByteTables {
  struct Format {
    alignas(64) uint8_t lo[128];
    alignas(64) uint8_t hi[128];
    alignas(64) uint8_t sign[64];  // 0x80 in every byte
  } widen[2];
  alignas(64) uint8_t pairs[2][64];
};
const Fp8ByteTables& ByteTables() {
  static const Fp8ByteTables tables = [] {
    Fp8ByteTables t;
    for (int f = 0; f < 2; ++f) {
      for (int m = 0; m < 128; ++m) {
        const float x = Fp8CodeValue(static_cast<uint8_t>(m), /*e4m3=*/f == 0);
        uint32_t bits;
        std::memcpy(&bits, &x, sizeof(bits));
        // Exact: every fp8 value (NaN as the quiet 0x7FC00000) has 16 zero
        // low bits in f32.
        t.widen[f].lo[m] = static_cast<uint8_t>(bits >> 16);
        t.widen[f].hi[m] = static_cast<uint8_t>(bits >> 24);
      }
      std::memset(t.widen[f].sign, 0x80, sizeof(t.widen[f].sign));
    }
    // pairs[h]: columns [32 h, 32 h + 32) of two rows a and b (vpermt2b:
    // b's bytes are numbered from 64) ordered so that Widen leaves the
    // dword lane of column c holding (a[c], b[c]) in column order. Widen's
    // first vector takes bytes [16 k, 16 k + 8) of each block k, its second
    // [16 k + 8, 16 k + 16); dword lane i of block k is bytes 2 i, 2 i + 1
    // of those: so byte 16 k + 8 s + 2 i (+ 1) is column 32 h + 16 s + 4 k
    // + i of a (of b).
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 4; ++k) {
        for (int half = 0; half < 2; ++half) {
          for (int i = 0; i < 4; ++i) {
            const int col = 32 * h + 16 * half + 4 * k + i, at = 16 * k + 8 * half + 2 * i;
            t.pairs[h][at] = static_cast<uint8_t>(col);
            t.pairs[h][at + 1] = static_cast<uint8_t>(64 + col);
          }
        }
      }
    }
    return t;
  }();
  return tables;
}

// The registers the widening uses: the format's tables, the sign bits, and
// the byte orders pairs[0] and pairs[1] of two V rows (Fp8ByteTables).
struct Widener {
  __m512i lo0, lo1, hi0, hi1, sign, pair0, pair1;
};
ATTNKIT_TARGET_FP8 inline Widener MakeWidener(bool e4m3) {
  const Fp8ByteTables& t = ByteTables();
  const Fp8ByteTables::Format& f = t.widen[e4m3 ? 0 : 1];
  return {_mm512_load_si512(f.lo),      _mm512_load_si512(f.lo + 64), _mm512_load_si512(f.hi),
          _mm512_load_si512(f.hi + 64), _mm512_load_si512(f.sign),    _mm512_load_si512(t.pairs[0]),
          _mm512_load_si512(t.pairs[1])};
}

// 64 codes -> their bf16, in 128-bit blocks: block k of *w0 holds codes
// [16 k, 16 k + 8), of *w1 codes [16 k + 8, 16 k + 16), in order. (The
// in-block byte interleave costs no index register and leaves its inputs;
// callers order the codes to suit: Fp8QDotK4 one key per block,
// Fp8WeightedSumV4 by Fp8ByteTables::pairs.)
ATTNKIT_TARGET_FP8 inline void Widen(const Widener& t, __m512i codes, __m512i* w0, __m512i* w1) {
  // vpermt2b reads each index's low 7 bits: the magnitude.
  const __m512i lo = _mm512_permutex2var_epi8(t.lo0, codes, t.lo1);
  __m512i hi = _mm512_permutex2var_epi8(t.hi0, codes, t.hi1);
  hi = _mm512_ternarylogic_epi32(hi, codes, t.sign, 0xF8);  // hi | (codes & 0x80)
  *w0 = _mm512_unpacklo_epi8(lo, hi);
  *w1 = _mm512_unpackhi_epi8(lo, hi);
}

using bf16_ops::AddWeightedPair4x4;
using bf16_ops::Dot;
using bf16_ops::PairSums;
using bf16_ops::QuadSums;

// Q.K of eight K rows k + i ldk (i < 8) with the 4 Q rows, codes [0, d):
// out[16 (4 h + r) + 4 b + i] summed over i < 4 is row r's dot with key
// 4 h + b (d a multiple of 16; qa: the rows' blocks, row r at qa + r ldq
// bytes; t: the format's Fp8ByteTables::widen, 64-byte aligned).
//
// In assembly, the vector registers named (zmm0-30): with intrinsics GCC 12
// kept some of the 16 accumulators, tables or K vectors on the stack and
// the step (8 keys x 16 codes) ran at 18 cycles on Zen 5, where its 16
// vdpbf16ps take 8.
//   zmm0-7    A[h][r] (zmm 4 h + r): sums of the first 8 codes of each 16
//   zmm8-15   B[h][r]: of the second 8 (two chains a row: one would be
//             bound by vdpbf16ps's 6-cycle latency)
//   zmm16-20  lo0, lo1, hi0, hi1, sign (Widener)
//   zmm21-24  per 32 codes: [k0 | k1] and [k2 | k3] of keys 0-3 (h 0),
//             then of keys 4-7 (h 1), 32 codes of each key
//   zmm25-28  w0, w1 of h 0 and of h 1 (Widen)
//   zmm29-30  the hi bytes while widening, then Q's two vectors of a row
// Per 32 codes: 4 row loads and 4 inserts, then for each 16 codes a block
// shuffle that puts key b in block b (masked block broadcasts did that
// before, and contended with vpermt2b for the shuffle ports: 13 cycles a
// step), Widen, and 16 vdpbf16ps against Q loaded once for both h.
//
// ATTNKIT_FP8_WIDEN_IN_PLACE(W0, W1): the codes in zmm W0 widened (Widen)
//   to w0 in W0 and w1 in W1.
// ATTNKIT_FP8_WIDEN(TA, TB, IMM, W0, W1): first the blocks IMM picks of
//   zmm TA and TB (vshufi64x2) into W0.
// ATTNKIT_FP8_DOTS(OFF): for each row r, Q's two vectors at byte OFF of
//   the row into zmm29 and zmm30 (ATTNKIT_FP8_ROW_DOTS, QROW: the row's
//   address), then A[h][r] += w0 . the first, B[h][r] += w1 . the second,
//   for both h.
// clang-format off
#define ATTNKIT_FP8_WIDEN_IN_PLACE(W0, W1)                 \
  "vmovdqa64 %%zmm16, %%zmm" W1 "\n\t"                     \
  "vpermt2b %%zmm17, %%zmm" W0 ", %%zmm" W1 "\n\t"         \
  "vmovdqa64 %%zmm18, %%zmm29\n\t"                         \
  "vpermt2b %%zmm19, %%zmm" W0 ", %%zmm29\n\t"             \
  "vpternlogd $0xF8, %%zmm20, %%zmm" W0 ", %%zmm29\n\t"    \
  "vpunpcklbw %%zmm29, %%zmm" W1 ", %%zmm" W0 "\n\t"       \
  "vpunpckhbw %%zmm29, %%zmm" W1 ", %%zmm" W1 "\n\t"
#define ATTNKIT_FP8_WIDEN(TA, TB, IMM, W0, W1)                        \
  "vshufi64x2 $" IMM ", %%zmm" TB ", %%zmm" TA ", %%zmm" W0 "\n\t"    \
  ATTNKIT_FP8_WIDEN_IN_PLACE(W0, W1)
#define ATTNKIT_FP8_ROW_DOTS(QROW, OFF, A0, B0, A1, B1)   \
  "vmovdqu64 " OFF QROW ", %%zmm29\n\t"                  \
  "vmovdqu64 " OFF "+64" QROW ", %%zmm30\n\t"            \
  "vdpbf16ps %%zmm29, %%zmm25, %%zmm" A0 "\n\t"          \
  "vdpbf16ps %%zmm30, %%zmm26, %%zmm" B0 "\n\t"          \
  "vdpbf16ps %%zmm29, %%zmm27, %%zmm" A1 "\n\t"          \
  "vdpbf16ps %%zmm30, %%zmm28, %%zmm" B1 "\n\t"
#define ATTNKIT_FP8_DOTS(OFF)                                          \
  ATTNKIT_FP8_ROW_DOTS("(%[qa])", OFF, "0", "8", "4", "12")            \
  ATTNKIT_FP8_ROW_DOTS("(%[qa],%[ldq])", OFF, "1", "9", "5", "13")     \
  ATTNKIT_FP8_ROW_DOTS("(%[qc])", OFF, "2", "10", "6", "14")           \
  ATTNKIT_FP8_ROW_DOTS("(%[qc],%[ldq])", OFF, "3", "11", "7", "15")

ATTNKIT_TARGET_FP8 void Fp8DotsOfEightKeys(const uint8_t* k, size_t ldk, size_t d, const char* qa,
                                           size_t ldq, const uint8_t* t, float* out) {
  const uint8_t* k3 = k + 3 * ldk;
  const uint8_t* k6 = k + 6 * ldk;
  const uint8_t* const end32 = k + (d & ~size_t{31});
  const char* qc = qa + 2 * ldq;
  asm volatile(
      "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"
      "vmovaps %%zmm0, %%zmm1\n\t"
      "vmovaps %%zmm0, %%zmm2\n\t"
      "vmovaps %%zmm0, %%zmm3\n\t"
      "vmovaps %%zmm0, %%zmm4\n\t"
      "vmovaps %%zmm0, %%zmm5\n\t"
      "vmovaps %%zmm0, %%zmm6\n\t"
      "vmovaps %%zmm0, %%zmm7\n\t"
      "vmovaps %%zmm0, %%zmm8\n\t"
      "vmovaps %%zmm0, %%zmm9\n\t"
      "vmovaps %%zmm0, %%zmm10\n\t"
      "vmovaps %%zmm0, %%zmm11\n\t"
      "vmovaps %%zmm0, %%zmm12\n\t"
      "vmovaps %%zmm0, %%zmm13\n\t"
      "vmovaps %%zmm0, %%zmm14\n\t"
      "vmovaps %%zmm0, %%zmm15\n\t"
      "vmovdqa64 (%[t]), %%zmm16\n\t"
      "vmovdqa64 64(%[t]), %%zmm17\n\t"
      "vmovdqa64 128(%[t]), %%zmm18\n\t"
      "vmovdqa64 192(%[t]), %%zmm19\n\t"
      "vmovdqa64 256(%[t]), %%zmm20\n\t"
      "cmp %[end], %[k]\n\t"
      "jae 2f\n\t"
      "1:\n\t"  // 32 codes of each key
      "vmovdqu64 (%[k]), %%ymm21\n\t"
      "vinserti64x4 $1, (%[k],%[ldk]), %%zmm21, %%zmm21\n\t"
      "vmovdqu64 (%[k],%[ldk],2), %%ymm22\n\t"
      "vinserti64x4 $1, (%[k3]), %%zmm22, %%zmm22\n\t"
      "vmovdqu64 (%[k3],%[ldk]), %%ymm23\n\t"
      "vinserti64x4 $1, (%[k3],%[ldk],2), %%zmm23, %%zmm23\n\t"
      "vmovdqu64 (%[k6]), %%ymm24\n\t"
      "vinserti64x4 $1, (%[k6],%[ldk]), %%zmm24, %%zmm24\n\t"
      ATTNKIT_FP8_WIDEN("21", "22", "0x88", "25", "26")
      ATTNKIT_FP8_WIDEN("23", "24", "0x88", "27", "28")
      ATTNKIT_FP8_DOTS("0")
      ATTNKIT_FP8_WIDEN("21", "22", "0xDD", "25", "26")
      ATTNKIT_FP8_WIDEN("23", "24", "0xDD", "27", "28")
      ATTNKIT_FP8_DOTS("128")
      "add $32, %[k]\n\t"
      "add $32, %[k3]\n\t"
      "add $32, %[k6]\n\t"
      "add $256, %[qa]\n\t"
      "add $256, %[qc]\n\t"
      "cmp %[end], %[k]\n\t"
      "jb 1b\n\t"
      "2:\n\t"
      // A last 16 codes: each key's in its own block directly.
      "test $16, %[d]\n\t"
      "jz 3f\n\t"
      "vmovdqu64 (%[k]), %%xmm25\n\t"
      "vinserti32x4 $1, (%[k],%[ldk]), %%zmm25, %%zmm25\n\t"
      "vinserti32x4 $2, (%[k],%[ldk],2), %%zmm25, %%zmm25\n\t"
      "vinserti32x4 $3, (%[k3]), %%zmm25, %%zmm25\n\t"
      "vmovdqu64 (%[k3],%[ldk]), %%xmm27\n\t"
      "vinserti32x4 $1, (%[k3],%[ldk],2), %%zmm27, %%zmm27\n\t"
      "vinserti32x4 $2, (%[k6]), %%zmm27, %%zmm27\n\t"
      "vinserti32x4 $3, (%[k6],%[ldk]), %%zmm27, %%zmm27\n\t"
      ATTNKIT_FP8_WIDEN_IN_PLACE("25", "26")
      ATTNKIT_FP8_WIDEN_IN_PLACE("27", "28")
      ATTNKIT_FP8_DOTS("0")
      "3:\n\t"
      "vaddps %%zmm8, %%zmm0, %%zmm0\n\t"
      "vaddps %%zmm9, %%zmm1, %%zmm1\n\t"
      "vaddps %%zmm10, %%zmm2, %%zmm2\n\t"
      "vaddps %%zmm11, %%zmm3, %%zmm3\n\t"
      "vaddps %%zmm12, %%zmm4, %%zmm4\n\t"
      "vaddps %%zmm13, %%zmm5, %%zmm5\n\t"
      "vaddps %%zmm14, %%zmm6, %%zmm6\n\t"
      "vaddps %%zmm15, %%zmm7, %%zmm7\n\t"
      "vmovups %%zmm0, (%[out])\n\t"
      "vmovups %%zmm1, 64(%[out])\n\t"
      "vmovups %%zmm2, 128(%[out])\n\t"
      "vmovups %%zmm3, 192(%[out])\n\t"
      "vmovups %%zmm4, 256(%[out])\n\t"
      "vmovups %%zmm5, 320(%[out])\n\t"
      "vmovups %%zmm6, 384(%[out])\n\t"
      "vmovups %%zmm7, 448(%[out])\n\t"
      : [k] "+r"(k), [k3] "+r"(k3), [k6] "+r"(k6), [qa] "+r"(qa), [qc] "+r"(qc)
      : [ldk] "r"(ldk), [ldq] "r"(ldq), [end] "r"(end32), [d] "r"(d), [t] "r"(t),
        [out] "r"(out)
      : "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
        "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18",
        "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28",
        "xmm29", "xmm30");
}
// clang-format on
#undef ATTNKIT_FP8_DOTS
#undef ATTNKIT_FP8_ROW_DOTS
#undef ATTNKIT_FP8_WIDEN
#undef ATTNKIT_FP8_WIDEN_IN_PLACE

// Fp8DotsOfEightKeys on the n < 8 rows k + i ldk, padded to eight with
// copies of the last (a group smaller than 8 with no 8 keys to end at).
// Apart, so that its 8 KiB buffer is no part of Fp8QDotK4's frame.
__attribute__((noinline)) ATTNKIT_TARGET_FP8 void Fp8DotsOfFewKeys(const uint8_t* k, size_t ldk,
                                                                   size_t n, size_t d,
                                                                   const char* qa, size_t ldq,
                                                                   const uint8_t* t, float* out) {
  alignas(64) uint8_t rows[8 * kMaxFp8QDotD];
  for (size_t i = 0; i < 8; ++i) std::memcpy(rows + i * d, k + (i < n ? i : n - 1) * ldk, d);
  Fp8DotsOfEightKeys(rows, d, d, qa, ldq, t, out);
}

}  // namespace

ATTNKIT_TARGET_FP8 void Fp8QDotK4(const uint16_t* qb, size_t ldq, const uint8_t* k, size_t ldk,
                                  size_t d, size_t keys, bool e4m3, float scale, float* s,
                                  const uint8_t* pf_k, size_t ld_pf_k, const uint8_t* pf_v,
                                  size_t ld_pf_v, size_t ahead, const L1Rows& l1) {
  // Eight keys at a time (Fp8DotsOfEightKeys): keys 4 h + b in block b of
  // the vectors of h, 16 codes of each per widening, widened in place (the
  // in-block byte interleave keeps each key's words in its block) against
  // the rows' 8-value blocks (Fp8QueryBlocks). So one accumulator per row
  // and h serves four keys, a short tree reduces 4 vectors per four keys
  // (about 2 operations a key, where one vector per key and row took 11),
  // and each Q vector loaded serves eight keys.
  //
  // A last group of fewer than 8 keys ends at the last key (its first
  // keys computed again, not stored) where there are 8 keys at least, and
  // otherwise reads a copy of its rows padded with the last.
  const uint8_t* const t = ByteTables().widen[e4m3 ? 0 : 1].lo;
  const char* const qa = reinterpret_cast<const char*>(qb);
  const __m512 sv = _mm512_set1_ps(scale);
  constexpr size_t kKeys = 8;
  // [h][r]: Fp8DotsOfEightKeys's out, written and read unaligned: ASan's
  // use-after-return stack aligns frames to 32 bytes only
  // (tools/ci_hardening.sh), where an aligned 64-byte load faulted.
  float sums[2][4][16];
  for (size_t j = 0; j < keys; j += kKeys) {
    const size_t n = keys - j < kKeys ? keys - j : kKeys;
    for (size_t x = j; x < j + n && x < ahead; ++x)
      PrefetchAheadKeyL2(pf_k, ld_pf_k, pf_v, ld_pf_v, x, d);
    PrefetchL1Rows(l1, j, j + kKeys);
    // The group's first key: j, or keys - 8 for a last group of fewer.
    const size_t first = n == kKeys || keys < kKeys ? j : keys - kKeys;
    if (n == kKeys || keys >= kKeys) {
      Fp8DotsOfEightKeys(k + first * ldk, ldk, d, qa, 2 * ldq, t, &sums[0][0][0]);
    } else {
      Fp8DotsOfFewKeys(k + j * ldk, ldk, n, d, qa, 2 * ldq, t, &sums[0][0][0]);
    }
    // Key first + 4 h + b lands at s[4 (first + 4 h + b) + r]; keys below
    // j are the previous group's, stored already.
    for (size_t h = 0; h < 2; ++h) {
      const size_t key0 = first + 4 * h;             // the key of block 0
      if (key0 + 4 <= j || key0 >= j + n) continue;  // no key of its own
      __m512 a[4];
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) a[r] = _mm512_loadu_ps(sums[h][r]);
      // Block b: [row 0, 1, 2, 3] sums of key key0 + b, the packed order.
      const __m512 dots = QuadSums(PairSums(a[0], a[1]), PairSums(a[2], a[3]));
      const size_t skip = key0 < j ? j - key0 : 0;  // blocks already stored
      const size_t stop = key0 + 4 <= j + n ? 4 : j + n - key0;
      const __mmask16 keep =
          static_cast<__mmask16>(((1u << (4 * stop)) - 1) & ~((1u << (4 * skip)) - 1));
      _mm512_mask_storeu_ps(s + 4 * key0, keep, _mm512_mul_ps(dots, sv));
    }
  }
  PrefetchL1Rows(l1, keys, l1.count);
}

ATTNKIT_TARGET_FP8 bool Fp8WeightedSumV4(const float* p, size_t keys, const uint8_t* const* v,
                                         size_t dv, size_t dvp, bool e4m3, const float* alpha,
                                         float* o, size_t ldo, const L1Rows& l1) {
  // The weights as bf16 pairs of keys per row: pw[4 jp + r] = (P[2 jp, r],
  // P[2 jp + 1, r]).
  alignas(64) uint32_t pw[kMaxWeightedPairsKeys / 2 * 4 + 8];
  if (!BF16WeightPairs4(p, keys, pw)) {
    PrefetchL1Rows(l1, 0, l1.count);
    return false;
  }
  const Widener t = MakeWidener(e4m3);
  const size_t pairs = (keys + 1) / 2;
  for (size_t c0 = 0; c0 < dvp; c0 += 64) {
    // O's vectors [c0, c0 + 64) within dvp, and V's bytes within dv.
    __mmask16 cols[4];
#pragma GCC unroll 4
    for (int cv = 0; cv < 4; ++cv) cols[cv] = c0 + 16 * cv < dvp ? 0xFFFF : 0;
    const __mmask64 bytes = RowBytesMask(c0, dv);
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const __m512 a = _mm512_set1_ps(alpha != nullptr ? alpha[r] : 1.0f);
#pragma GCC unroll 4
      for (int cv = 0; cv < 4; ++cv) {
        acc[r][cv] = _mm512_mul_ps(a, _mm512_maskz_loadu_ps(cols[cv], o + r * ldo + c0 + 16 * cv));
      }
    }
    // l1's rows spread over the first column block, a pair per pair.
    const L1Rows l1_here = c0 == 0 ? l1 : L1Rows{};
    for (size_t jp = 0; jp < pairs; ++jp) {
      PrefetchL1Rows(l1_here, 2 * jp, 2 * jp + 2);
      const __m512i v0 = _mm512_maskz_loadu_epi8(bytes, v[2 * jp] + c0);
      const __m512i v1 = _mm512_maskz_loadu_epi8(bytes, v[2 * jp + 1] + c0);
      // Codes of the two keys column by column: dword lane c of w[c / 16]
      // holds (V[j, c], V[j + 1, c]).
      __m512i w[4];
      Widen(t, _mm512_permutex2var_epi8(v0, t.pair0, v1), &w[0], &w[1]);
      Widen(t, _mm512_permutex2var_epi8(v0, t.pair1, v1), &w[2], &w[3]);
      AddWeightedPair4x4(pw + 4 * jp, w, acc);
    }
    PrefetchL1Rows(l1_here, 2 * pairs, l1_here.count);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
#pragma GCC unroll 4
      for (int cv = 0; cv < 4; ++cv) {
        _mm512_mask_storeu_ps(o + r * ldo + c0 + 16 * cv, cols[cv], acc[r][cv]);
      }
    }
  }
  return true;
}

bool HaveFp8BF16Dot() {
  static const bool have = HaveBF16Dot() && __builtin_cpu_supports("avx512vbmi");
  return have;
}

}  // namespace x86_dot
}  // namespace attnkit

#else  // not x86-64 with GCC or Clang: HaveFp8BF16Dot() is false, so never called

namespace attnkit {
namespace x86_dot {

bool HaveFp8BF16Dot() { return false; }
void Fp8QDotK4(const uint16_t*, size_t, const uint8_t*, size_t, size_t, size_t, bool, float, float*,
               const uint8_t*, size_t, const uint8_t*, size_t, size_t, const L1Rows&) {}
bool Fp8WeightedSumV4(const float*, size_t, const uint8_t* const*, size_t, size_t, bool,
                      const float*, float*, size_t, const L1Rows&) {
  return false;
}

}  // namespace x86_dot
}  // namespace attnkit

#endif
