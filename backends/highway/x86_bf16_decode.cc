// bf16 decode kernels (x86_dot.h) with AVX512_BF16, for direct tiles of a
// packed item (4 query rows against bf16 K and V storage): vdpbf16ps on
// Q rows rounded to bf16 against K rows as they lie, and on P rounded to
// bf16 against pairs of V rows interleaved in registers. Per key and group
// of 4 rows that is 16 vdpbf16ps for Q.K and 16 for P.V at d = Ev = 128,
// where the f32 kernels take 32 FMAs each and widen every K and V value
// first. Compiled for AVX-512 with BF16 by its target attribute; callers
// check HaveBF16Dot().
#include <cstring>

#include "backends/highway/x86_dot.h"
#include "platform/prefetch.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "backends/highway/x86_bf16_ops.h"

// GCC 12's AVX-512 headers start some intrinsics from an undefined vector,
// which -Wmaybe-uninitialized reports at every use.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace attnkit {
namespace x86_dot {
namespace {

using bf16_ops::AddWeightedPair4x4;
using bf16_ops::BlockPairSums;
using bf16_ops::Dot;
using bf16_ops::FourKeySums;
using bf16_ops::PairSums;
using bf16_ops::QuadSums;

// The bf16 values [c, c + 32) of a row of n values that lie below n, as the
// mask of a 32-value masked load; 0 where c >= n.
inline __mmask32 RowValuesMask(size_t c, size_t n) {
  return c + 32 <= n ? ~__mmask32{0} : c >= n ? 0 : static_cast<__mmask32>((1u << (n - c)) - 1);
}

// a[key][r] += K[key] . Q[r] over the 32 values at column c (those `mask`
// keeps; the rest read as 0) for kKeys keys (rows k + key * ldk) and rows
// r < 4: each Q vector is loaded once for the keys.
template <int kKeys>
ATTNKIT_TARGET_BF16 inline void StepKeys(const uint16_t* q, size_t ldq, const uint16_t* k,
                                         size_t ldk, size_t c, __mmask32 mask, __m512 (*a)[4]) {
  __m512i qv[4];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) qv[r] = _mm512_loadu_si512(q + r * ldq + c);
#pragma GCC unroll 4
  for (int key = 0; key < kKeys; ++key) {
    const __m512i kv = _mm512_maskz_loadu_epi16(mask, k + key * ldk + c);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) a[key][r] = Dot(a[key][r], kv, qv[r]);
  }
}

// The rows' sums of kKeys keys over every column [0, d): whole steps of 32
// values, then a masked last one.
template <int kKeys>
ATTNKIT_TARGET_BF16 inline void KeySums(const uint16_t* q, size_t ldq, const uint16_t* k,
                                        size_t ldk, size_t d, __m512 (*a)[4]) {
#pragma GCC unroll 4
  for (int key = 0; key < kKeys; ++key) {
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) a[key][r] = _mm512_setzero_ps();
  }
  const size_t full = d / 32 * 32;
  for (size_t c = 0; c < full; c += 32) StepKeys<kKeys>(q, ldq, k, ldk, c, ~__mmask32{0}, a);
  if (full < d) StepKeys<kKeys>(q, ldq, k, ldk, full, RowValuesMask(full, d), a);
}

}  // namespace

ATTNKIT_TARGET_BF16 void BF16QDotK4(const uint16_t* q, size_t ldq, const uint16_t* k, size_t ldk,
                                    size_t d, size_t keys, float scale, float* s,
                                    const uint16_t* pf_k, size_t ld_pf_k, const uint16_t* pf_v,
                                    size_t ld_pf_v, size_t ahead, const L1Rows& l1) {
  // scale multiplies the sums (the reference's order for a rounded Q row,
  // core/fast_compute.h): a sum past FLT_MAX that scale would bring back
  // in range comes out Inf here, only with K values near bf16's maximum.
  const __m512 sv = _mm512_set1_ps(scale);
  const size_t row_bytes = 2 * d;
  size_t j = 0;
  // Four keys at a time: 16 accumulators (key-major, 4 rows each) and one
  // transposing tree that leaves the 16 sums in the packed order [key 0
  // rows 0-3, key 1 ...], about 11 operations a key.
  for (; j + 4 <= keys; j += 4) {
    for (size_t x = j; x < j + 4 && x < ahead; ++x) {
      PrefetchAheadKeyL2(pf_k, 2 * ld_pf_k, pf_v, 2 * ld_pf_v, x, row_bytes);
    }
    PrefetchL1Rows(l1, j, j + 4);
    __m512 a[4][4];
    KeySums<4>(q, ldq, k + j * ldk, ldk, d, a);
    const __m512 dots = FourKeySums(a);
    _mm512_storeu_ps(s + 4 * j, _mm512_mul_ps(dots, sv));
  }
  for (; j < keys; ++j) {  // the last keys one at a time
    if (j < ahead) PrefetchAheadKeyL2(pf_k, 2 * ld_pf_k, pf_v, 2 * ld_pf_v, j, row_bytes);
    PrefetchL1Rows(l1, j, j + 1);
    __m512 a[1][4];
    KeySums<1>(q, ldq, k + j * ldk, ldk, d, a);
    // Per block [rows 0-3]; then the four blocks added as the tree above
    // adds them, (b0 + b1) + (b2 + b3), so that a key's score has the same
    // bits whether it falls in a group of four or here (a run of paged
    // rows may end anywhere: paged equals dense bit for bit).
    const __m512 u = QuadSums(PairSums(a[0][0], a[0][1]), PairSums(a[0][2], a[0][3]));
    const __m512 x = BlockPairSums(u, u);
    const __m512 y = BlockPairSums(x, x);
    _mm_storeu_ps(s + 4 * j, _mm512_castps512_ps128(_mm512_mul_ps(y, sv)));
  }
  PrefetchL1Rows(l1, keys, l1.count);
}

ATTNKIT_TARGET_BF16 bool BF16WeightPairs4(const float* p, size_t keys, uint32_t* pw) {
  // Four keys' 16 weights rounded at once; a word permutation pairs each
  // row's weights of two keys.
  alignas(32) static constexpr int16_t kPairRows[16] = {0, 4,  1, 5,  2,  6,  3,  7,
                                                        8, 12, 9, 13, 10, 14, 11, 15};
  const __m256i pair_rows = _mm256_load_si256(reinterpret_cast<const __m256i*>(kPairRows));
  __mmask16 bad = 0;
  for (size_t j = 0; j < keys; j += 4) {
    const size_t n = keys - j < 4 ? keys - j : 4;
    const __m512 x = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << (4 * n)) - 1), p + 4 * j);
    bad |= _mm512_fpclass_ps_mask(x, 0x99);  // QNaN, +Inf, -Inf, SNaN
    const __m256i b = (__m256i)_mm512_cvtneps_pbh(x);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(pw + 2 * j),
                        _mm256_permutexvar_epi16(pair_rows, b));
  }
  return bad == 0;
}

ATTNKIT_TARGET_BF16 bool BF16WeightedSumV4(const float* p, size_t keys, const uint16_t* const* v,
                                           size_t dv, size_t dvp, const float* alpha, float* o,
                                           size_t ldo, const L1Rows& l1) {
  alignas(64) uint32_t pw[kMaxWeightedPairsKeys / 2 * 4 + 8];
  if (!BF16WeightPairs4(p, keys, pw)) {
    PrefetchL1Rows(l1, 0, l1.count);
    return false;
  }
  // Two V rows a and b interleave by vpunpck{l,h}wd within 128-bit blocks:
  // of 32 columns, dword lane 4 k + i of the low half holds (a, b) at column
  // 8 k + i, of the high half at column 8 k + 4 + i (k, i < 4). The
  // accumulators keep that order through the tile; O's two vectors of the
  // 32 columns are permuted into it when loaded and back when stored.
  alignas(64) static constexpr int32_t kToLow[16] = {0,  1,  2,  3,  8,  9,  10, 11,
                                                     16, 17, 18, 19, 24, 25, 26, 27};
  alignas(64) static constexpr int32_t kToHigh[16] = {4,  5,  6,  7,  12, 13, 14, 15,
                                                      20, 21, 22, 23, 28, 29, 30, 31};
  alignas(64) static constexpr int32_t kFirst[16] = {0, 1, 2, 3, 16, 17, 18, 19,
                                                     4, 5, 6, 7, 20, 21, 22, 23};
  alignas(64) static constexpr int32_t kSecond[16] = {8,  9,  10, 11, 24, 25, 26, 27,
                                                      12, 13, 14, 15, 28, 29, 30, 31};
  const __m512i to_low = _mm512_load_si512(kToLow), to_high = _mm512_load_si512(kToHigh);
  const __m512i first = _mm512_load_si512(kFirst), second = _mm512_load_si512(kSecond);
  const size_t pairs = (keys + 1) / 2;
  for (size_t c0 = 0; c0 < dvp; c0 += 64) {
    // O's vectors [c0, c0 + 64) within dvp, and V's values within dv, by
    // halves of 32 columns h (accumulators 2 h: low, 2 h + 1: high).
    __mmask16 cols[4];
#pragma GCC unroll 4
    for (int cv = 0; cv < 4; ++cv) cols[cv] = c0 + 16 * cv < dvp ? 0xFFFF : 0;
    const __mmask32 values[2] = {RowValuesMask(c0, dv), RowValuesMask(c0 + 32, dv)};
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const __m512 a = _mm512_set1_ps(alpha != nullptr ? alpha[r] : 1.0f);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const float* orow = o + r * ldo + c0 + 32 * h;
        const __m512 o0 = _mm512_maskz_loadu_ps(cols[2 * h], orow);
        const __m512 o1 = _mm512_maskz_loadu_ps(cols[2 * h + 1], orow + 16);
        acc[r][2 * h] = _mm512_mul_ps(a, _mm512_permutex2var_ps(o0, to_low, o1));
        acc[r][2 * h + 1] = _mm512_mul_ps(a, _mm512_permutex2var_ps(o0, to_high, o1));
      }
    }
    // l1's rows spread over the first column block, a pair per pair.
    const L1Rows l1_here = c0 == 0 ? l1 : L1Rows{};
    for (size_t jp = 0; jp < pairs; ++jp) {
      PrefetchL1Rows(l1_here, 2 * jp, 2 * jp + 2);
      __m512i w[4];
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m512i a = _mm512_maskz_loadu_epi16(values[h], v[2 * jp] + c0 + 32 * h);
        const __m512i b = _mm512_maskz_loadu_epi16(values[h], v[2 * jp + 1] + c0 + 32 * h);
        w[2 * h] = _mm512_unpacklo_epi16(a, b);
        w[2 * h + 1] = _mm512_unpackhi_epi16(a, b);
      }
      AddWeightedPair4x4(pw + 4 * jp, w, acc);
    }
    PrefetchL1Rows(l1_here, 2 * pairs, l1_here.count);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        float* orow = o + r * ldo + c0 + 32 * h;
        const __m512 lo = acc[r][2 * h], hi = acc[r][2 * h + 1];
        _mm512_mask_storeu_ps(orow, cols[2 * h], _mm512_permutex2var_ps(lo, first, hi));
        _mm512_mask_storeu_ps(orow + 16, cols[2 * h + 1], _mm512_permutex2var_ps(lo, second, hi));
      }
    }
  }
  return true;
}

}  // namespace x86_dot
}  // namespace attnkit

#else  // not x86-64 with GCC or Clang: HaveBF16Dot() is false, so never called

namespace attnkit {
namespace x86_dot {

void BF16QDotK4(const uint16_t*, size_t, const uint16_t*, size_t, size_t, size_t, float, float*,
                const uint16_t*, size_t, const uint16_t*, size_t, size_t, const L1Rows&) {}
bool BF16WeightPairs4(const float*, size_t, uint32_t*) { return false; }
bool BF16WeightedSumV4(const float*, size_t, const uint16_t* const*, size_t, size_t, const float*,
                       float*, size_t, const L1Rows&) {
  return false;
}

}  // namespace x86_dot
}  // namespace attnkit

#endif
