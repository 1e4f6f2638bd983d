// int8 dot-product kernel (x86_dot.h) with AVX512_VNNI: vpdpbusd adds four
// u8 x s8 products to each int32 lane, exactly (no saturation). K is signed,
// so each K byte is read as the unsigned K + 128 (an XOR of its sign bit),
// and 128 * sum_c Q[r, c] is subtracted once per row. Compiled for AVX-512
// with VNNI by its target attribute; callers check HaveVnni().
#include "backends/highway/x86_dot.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

// GCC 12's AVX-512 headers start some intrinsics from an undefined vector,
// which -Wmaybe-uninitialized reports at every use.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define ATTNKIT_TARGET_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

namespace attnkit {
namespace x86_dot {
namespace {

// a[r] += (K + 128) . Q[r] over 64 bytes at column c, r < 4.
ATTNKIT_TARGET_VNNI inline void Step(__m512i kv, const int8_t* q, size_t ldq, size_t c,
                                     __m512i* a) {
  const __m512i ku = _mm512_xor_si512(kv, _mm512_set1_epi8(static_cast<char>(0x80)));
  a[0] = _mm512_dpbusd_epi32(a[0], ku, _mm512_loadu_si512(q + c));
  a[1] = _mm512_dpbusd_epi32(a[1], ku, _mm512_loadu_si512(q + ldq + c));
  a[2] = _mm512_dpbusd_epi32(a[2], ku, _mm512_loadu_si512(q + 2 * ldq + c));
  a[3] = _mm512_dpbusd_epi32(a[3], ku, _mm512_loadu_si512(q + 3 * ldq + c));
}

// The rows `ahead` keys on: a K and a V row per key, into L2.
ATTNKIT_TARGET_VNNI inline void PrefetchRows(const int8_t* pf_k, size_t ld_pf_k, const int8_t* pf_v,
                                             size_t ld_pf_v, size_t j, size_t d) {
  for (size_t off = 0; off < d; off += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(pf_k + j * ld_pf_k + off), _MM_HINT_T1);
    _mm_prefetch(reinterpret_cast<const char*>(pf_v + j * ld_pf_v + off), _MM_HINT_T1);
  }
}

// a[key][r] += (K[key] + 128) . Q[r] over the 64 bytes at column c (those
// `mask` keeps; the rest read as 0) for four keys (rows k + key * ldk) and
// rows r < 4: each Q vector is loaded once for the four keys.
ATTNKIT_TARGET_VNNI inline void StepFourKeys(const int8_t* q, size_t ldq, const int8_t* k,
                                             size_t ldk, size_t c, __mmask64 mask,
                                             __m512i (*a)[4]) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i qv[4];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) qv[r] = _mm512_loadu_si512(q + r * ldq + c);
#pragma GCC unroll 4
  for (int key = 0; key < 4; ++key) {
    const __m512i ku = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, k + key * ldk + c), flip);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) a[key][r] = _mm512_dpbusd_epi32(a[key][r], ku, qv[r]);
  }
}

// Pairs of vectors (x, y) -> per 128-bit block [x0+x2, y0+y2, x1+x3, y1+y3].
ATTNKIT_TARGET_VNNI inline __m512i PairSums32(__m512i x, __m512i y) {
  return _mm512_add_epi32(_mm512_unpacklo_epi32(x, y), _mm512_unpackhi_epi32(x, y));
}
// Two PairSums32 results -> per 128-bit block the four block sums of x, y, z, w.
ATTNKIT_TARGET_VNNI inline __m512i QuadSums(__m512i xy, __m512i zw) {
  return _mm512_add_epi32(_mm512_unpacklo_epi64(xy, zw), _mm512_unpackhi_epi64(xy, zw));
}
// Adds blocks (0, 1) and (2, 3) of u and of v: [u0+u1, u2+u3, v0+v1, v2+v3].
ATTNKIT_TARGET_VNNI inline __m512i BlockPairSums(__m512i u, __m512i v) {
  return _mm512_add_epi32(_mm512_shuffle_i32x4(u, v, 0x88), _mm512_shuffle_i32x4(u, v, 0xDD));
}

}  // namespace

ATTNKIT_TARGET_VNNI void VnniQDotK4(const int8_t* q, size_t ldq, const int32_t* q_sum128,
                                    const float* row_scale, const int8_t* k, size_t ldk, size_t d,
                                    size_t keys, float* s, size_t lds, const int8_t* pf_k,
                                    size_t ld_pf_k, const int8_t* pf_v, size_t ld_pf_v,
                                    size_t ahead) {
  const size_t full = d / 64 * 64, rest = d - full;  // rest: 0, 16, 32 or 48 bytes
  const __mmask64 rest_mask = rest == 0 ? 0 : (__mmask64{1} << rest) - 1;
  size_t j = 0;
  // Four keys at a time: 16 accumulators (key-major, 4 rows each), each Q
  // vector loaded once for the four keys, and one transposing tree that
  // leaves the 16 sums in key-major order, [key 0 rows 0-3, key 1 ...]: a
  // quarter of the per-key reductions' shuffles. Per key the tree below
  // costs about 12 operations where reducing each key alone took 17.
  {
    const __m512i sum128 =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q_sum128)));
    const __m512 scale = _mm512_broadcast_f32x4(_mm_loadu_ps(row_scale));
    for (; j + 4 <= keys; j += 4) {
      for (size_t x = j; x < j + 4 && x < ahead; ++x) {
        PrefetchRows(pf_k, ld_pf_k, pf_v, ld_pf_v, x, d);
      }
      __m512i a[4][4];
#pragma GCC unroll 4
      for (int key = 0; key < 4; ++key) {
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) a[key][r] = _mm512_setzero_si512();
      }
      size_t c = 0;
      for (; c < full; c += 64) StepFourKeys(q, ldq, k + j * ldk, ldk, c, ~__mmask64{0}, a);
      // Q rows are zero past d (ldq >= d rounded up to 64), so the bytes the
      // masked load leaves 0 (read as 128) add nothing.
      if (rest != 0) StepFourKeys(q, ldq, k + j * ldk, ldk, c, rest_mask, a);
      __m512i u[4];
#pragma GCC unroll 4
      for (int key = 0; key < 4; ++key) {
        u[key] = QuadSums(PairSums32(a[key][0], a[key][1]), PairSums32(a[key][2], a[key][3]));
      }
      const __m512i dots = BlockPairSums(BlockPairSums(u[0], u[1]), BlockPairSums(u[2], u[3]));
      // Exact integer dot products, then one f32 multiply by the row's scale.
      const __m512 out = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(dots, sum128)), scale);
      if (lds == 4) {  // the packed layout: the four keys' rows back to back
        _mm512_storeu_ps(s + j * 4, out);
      } else {
        _mm_storeu_ps(s + j * lds, _mm512_extractf32x4_ps(out, 0));
        _mm_storeu_ps(s + (j + 1) * lds, _mm512_extractf32x4_ps(out, 1));
        _mm_storeu_ps(s + (j + 2) * lds, _mm512_extractf32x4_ps(out, 2));
        _mm_storeu_ps(s + (j + 3) * lds, _mm512_extractf32x4_ps(out, 3));
      }
    }
  }
  const __m128i sum128 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q_sum128));
  const __m128 scale = _mm_loadu_ps(row_scale);
  for (; j < keys; ++j) {
    if (j < ahead) PrefetchRows(pf_k, ld_pf_k, pf_v, ld_pf_v, j, d);
    const int8_t* kj = k + j * ldk;
    __m512i a[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                    _mm512_setzero_si512()};
    size_t c = 0;
    for (; c < full; c += 64) Step(_mm512_loadu_si512(kj + c), q, ldq, c, a);
    if (rest != 0) Step(_mm512_maskz_loadu_epi8(rest_mask, kj + c), q, ldq, c, a);
    // Lane sums of a0..a3 -> four int32 (each 128-bit block, then the blocks).
    const __m512i u = QuadSums(PairSums32(a[0], a[1]), PairSums32(a[2], a[3]));
    const __m256i x = _mm256_add_epi32(_mm512_castsi512_si256(u), _mm512_extracti64x4_epi64(u, 1));
    const __m128i y = _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
    const __m128 dots = _mm_cvtepi32_ps(_mm_sub_epi32(y, sum128));
    _mm_storeu_ps(s + j * lds, _mm_mul_ps(dots, scale));
  }
}

bool HaveVnni() {
  static const bool have =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return have;
}

}  // namespace x86_dot
}  // namespace attnkit

#else  // not x86-64 with GCC or Clang: HaveVnni() is false, so never called

namespace attnkit {
namespace x86_dot {

bool HaveVnni() { return false; }
void VnniQDotK4(const int8_t*, size_t, const int32_t*, const float*, const int8_t*, size_t, size_t,
                size_t, float*, size_t, const int8_t*, size_t, const int8_t*, size_t, size_t) {}

}  // namespace x86_dot
}  // namespace attnkit

#endif
