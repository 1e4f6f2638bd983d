// int8 dot-product kernels (x86_dot.h) with AVX-VNNI: the VEX-encoded,
// 256-bit vpdpbusd of AVX2 CPUs without AVX-512 (four u8 x s8 products
// added to each int32 lane, exactly). The same arithmetic as
// x86_vnni_dot.cc on 32 bytes per step: Q.K reads K as K + 128 and
// subtracts 128 * sum_c Q[r, c]; P.V multiplies u8 weights by V's bytes
// as stored. AVX2 has no byte-masked load, so Q.K's 16-byte tail is a
// 128-bit load and P.V's last column block a dword-masked one. Compiled
// for AVX2 with AVX-VNNI (and FMA) by its target attribute; callers check
// HaveAvxVnni().
#include "backends/highway/x86_dot.h"
#include "platform/prefetch.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <cstring>
#include <limits>

#define ATTNKIT_TARGET_AVXVNNI __attribute__((target("avx2,avxvnni,fma")))

namespace attnkit {
namespace x86_dot {
namespace {

// a[r] += ku . Q[r] over 32 bytes at column c, r < 4; ku: K + 128 as u8.
ATTNKIT_TARGET_AVXVNNI inline void Step(__m256i ku, const int8_t* q, size_t ldq, size_t c,
                                        __m256i* a) {
  const __m256i* q0 = reinterpret_cast<const __m256i*>(q + c);
  const __m256i* q1 = reinterpret_cast<const __m256i*>(q + ldq + c);
  const __m256i* q2 = reinterpret_cast<const __m256i*>(q + 2 * ldq + c);
  const __m256i* q3 = reinterpret_cast<const __m256i*>(q + 3 * ldq + c);
  a[0] = _mm256_dpbusd_avx_epi32(a[0], ku, _mm256_loadu_si256(q0));
  a[1] = _mm256_dpbusd_avx_epi32(a[1], ku, _mm256_loadu_si256(q1));
  a[2] = _mm256_dpbusd_avx_epi32(a[2], ku, _mm256_loadu_si256(q2));
  a[3] = _mm256_dpbusd_avx_epi32(a[3], ku, _mm256_loadu_si256(q3));
}

// The same over 16 bytes (d's tail): 128-bit loads, zero-extended, so no
// byte of K or Q past column c + 16 is read.
ATTNKIT_TARGET_AVXVNNI inline void HalfStep(__m128i ku, const int8_t* q, size_t ldq, size_t c,
                                            __m256i* a) {
  const __m256i k256 = _mm256_zextsi128_si256(ku);
  const __m128i* q0 = reinterpret_cast<const __m128i*>(q + c);
  const __m128i* q1 = reinterpret_cast<const __m128i*>(q + ldq + c);
  const __m128i* q2 = reinterpret_cast<const __m128i*>(q + 2 * ldq + c);
  const __m128i* q3 = reinterpret_cast<const __m128i*>(q + 3 * ldq + c);
  a[0] = _mm256_dpbusd_avx_epi32(a[0], k256, _mm256_zextsi128_si256(_mm_loadu_si128(q0)));
  a[1] = _mm256_dpbusd_avx_epi32(a[1], k256, _mm256_zextsi128_si256(_mm_loadu_si128(q1)));
  a[2] = _mm256_dpbusd_avx_epi32(a[2], k256, _mm256_zextsi128_si256(_mm_loadu_si128(q2)));
  a[3] = _mm256_dpbusd_avx_epi32(a[3], k256, _mm256_zextsi128_si256(_mm_loadu_si128(q3)));
}

// acc += four u8 x s8 products per lane (the VEX vpdpbusd), by inline
// assembly as x86_vnni_dot.cc's DpBusd: through the intrinsic, GCC 12 kept
// the accumulators on the stack.
ATTNKIT_TARGET_AVXVNNI inline void DpBusd(__m256i& acc, __m256i u8, __m256i s8) {
  asm("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u8), "x"(s8));
}

// How QuadsHalf reads a row's 32 bytes at column c0 (AVX2 has no
// byte-masked load): all of them, the whole dwords below dv by a dword
// mask (masked lanes neither read nor fault; dv a multiple of 4, as it is
// where the backend calls it), or those below dv from a zeroed copy.
enum class Columns { kWhole, kDwords, kBytes };
template <Columns kHow>
ATTNKIT_TARGET_AVXVNNI inline __m256i LoadValues(const int8_t* row, size_t c0, size_t dv,
                                                 __m256i dword_mask) {
  if constexpr (kHow == Columns::kWhole) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c0));
  } else if constexpr (kHow == Columns::kDwords) {
    return _mm256_maskload_epi32(reinterpret_cast<const int*>(row + c0), dword_mask);
  } else {
    alignas(32) int8_t tail[32] = {};
    if (c0 < dv) std::memcpy(tail, row + c0, dv - c0 < 32 ? dv - c0 : 32);
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
  }
}

// Rows [from, to) of `rows` into L1 (kHalf 0: QuadsHalf's first pass) or
// into L2 (its second).
template <int kHalf>
inline void PrefetchPassRows(const L1Rows& rows, size_t from, size_t to) {
  if constexpr (kHalf == 0) {
    PrefetchL1Rows(rows, from, to);
  } else {
    PrefetchL2Rows(rows, from, to);
  }
}

// AvxVnniWeightedQuadsV4's columns c0 + 16 b + 8 kHalf .. + 7 (b = 0, 1)
// of the 32 at c0, for rows r < 4: per row two int32 accumulators, lane
// (128-bit block b, i) of accumulator x the sum over keys of column 16 b
// + 8 kHalf + 4 x + i, a quad of V rows interleaved bytewise (bytes 0-7
// of each block for kHalf 0, 8-15 for 1) so each int32 lane holds one
// column of the four keys, as the weights' bytes do. Exact: |sum| <= 512
// * 255 * 128 < 2^24. Then O = alpha O + back * sum below dvp. Prefetches
// rows [4 i, 4 i + 4) of `rows` with quad i (PrefetchPassRows), the rest
// after the last.
template <int kHalf, Columns kHow>
ATTNKIT_TARGET_AVXVNNI inline void QuadsHalf(const uint32_t* pq, size_t quads,
                                             const int8_t* const* v, size_t dv, size_t c0,
                                             __m256i dword_mask, const float* back,
                                             const float* alpha, float* o, size_t ldo, size_t dvp,
                                             const L1Rows& rows) {
  __m256i a00 = _mm256_setzero_si256(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00,
          a30 = a00, a31 = a00;
  for (size_t i = 0; i < quads; ++i) {
    PrefetchPassRows<kHalf>(rows, 4 * i, 4 * i + 4);
    const __m256i v0 = LoadValues<kHow>(v[4 * i], c0, dv, dword_mask);
    const __m256i v1 = LoadValues<kHow>(v[4 * i + 1], c0, dv, dword_mask);
    const __m256i v2 = LoadValues<kHow>(v[4 * i + 2], c0, dv, dword_mask);
    const __m256i v3 = LoadValues<kHow>(v[4 * i + 3], c0, dv, dword_mask);
    const __m256i v01 = kHalf == 0 ? _mm256_unpacklo_epi8(v0, v1) : _mm256_unpackhi_epi8(v0, v1);
    const __m256i v23 = kHalf == 0 ? _mm256_unpacklo_epi8(v2, v3) : _mm256_unpackhi_epi8(v2, v3);
    const __m256i x0 = _mm256_unpacklo_epi16(v01, v23), x1 = _mm256_unpackhi_epi16(v01, v23);
    const uint32_t* w = pq + 4 * i;
    const __m256i w0 = _mm256_set1_epi32(static_cast<int>(w[0]));
    DpBusd(a00, w0, x0);
    DpBusd(a01, w0, x1);
    const __m256i w1 = _mm256_set1_epi32(static_cast<int>(w[1]));
    DpBusd(a10, w1, x0);
    DpBusd(a11, w1, x1);
    const __m256i w2 = _mm256_set1_epi32(static_cast<int>(w[2]));
    DpBusd(a20, w2, x0);
    DpBusd(a21, w2, x1);
    const __m256i w3 = _mm256_set1_epi32(static_cast<int>(w[3]));
    DpBusd(a30, w3, x0);
    DpBusd(a31, w3, x1);
  }
  PrefetchPassRows<kHalf>(rows, 4 * quads, rows.count);
  const __m256i acc[4][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}};
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
    const __m256 al = _mm256_set1_ps(alpha == nullptr ? 1.0f : alpha[r]);
    const __m256 sc = _mm256_set1_ps(back[r]);
#pragma GCC unroll 2
    for (int b = 0; b < 2; ++b) {
      const size_t c = c0 + 16 * b + 8 * kHalf;
      if (c >= dvp) continue;
      // Block b of the two accumulators: columns c .. c + 7 in order.
      const __m256i cols = b == 0 ? _mm256_permute2x128_si256(acc[r][0], acc[r][1], 0x20)
                                  : _mm256_permute2x128_si256(acc[r][0], acc[r][1], 0x31);
      const __m256 sum = _mm256_mul_ps(_mm256_cvtepi32_ps(cols), sc);
      float* out = o + r * ldo + c;
      _mm256_storeu_ps(out, _mm256_fmadd_ps(_mm256_loadu_ps(out), al, sum));
    }
  }
}

}  // namespace

ATTNKIT_TARGET_AVXVNNI void AvxVnniQDotK4(const int8_t* q, size_t ldq, const int32_t* q_sum128,
                                          const float* row_scale, const int8_t* k, size_t ldk,
                                          size_t d, size_t keys, float* s, size_t lds,
                                          const int8_t* pf_k, size_t ld_pf_k, const int8_t* pf_v,
                                          size_t ld_pf_v, size_t ahead, const L1Rows& l1) {
  const size_t full = d / 32 * 32;  // then a tail of 0 or 16 bytes
  const __m256i sign = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m128i sum128 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q_sum128));
  const __m128 scale = _mm_loadu_ps(row_scale);
  for (size_t j = 0; j < keys; ++j) {
    if (j < ahead) PrefetchAheadKeyL2(pf_k, ld_pf_k, pf_v, ld_pf_v, j, d);
    PrefetchL1Rows(l1, j, j + 1);
    const int8_t* kj = k + j * ldk;
    __m256i a[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                    _mm256_setzero_si256()};
    size_t c = 0;
    for (; c < full; c += 32) {
      const __m256i kv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kj + c));
      Step(_mm256_xor_si256(kv, sign), q, ldq, c, a);
    }
    if (c < d) {
      const __m128i kv = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kj + c));
      HalfStep(_mm_xor_si128(kv, _mm256_castsi256_si128(sign)), q, ldq, c, a);
    }
    // Lane sums of a[0..3] -> four int32 (each 128-bit block, then both).
    const __m256i t01 =
        _mm256_add_epi32(_mm256_unpacklo_epi32(a[0], a[1]), _mm256_unpackhi_epi32(a[0], a[1]));
    const __m256i t23 =
        _mm256_add_epi32(_mm256_unpacklo_epi32(a[2], a[3]), _mm256_unpackhi_epi32(a[2], a[3]));
    const __m256i u =
        _mm256_add_epi32(_mm256_unpacklo_epi64(t01, t23), _mm256_unpackhi_epi64(t01, t23));
    const __m128i y = _mm_add_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1));
    // Exact integer dot products (|sum| < 2^24 for d <= 1024), then one f32
    // multiply by the row's scale.
    const __m128 dots = _mm_cvtepi32_ps(_mm_sub_epi32(y, sum128));
    _mm_storeu_ps(s + j * lds, _mm_mul_ps(dots, scale));
  }
  PrefetchL1Rows(l1, keys, l1.count);
}

ATTNKIT_TARGET_AVXVNNI bool AvxVnniWeightedQuadsV4(const float* p, size_t keys,
                                                   const int8_t* const* v, size_t dv, size_t dvp,
                                                   const float* alpha, float* o, size_t ldo,
                                                   const L1Rows& l1, const L1Rows& l2) {
  // Each row's largest weight: a vector holds two keys' four rows (lane
  // 4 k + r), so the two halves' maximum is the rows'. P holds zeros up to
  // keys rounded up to 4. The same tests as WeightedQuadsV4's.
  const size_t quads = (keys + 3) / 4;
  const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  const __m256 zero = _mm256_setzero_ps();
  __m256 mx = zero;
  int refused = 0;  // lanes that held a NaN, an Inf or a negative weight
  for (size_t i = 0; i < 2 * quads; ++i) {
    const __m256 w = _mm256_loadu_ps(p + 8 * i);
    refused |= _mm256_movemask_ps(
        _mm256_or_ps(_mm256_cmp_ps(w, inf, _CMP_NLT_UQ), _mm256_cmp_ps(w, zero, _CMP_LT_OQ)));
    mx = _mm256_max_ps(mx, w);
  }
  if (refused != 0) {
    PrefetchRowLists(l1, l2, 0, SIZE_MAX);
    return false;
  }
  alignas(16) float row_max[4];
  _mm_store_ps(row_max, _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1)));
  for (int r = 0; r < 4; ++r) {
    if (row_max[r] != 0 && row_max[r] < 1e-30f) {
      PrefetchRowLists(l1, l2, 0, SIZE_MAX);
      return false;
    }
  }
  // q = round(w * 255 / max) to nearest even, back scale max / 255: the
  // same values as WeightedQuadsV4's, so the same bits out.
  alignas(32) float inv[8];
  float back[4];
  for (int r = 0; r < 4; ++r) {
    back[r] = row_max[r] / 255.0f;
    inv[r] = inv[r + 4] = row_max[r] == 0 ? 0.0f : 1.0f / back[r];
  }
  const __m256 inv_v = _mm256_load_ps(inv);
  // pq[4 i + r]: row r's u8 weights of keys 4i .. 4i + 3, low byte first.
  // Two vectors of 32-bit q (keys 4i, 4i + 1 and 4i + 2, 4i + 3) pack to
  // bytes [4i, 4i + 2 | 4i + 1, 4i + 3] per 128-bit lane; the lanes'
  // dwords interleave to key order, and a byte shuffle transposes rows.
  const __m128i order = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  alignas(32) uint32_t pq[4 * (kMaxWeightedQuadsKeys / 4 + 1)];
  for (size_t i = 0; i < quads; ++i) {
    const __m256i qa = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(p + 16 * i), inv_v));
    const __m256i qb = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(p + 16 * i + 8), inv_v));
    const __m256i b8 = _mm256_packus_epi16(_mm256_packus_epi32(qa, qb), _mm256_setzero_si256());
    const __m128i keys4 =
        _mm_unpacklo_epi32(_mm256_castsi256_si128(b8), _mm256_extracti128_si256(b8, 1));
    _mm_store_si128(reinterpret_cast<__m128i*>(pq + 4 * i), _mm_shuffle_epi8(keys4, order));
  }
  // Column blocks of 32, each in two passes of 16 of its columns
  // (QuadsHalf): AVX2's 16 registers hold 8 accumulators, not
  // WeightedQuadsV4's 16. Zen 5 with AVX-VNNI, the AVX2 target, rows in
  // L1: 3.28 ns a key (decode_kernels_bench); B8 H32/8 Tk4096 d128 int8
  // FAST decode, three alternating rounds against the f32 P.V: one thread
  // 4.77-5.03 -> 3.48-3.89 ms, two 2.63-2.79 -> 1.87-2.08. (With the
  // accumulators in an array the intrinsic kept on the stack, it was
  // slower than the f32 P.V: 5.9 ms at one thread.)
  for (size_t c0 = 0; c0 < dvp; c0 += 32) {
    // The first block's rows to prefetch, a quad per quad: l1's over its
    // first pass (QuadsHalf<0>, into L1), l2's over its second (into L2).
    const L1Rows l1_here = c0 == 0 ? l1 : L1Rows{};
    const L1Rows l2_here = c0 == 0 ? l2 : L1Rows{};
    if (c0 + 32 <= dv) {
      const __m256i none = _mm256_setzero_si256();
      QuadsHalf<0, Columns::kWhole>(pq, quads, v, dv, c0, none, back, alpha, o, ldo, dvp, l1_here);
      QuadsHalf<1, Columns::kWhole>(pq, quads, v, dv, c0, none, back, alpha, o, ldo, dvp, l2_here);
    } else if (dv % 4 == 0) {
      // Dword lane i kept where its 4 bytes lie below dv: i < (dv - c0) / 4.
      const int kept = c0 < dv ? static_cast<int>((dv - c0) / 4) : 0;
      const __m256i mask =
          _mm256_cmpgt_epi32(_mm256_set1_epi32(kept), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      QuadsHalf<0, Columns::kDwords>(pq, quads, v, dv, c0, mask, back, alpha, o, ldo, dvp, l1_here);
      QuadsHalf<1, Columns::kDwords>(pq, quads, v, dv, c0, mask, back, alpha, o, ldo, dvp, l2_here);
    } else {
      const __m256i none = _mm256_setzero_si256();
      QuadsHalf<0, Columns::kBytes>(pq, quads, v, dv, c0, none, back, alpha, o, ldo, dvp, l1_here);
      QuadsHalf<1, Columns::kBytes>(pq, quads, v, dv, c0, none, back, alpha, o, ldo, dvp, l2_here);
    }
  }
  return true;
}

bool HaveAvxVnni() {
  // avx2 implies the OS saves YMM state (libgcc checks XCR0 before setting it).
  static const bool have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                           __builtin_cpu_supports("avxvnni");
  return have;
}

}  // namespace x86_dot
}  // namespace attnkit

#else  // not x86-64 with GCC or Clang: HaveAvxVnni() is false, so never called

namespace attnkit {
namespace x86_dot {

bool HaveAvxVnni() { return false; }
void AvxVnniQDotK4(const int8_t*, size_t, const int32_t*, const float*, const int8_t*, size_t,
                   size_t, size_t, float*, size_t, const int8_t*, size_t, const int8_t*, size_t,
                   size_t, const L1Rows&) {}
bool AvxVnniWeightedQuadsV4(const float*, size_t, const int8_t* const*, size_t, size_t,
                            const float*, float*, size_t, const L1Rows&, const L1Rows&) {
  return false;
}

}  // namespace x86_dot
}  // namespace attnkit

#endif
