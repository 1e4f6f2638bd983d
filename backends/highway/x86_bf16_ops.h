// Small AVX-512 helpers the x86 dot-product kernels share
// (x86_bf16_dot.cc, x86_bf16_decode.cc, x86_fp8_dot.cc, x86_fp8_fma.cc,
// x86_amx_dot.cc): vdpbf16ps on integer-typed vectors, compiled for AVX-512
// with BF16 by its target attribute, and the f32 levels of a transposing
// reduction tree (16 vectors, four keys' four rows, to their 16 sums in
// the packed order), compiled for AVX-512 alone (so that the fp8 FMA
// kernels, which need no BF16, inline them too). Each is inlined into
// kernels compiled for at least its target. Include only from those
// translation units (x86-64 with GCC or Clang).
#ifndef ATTNKIT_BACKENDS_HIGHWAY_X86_BF16_OPS_H_
#define ATTNKIT_BACKENDS_HIGHWAY_X86_BF16_OPS_H_

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#define ATTNKIT_TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define ATTNKIT_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

namespace attnkit {
namespace x86_dot {
namespace bf16_ops {

// acc + the products of the bf16 pairs of a and b, lane by lane.
ATTNKIT_TARGET_BF16 inline __m512 Dot(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

// Pairs of vectors (x, y) -> per 128-bit block [x0+x2, y0+y2, x1+x3,
// y1+y3] (lane indices within the block).
ATTNKIT_TARGET_AVX512 inline __m512 PairSums(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_unpacklo_ps(x, y), _mm512_unpackhi_ps(x, y));
}
// Two PairSums results -> per 128-bit block the four block sums of x, y, z, w.
ATTNKIT_TARGET_AVX512 inline __m512 QuadSums(__m512 xy, __m512 zw) {
  const __m512d a = _mm512_castps_pd(xy), b = _mm512_castps_pd(zw);
  return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                       _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
}
// Blocks (0, 1) and (2, 3) of u and of v added: [u0+u1, u2+u3, v0+v1, v2+v3].
ATTNKIT_TARGET_AVX512 inline __m512 BlockPairSums(__m512 u, __m512 v) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(u, v, 0x88), _mm512_shuffle_f32x4(u, v, 0xDD));
}
// The lane sums of four keys' accumulators a[key][r] (r < 4), in the
// packed order [key 0 rows 0-3, key 1 ...]: the whole transposing tree,
// about 11 operations a key (the decode Q.K kernels' four-key step).
ATTNKIT_TARGET_AVX512 inline __m512 FourKeySums(__m512 (*a)[4]) {
  __m512 u[4];
#pragma GCC unroll 4
  for (int key = 0; key < 4; ++key) {
    u[key] = QuadSums(PairSums(a[key][0], a[key][1]), PairSums(a[key][2], a[key][3]));
  }
  return BlockPairSums(BlockPairSums(u[0], u[1]), BlockPairSums(u[2], u[3]));
}

// The key pairs rows [r0, r0 + n) of a prefill P.V need: up to the one
// holding their last visible key (key_end; null: all), at most key_pairs.
inline size_t PairsOfRows(const float* key_end, size_t r0, size_t n, size_t key_pairs) {
  if (key_end == nullptr) return key_pairs;
  float end = 0.0f;
  for (size_t r = r0; r < r0 + n; ++r) end = key_end[r] > end ? key_end[r] : end;
  const size_t pairs = (static_cast<size_t>(end) + 1) / 2;
  return pairs < key_pairs ? pairs : key_pairs;
}

// One pair of keys of a decode P.V over 64 columns for a group of 4 rows:
// acc[r][cv] += the products of w[cv] (the two keys' values, column by
// column) with row r's weight pair pw[r], broadcast, for r < 4, cv < 4.
ATTNKIT_TARGET_BF16 inline void AddWeightedPair4x4(const uint32_t* pw, const __m512i* w,
                                                   __m512 (*acc)[4]) {
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
    const __m512i pr = _mm512_set1_epi32(static_cast<int>(pw[r]));
#pragma GCC unroll 4
    for (int cv = 0; cv < 4; ++cv) acc[r][cv] = Dot(acc[r][cv], w[cv], pr);
  }
}

}  // namespace bf16_ops
}  // namespace x86_dot
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_HIGHWAY_X86_BF16_OPS_H_
