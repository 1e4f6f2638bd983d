// int8 dot-product kernel (x86_dot.h) with AVX-VNNI: the VEX-encoded,
// 256-bit vpdpbusd of AVX2 CPUs without AVX-512 (four u8 x s8 products
// added to each int32 lane, exactly). The same arithmetic as
// x86_vnni_dot.cc (K read as K + 128, 128 * sum_c Q[r, c] subtracted) on
// 32 bytes per step; AVX2 has no byte-masked load, so a 16-byte tail is a
// 128-bit load. Compiled for AVX2 with AVX-VNNI by its target attribute;
// callers check HaveAvxVnni().
#include "backends/highway/x86_dot.h"
#include "platform/prefetch.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define ATTNKIT_TARGET_AVXVNNI __attribute__((target("avx2,avxvnni")))

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

bool HaveAvxVnni() {
  // avx2 implies the OS saves YMM state (libgcc checks XCR0 before setting it).
  static const bool have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avxvnni");
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

}  // namespace x86_dot
}  // namespace attnkit

#endif
