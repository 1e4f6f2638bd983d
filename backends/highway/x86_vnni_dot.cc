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

}  // namespace

ATTNKIT_TARGET_VNNI void VnniQDotK4(const int8_t* q, size_t ldq, const int32_t* q_sum128,
                                    const float* row_scale, const int8_t* k, size_t ldk, size_t d,
                                    size_t keys, float* s, size_t lds, const int8_t* pf_k,
                                    size_t ld_pf_k, const int8_t* pf_v, size_t ld_pf_v,
                                    size_t ahead) {
  const size_t full = d / 64 * 64, rest = d - full;  // rest: 0, 16, 32 or 48 bytes
  const __mmask64 rest_mask = rest == 0 ? 0 : (__mmask64{1} << rest) - 1;
  const __m128i sum128 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q_sum128));
  const __m128 scale = _mm_loadu_ps(row_scale);
  for (size_t j = 0; j < keys; ++j) {
    if (j < ahead) {  // the rows `ahead` keys on: a K and a V row per key
      for (size_t off = 0; off < d; off += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(pf_k + j * ld_pf_k + off), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(pf_v + j * ld_pf_v + off), _MM_HINT_T1);
      }
    }
    const int8_t* kj = k + j * ldk;
    __m512i a[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                    _mm512_setzero_si512()};
    size_t c = 0;
    for (; c < full; c += 64) Step(_mm512_loadu_si512(kj + c), q, ldq, c, a);
    // Q rows are zero past d (ldq >= d rounded up to 64), so the bytes the
    // masked load leaves 0 (read as 128) add nothing.
    if (rest != 0) Step(_mm512_maskz_loadu_epi8(rest_mask, kj + c), q, ldq, c, a);
    const __m512i a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];
    // Lane sums of a0..a3 -> four int32 (each 128-bit block, then the blocks).
    const __m512i t01 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(a0, a1), _mm512_unpackhi_epi32(a0, a1));
    const __m512i t23 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(a2, a3), _mm512_unpackhi_epi32(a2, a3));
    const __m512i u =
        _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
    const __m256i x = _mm256_add_epi32(_mm512_castsi512_si256(u), _mm512_extracti64x4_epi64(u, 1));
    const __m128i y = _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
    // Exact integer dot products (|sum| < 2^24 for d <= 1024), then one f32
    // multiply by the row's scale.
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
