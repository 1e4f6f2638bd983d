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

// GCC 12's AVX-512 headers start some intrinsics from an undefined vector,
// which -Wmaybe-uninitialized reports at every use.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define ATTNKIT_TARGET_FP8 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi")))

namespace attnkit {
namespace x86_dot {
namespace {

// The bf16 of each fp8 magnitude m < 128 (the code without its sign), as
// two byte tables per format: lo[m] and hi[m], bf16 = lo | hi << 8.
// Also the byte orders of Widener (built once: a call decodes one tile).
struct Fp8ByteTables {
  alignas(64) uint8_t lo[2][128];
  alignas(64) uint8_t hi[2][128];
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
        t.lo[f][m] = static_cast<uint8_t>(bits >> 16);
        t.hi[f][m] = static_cast<uint8_t>(bits >> 24);
      }
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
  const int f = e4m3 ? 0 : 1;
  return {_mm512_load_si512(t.lo[f]),
          _mm512_load_si512(t.lo[f] + 64),
          _mm512_load_si512(t.hi[f]),
          _mm512_load_si512(t.hi[f] + 64),
          _mm512_set1_epi8(static_cast<char>(0x80)),
          _mm512_load_si512(t.pairs[0]),
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

ATTNKIT_TARGET_FP8 inline __m512 Dot(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

// The first levels of VnniQDotK4's reduction tree, in f32: pairs of
// vectors (x, y) -> per 128-bit block [x0+x2, y0+y2, x1+x3, y1+y3]; two of
// those -> per block the four block sums of x, y, z, w.
ATTNKIT_TARGET_FP8 inline __m512 PairSums(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_unpacklo_ps(x, y), _mm512_unpackhi_ps(x, y));
}
ATTNKIT_TARGET_FP8 inline __m512 QuadSums(__m512 xy, __m512 zw) {
  const __m512d a = _mm512_castps_pd(xy), b = _mm512_castps_pd(zw);
  return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                       _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
}

}  // namespace

ATTNKIT_TARGET_FP8 void Fp8QDotK4(const uint16_t* qb, size_t ldq, const uint8_t* k, size_t ldk,
                                  size_t d, size_t keys, bool e4m3, float scale, float* s,
                                  const uint8_t* pf_k, size_t ld_pf_k, const uint8_t* pf_v,
                                  size_t ld_pf_v, size_t ahead, const L1Rows& l1) {
  const Widener t = MakeWidener(e4m3);
  const __m512 sv = _mm512_set1_ps(scale);
  // Eight keys at a time, 16 codes of each per step: keys 4 h + b in block
  // b of vector h (masked block broadcasts: loads, no shuffle). Widened in
  // place (the in-block byte interleave keeps each key's words in its
  // block), they meet the rows' 8-value blocks (Fp8QueryBlocks): lane i of
  // block b sums key b's products with one row. So one accumulator per row
  // and vector serves four keys, a short tree reduces 4 vectors per four
  // keys (about 2 operations a key, where one vector per key and row took
  // 11), and each Q vector loaded serves eight keys: 512-bit loads bound
  // the step otherwise. Zen 5 here, one thread, d 128, rows in L1: 10.2 ns
  // a key with one vector per key and row or with four keys a step (Q
  // loaded at each use either way), 8.4 with eight and Q held, 5.8 (an
  // upper bound, wrong results) with no Q loads at all. A last group of
  // fewer keys repeats its last key and stores only its own sums.
  constexpr size_t kKeys = 8;
  for (size_t j = 0; j < keys; j += kKeys) {
    const size_t n = keys - j < kKeys ? keys - j : kKeys;
    for (size_t x = j; x < j + n && x < ahead; ++x)
      PrefetchAheadKeyL2(pf_k, ld_pf_k, pf_v, ld_pf_v, x, d);
    PrefetchL1Rows(l1, j, j + kKeys);
    const uint8_t* rows[kKeys];
    for (size_t key = 0; key < kKeys; ++key) rows[key] = k + (j + (key < n ? key : n - 1)) * ldk;
    __m512 a[2][4];  // [vector h][row r]
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) a[0][r] = a[1][r] = _mm512_setzero_ps();
    for (size_t c = 0; c < d; c += 16) {
      __m512i w[2][2];  // [vector h]: key 4 h + b's codes [c, c + 8), then [c + 8, c + 16)
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const uint8_t* const* rh = rows + 4 * h;
        __m512i x =
            _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rh[0] + c)));
        x = _mm512_mask_broadcast_i32x4(
            x, 0x00F0, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rh[1] + c)));
        x = _mm512_mask_broadcast_i32x4(
            x, 0x0F00, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rh[2] + c)));
        x = _mm512_mask_broadcast_i32x4(
            x, 0xF000, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rh[3] + c)));
        Widen(t, x, &w[h][0], &w[h][1]);
      }
      const uint16_t* qc = qb + 4 * c;  // the blocks of Q[r, c .. c + 16)
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        __m512i q0 = _mm512_loadu_si512(qc + r * ldq);
        __m512i q1 = _mm512_loadu_si512(qc + r * ldq + 32);
        // Each loaded once for the eight keys: GCC 12 would load them again
        // at each use instead (a memory operand costs a load each).
        asm("" : "+v"(q0), "+v"(q1));
        a[0][r] = Dot(Dot(a[0][r], w[0][0], q0), w[0][1], q1);
        a[1][r] = Dot(Dot(a[1][r], w[1][0], q0), w[1][1], q1);
      }
    }
    for (size_t h = 0; h < 2 && 4 * h < n; ++h) {
      // Block b: [row 0, 1, 2, 3] sums of key 4 h + b, the packed order.
      const __m512 dots = QuadSums(PairSums(a[h][0], a[h][1]), PairSums(a[h][2], a[h][3]));
      const size_t nh = n - 4 * h < 4 ? n - 4 * h : 4;
      const __mmask16 keep = static_cast<__mmask16>((1u << (4 * nh)) - 1);
      _mm512_mask_storeu_ps(s + 4 * (j + 4 * h), keep, _mm512_mul_ps(dots, sv));
    }
  }
  PrefetchL1Rows(l1, keys, l1.count);
}

ATTNKIT_TARGET_FP8 bool Fp8WeightedSumV4(const float* p, size_t keys, const uint8_t* const* v,
                                         size_t dv, size_t dvp, bool e4m3, const float* alpha,
                                         float* o, size_t ldo, const L1Rows& l1) {
  // The weights as bf16 pairs of keys per row: pw[4 jp + r] = (P[2 jp, r],
  // P[2 jp + 1, r]). Four keys' 16 weights are rounded at once, and a word
  // permutation pairs each row's weights of two keys.
  alignas(64) uint32_t pw[kMaxWeightedPairsKeys / 2 * 4 + 8];
  alignas(32) static constexpr int16_t kPairRows[16] = {0, 4,  1, 5,  2,  6,  3,  7,
                                                        8, 12, 9, 13, 10, 14, 11, 15};
  const __m256i pair_rows = _mm256_load_si256(reinterpret_cast<const __m256i*>(kPairRows));
  __mmask16 bad = 0;
  for (size_t j = 0; j < keys; j += 4) {
    const size_t n = keys - j < 4 ? keys - j : 4;
    const __m512 x = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << (4 * n)) - 1), p + 4 * j);
    bad |= _mm512_fpclass_ps_mask(x, 0x99);  // QNaN, +Inf, -Inf, SNaN
    const __m256i b = (__m256i)_mm512_cvtneps_pbh(x);
    _mm256_store_si256(reinterpret_cast<__m256i*>(pw + 2 * j),
                       _mm256_permutexvar_epi16(pair_rows, b));
  }
  if (bad != 0) {
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
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        const __m512i pr = _mm512_set1_epi32(static_cast<int>(pw[4 * jp + r]));
#pragma GCC unroll 4
        for (int cv = 0; cv < 4; ++cv) acc[r][cv] = Dot(acc[r][cv], w[cv], pr);
      }
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
