// bf16 dot-product kernels (x86_dot.h) with AVX512_BF16: vdpbf16ps adds two
// bf16 x bf16 products (exact in f32) to each f32 lane, rounding to nearest
// even with subnormal inputs and results treated as zero (the oracle grants
// that: oracle/compare.h, MayFlushBF16Products). Each function is compiled
// for AVX-512 with BF16 by its target attribute; callers check HaveBF16Dot().
#include <cstring>

#include "backends/highway/x86_dot.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

#include "backends/highway/x86_bf16_ops.h"

// GCC 12's AVX-512 headers start some intrinsics from an undefined vector,
// which -Wmaybe-uninitialized reports at every use.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace attnkit {
namespace x86_dot {
namespace {

using bf16_ops::Dot;
using bf16_ops::PairsOfRows;

// kKeys keys x kRowVecs vectors of rows (16 each) of Q.K.
template <int kKeys, int kRowVecs = 2>
ATTNKIT_TARGET_BF16 inline void QDotKBlock(const uint32_t* qp, size_t ldq, const uint16_t* k,
                                           size_t ldk, size_t pairs, float scale, float* s,
                                           size_t lds) {
  __m512 acc[kKeys][kRowVecs];
#pragma GCC unroll 8
  for (int kk = 0; kk < kKeys; ++kk) {
#pragma GCC unroll 4
    for (int v = 0; v < kRowVecs; ++v) acc[kk][v] = _mm512_setzero_ps();
  }
  for (size_t c2 = 0; c2 < pairs; ++c2) {
    __m512i q[kRowVecs];
#pragma GCC unroll 4
    for (int v = 0; v < kRowVecs; ++v) q[v] = _mm512_loadu_si512(qp + c2 * ldq + 16 * v);
#pragma GCC unroll 8
    for (int kk = 0; kk < kKeys; ++kk) {
      uint32_t kv;  // K[j, 2 c2], K[j, 2 c2 + 1]
      std::memcpy(&kv, k + kk * ldk + 2 * c2, sizeof(kv));
      const __m512i kb = _mm512_set1_epi32(static_cast<int>(kv));
#pragma GCC unroll 4
      for (int v = 0; v < kRowVecs; ++v) acc[kk][v] = Dot(acc[kk][v], q[v], kb);
    }
  }
  const __m512 sv = _mm512_set1_ps(scale);
#pragma GCC unroll 8
  for (int kk = 0; kk < kKeys; ++kk) {
#pragma GCC unroll 4
    for (int v = 0; v < kRowVecs; ++v) {
      _mm512_storeu_ps(s + kk * lds + 16 * v, _mm512_mul_ps(acc[kk][v], sv));
    }
  }
}

// kRows rows x kColVecs vectors of columns of O = alpha O + P.V. The sums
// over the tile's keys start from zero and meet alpha O at the end: the
// first products then wait on no load of O (microbenchmark, 64 rows x 64
// keys in L1, Zen 5: d128 0.32 -> 0.30 ns a vdpbf16ps; 0.273 is the peak).
template <int kColVecs, int kRows = 4>
ATTNKIT_TARGET_BF16 inline void WeightedSumVTile(const uint32_t* pp, size_t ldpp,
                                                 const uint32_t* vp, size_t ldvp, size_t key_pairs,
                                                 const float* alpha, size_t r0, size_t c0, float* o,
                                                 size_t ldo) {
  __m512 acc[kRows][kColVecs];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int cv = 0; cv < kColVecs; ++cv) acc[r][cv] = _mm512_setzero_ps();
  }
  for (size_t jp = 0; jp < key_pairs; ++jp) {
    __m512i vv[kColVecs];
#pragma GCC unroll 4
    for (int cv = 0; cv < kColVecs; ++cv) {
      vv[cv] = _mm512_loadu_si512(vp + jp * ldvp + c0 + 16 * cv);
    }
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m512i w = _mm512_set1_epi32(static_cast<int>(pp[jp * ldpp + r0 + r]));
#pragma GCC unroll 4
      for (int cv = 0; cv < kColVecs; ++cv) acc[r][cv] = Dot(acc[r][cv], w, vv[cv]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    const __m512 a = _mm512_set1_ps(alpha != nullptr ? alpha[r0 + r] : 1.0f);
#pragma GCC unroll 4
    for (int cv = 0; cv < kColVecs; ++cv) {
      float* out = o + (r0 + r) * ldo + c0 + 16 * cv;
      _mm512_storeu_ps(out, _mm512_fmadd_ps(a, _mm512_loadu_ps(out), acc[r][cv]));
    }
  }
}

// 16-bit lane indices that interleave: lane 2i <- a[first + i], 2i + 1 <-
// b[first + i] (for permutex2var: b's lanes are numbered from 32).
ATTNKIT_TARGET_BF16 inline __m512i InterleaveIndex(int first, int b_base) {
  alignas(64) int16_t idx[32];
  for (int i = 0; i < 16; ++i) {
    idx[2 * i] = static_cast<int16_t>(first + i);
    idx[2 * i + 1] = static_cast<int16_t>(b_base + first + i);
  }
  return _mm512_loadu_si512(idx);
}

}  // namespace

ATTNKIT_TARGET_BF16 void BF16QDotK(const uint32_t* qp, size_t ldq, const uint16_t* k, size_t ldk,
                                   size_t d, size_t rows, size_t keys, float scale, float* s,
                                   size_t lds) {
  const size_t pairs = d / 2;
  if (rows % 64 == 0) {
    // 4 keys x 4 vectors: each K pair broadcast feeds 4 products, where 8
    // keys x 2 vectors fed 2 (8 loads per 16 products, not 10). FAST d64
    // causal prefill, one thread, Zen 5, alternating runs, four rounds:
    // Q.K phase 10.0-11.0 -> 9.7-10.2 ms.
    for (size_t r0 = 0; r0 < rows; r0 += 64) {
      size_t j = 0;
      for (; j + 4 <= keys; j += 4) {
        QDotKBlock<4, 4>(qp + r0, ldq, k + j * ldk, ldk, pairs, scale, s + j * lds + r0, lds);
      }
      for (; j < keys; ++j) {
        QDotKBlock<1, 4>(qp + r0, ldq, k + j * ldk, ldk, pairs, scale, s + j * lds + r0, lds);
      }
    }
    return;
  }
  for (size_t r0 = 0; r0 < rows; r0 += 32) {
    size_t j = 0;
    // 8 keys x 2 vectors: 16 accumulators cover the instruction's latency.
    for (; j + 8 <= keys; j += 8) {
      QDotKBlock<8>(qp + r0, ldq, k + j * ldk, ldk, pairs, scale, s + j * lds + r0, lds);
    }
    for (; j + 2 <= keys; j += 2) {
      QDotKBlock<2>(qp + r0, ldq, k + j * ldk, ldk, pairs, scale, s + j * lds + r0, lds);
    }
    for (; j < keys; ++j) {
      QDotKBlock<1>(qp + r0, ldq, k + j * ldk, ldk, pairs, scale, s + j * lds + r0, lds);
    }
  }
}

ATTNKIT_TARGET_BF16 void BF16PackWeights(const float* p, size_t ldp, size_t keys, size_t rows,
                                         uint32_t* pp, size_t ldpp) {
  const __m512i idx = InterleaveIndex(0, 16);  // within one vector: a = low, b = high half
  for (size_t jp = 0; 2 * jp < keys; ++jp) {
    const float* a = p + 2 * jp * ldp;
    const bool has_b = 2 * jp + 1 < keys;
    for (size_t r = 0; r < rows; r += 16) {
      const __m512 va = _mm512_loadu_ps(a + r);
      const __m512 vb = has_b ? _mm512_loadu_ps(a + ldp + r) : _mm512_setzero_ps();
      // Low 16 lanes from va, high 16 from vb, each rounded to nearest even.
      const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(vb, va);
      _mm512_storeu_si512(pp + jp * ldpp + r, _mm512_permutexvar_epi16(idx, both));
    }
  }
}

ATTNKIT_TARGET_BF16 void BF16PackValues(const uint16_t* const* rows, size_t keys, size_t d,
                                        size_t dp, uint32_t* vp, size_t ldvp) {
  const __m512i lo = InterleaveIndex(0, 32), hi = InterleaveIndex(16, 32);
  for (size_t jp = 0; 2 * jp < keys; ++jp) {
    const uint16_t* a = rows[2 * jp];
    const uint16_t* b = 2 * jp + 1 < keys ? rows[2 * jp + 1] : nullptr;
    // Rows kRowsAhead on, from memory (V is read once per call): without
    // this the pack waited on each row's load (FAST d64 causal prefill,
    // one thread, Zen 5: V prepared once per call 1.28-1.38 -> 0.50-0.52
    // ms). Null rows (NaN rows of a tile's own pack) are skipped.
    constexpr size_t kRowsAhead = 16;
    for (size_t x = 2 * jp + kRowsAhead; x < 2 * jp + kRowsAhead + 2 && x < keys; ++x) {
      if (rows[x] != nullptr) PrefetchSpanL1(rows[x], 2 * d);
    }
    uint32_t* out = vp + jp * ldvp;
    for (size_t c0 = 0; c0 < dp; c0 += 32) {
      const size_t n = c0 < d ? (d - c0 < 32 ? d - c0 : 32) : 0;
      const __mmask32 m = n == 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << n) - 1);
      const __m512i va =
          a == nullptr ? _mm512_setzero_si512() : _mm512_maskz_loadu_epi16(m, a + c0);
      const __m512i vb =
          b == nullptr ? _mm512_setzero_si512() : _mm512_maskz_loadu_epi16(m, b + c0);
      _mm512_storeu_si512(out + c0, _mm512_permutex2var_epi16(va, lo, vb));
      if (c0 + 16 < dp) _mm512_storeu_si512(out + c0 + 16, _mm512_permutex2var_epi16(va, hi, vb));
    }
  }
}

ATTNKIT_TARGET_BF16 void BF16TransposePairs(const uint16_t* const* rows, size_t pairs, uint32_t* qp,
                                            size_t ldq) {
  // A 16 x 16 block of 32-bit pairs at a time: rows in, columns out, in
  // four rounds of shuffles (64 for 256 pairs, where a pair at a time took
  // a store each to as many lines).
  const size_t whole = pairs - pairs % 16;
  for (size_t c2 = 0; c2 < whole; c2 += 16) {
    __m512i x[16], y[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) {
      x[r] = rows[r] == nullptr ? _mm512_setzero_si512() : _mm512_loadu_si512(rows[r] + 2 * c2);
    }
    // Round 1: pairs of rows, 32-bit lanes interleaved within 128 bits.
#pragma GCC unroll 8
    for (int r = 0; r < 16; r += 2) {
      y[r] = _mm512_unpacklo_epi32(x[r], x[r + 1]);
      y[r + 1] = _mm512_unpackhi_epi32(x[r], x[r + 1]);
    }
    // Round 2: quads of rows, 64-bit lanes interleaved: each 128-bit block
    // of x[4 q + i] now holds column 4 b + i of rows 4 q .. 4 q + 3 (block b).
#pragma GCC unroll 4
    for (int r = 0; r < 16; r += 4) {
      x[r] = _mm512_unpacklo_epi64(y[r], y[r + 2]);
      x[r + 1] = _mm512_unpackhi_epi64(y[r], y[r + 2]);
      x[r + 2] = _mm512_unpacklo_epi64(y[r + 1], y[r + 3]);
      x[r + 3] = _mm512_unpackhi_epi64(y[r + 1], y[r + 3]);
    }
    // Rounds 3 and 4: 128-bit blocks across the four quads.
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const __m512i a = _mm512_shuffle_i32x4(x[i], x[4 + i], 0x44);  // blocks 0, 1 of each
      const __m512i b = _mm512_shuffle_i32x4(x[i], x[4 + i], 0xee);  // blocks 2, 3
      const __m512i c = _mm512_shuffle_i32x4(x[8 + i], x[12 + i], 0x44);
      const __m512i e = _mm512_shuffle_i32x4(x[8 + i], x[12 + i], 0xee);
      y[i] = _mm512_shuffle_i32x4(a, c, 0x88);       // block 0 of each quad: column i
      y[4 + i] = _mm512_shuffle_i32x4(a, c, 0xdd);   // block 1: column 4 + i
      y[8 + i] = _mm512_shuffle_i32x4(b, e, 0x88);   // block 2: column 8 + i
      y[12 + i] = _mm512_shuffle_i32x4(b, e, 0xdd);  // block 3: column 12 + i
    }
#pragma GCC unroll 16
    for (int c = 0; c < 16; ++c) _mm512_storeu_si512(qp + (c2 + c) * ldq, y[c]);
  }
  for (int r = 0; r < 16; ++r) {
    for (size_t c2 = whole; c2 < pairs; ++c2) {
      uint32_t pair = 0;
      if (rows[r] != nullptr) std::memcpy(&pair, rows[r] + 2 * c2, sizeof(pair));
      qp[c2 * ldq + r] = pair;
    }
  }
}

ATTNKIT_TARGET_BF16 void BF16WeightedSumV(const uint32_t* pp, size_t ldpp, const uint32_t* vp,
                                          size_t ldvp, size_t key_pairs, const float* alpha,
                                          size_t rows, size_t dp, float* o, size_t ldo,
                                          const float* key_end) {
  // 8 rows x 2 vectors, as QDotKBlock's 8 keys x 2 vectors: each V load
  // feeds 8 products (same microbenchmark: d64 2.47 -> 2.43 us a tile).
  if (rows % 8 == 0 && dp % 32 == 0) {
    for (size_t r0 = 0; r0 < rows; r0 += 8) {
      const size_t pairs = PairsOfRows(key_end, r0, 8, key_pairs);
      for (size_t c0 = 0; c0 < dp; c0 += 32) {
        WeightedSumVTile<2, 8>(pp, ldpp, vp, ldvp, pairs, alpha, r0, c0, o, ldo);
      }
    }
    return;
  }
  for (size_t r0 = 0; r0 < rows; r0 += 4) {
    const size_t pairs = PairsOfRows(key_end, r0, 4, key_pairs);
    size_t c0 = 0;
    // 4 rows x 4 vectors: 16 accumulators, each broadcast weight pair feeds 4.
    for (; c0 + 64 <= dp; c0 += 64) {
      WeightedSumVTile<4>(pp, ldpp, vp, ldvp, pairs, alpha, r0, c0, o, ldo);
    }
    for (; c0 + 32 <= dp; c0 += 32) {
      WeightedSumVTile<2>(pp, ldpp, vp, ldvp, pairs, alpha, r0, c0, o, ldo);
    }
    for (; c0 < dp; c0 += 16) {
      WeightedSumVTile<1>(pp, ldpp, vp, ldvp, pairs, alpha, r0, c0, o, ldo);
    }
  }
}

ATTNKIT_TARGET_BF16 double BF16DotPeakLoop(int64_t iterations) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512i a = _mm512_set1_epi32(0x3f803f80), b = _mm512_set1_epi32(0x00010001);  // 1, tiny
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = Dot(acc[i], a, b);
  }
  float sum = 0;
  alignas(64) float lanes[16];
  for (int i = 0; i < 16; ++i) {
    _mm512_storeu_ps(lanes, acc[i]);
    sum += lanes[0];
  }
  volatile float sink = sum;
  (void)sink;
  return 64.0 * 16.0 * static_cast<double>(iterations);
}

namespace {
// CPUID leaf 0's vendor string is `name` (12 characters).
bool CpuVendorIs(const char* name) {
  unsigned eax, vendor[3];
  if (!__get_cpuid(0, &eax, &vendor[0], &vendor[2], &vendor[1])) return false;
  return std::memcmp(vendor, name, 12) == 0;  // ebx, edx, ecx
}
}  // namespace

bool PreferBF16Dot() {
  static const bool prefer = HaveBF16Dot() && CpuVendorIs("AuthenticAMD");
  return prefer;
}

bool IntelCpu() {
  static const bool intel = CpuVendorIs("GenuineIntel");
  return intel;
}

bool HaveBF16Dot() {
  static const bool have =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bf16");
  return have;
}

}  // namespace x86_dot
}  // namespace attnkit

#else  // not x86-64 with GCC or Clang: HaveBF16Dot() is false, so never called

namespace attnkit {
namespace x86_dot {

bool HaveBF16Dot() { return false; }
bool PreferBF16Dot() { return false; }
bool IntelCpu() { return false; }
double BF16DotPeakLoop(int64_t) { return 0; }
void BF16QDotK(const uint32_t*, size_t, const uint16_t*, size_t, size_t, size_t, size_t, float,
               float*, size_t) {}
void BF16PackWeights(const float*, size_t, size_t, size_t, uint32_t*, size_t) {}
void BF16PackValues(const uint16_t* const*, size_t, size_t, size_t, uint32_t*, size_t) {}
void BF16TransposePairs(const uint16_t* const*, size_t, uint32_t*, size_t) {}
void BF16WeightedSumV(const uint32_t*, size_t, const uint32_t*, size_t, size_t, const float*,
                      size_t, size_t, float*, size_t, const float*) {}

}  // namespace x86_dot
}  // namespace attnkit

#endif
