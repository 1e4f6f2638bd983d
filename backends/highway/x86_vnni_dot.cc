// int8 dot-product kernel (x86_dot.h) with AVX512_VNNI: vpdpbusd adds four
// u8 x s8 products to each int32 lane, exactly (no saturation). K is signed,
// so each K byte is read as the unsigned K + 128 (an XOR of its sign bit),
// and 128 * sum_c Q[r, c] is subtracted once per row. Compiled for AVX-512
// with VNNI by its target attribute; callers check HaveVnni().
#include "backends/highway/x86_dot.h"
#include "platform/prefetch.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <algorithm>
#include <limits>

// GCC 12's AVX-512 headers start some intrinsics from an undefined vector,
// which -Wmaybe-uninitialized reports at every use (-Wuninitialized where
// the use is inlined into a template, as in FourKeyBlocks).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define ATTNKIT_TARGET_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

namespace attnkit {
namespace x86_dot {
namespace {

// acc += four u8 x s8 products per lane (vpdpbusd), by inline assembly:
// GCC 12 copies the accumulator of _mm512_dpbusd_epi32 to a new register
// at every use, and spilled the 16 accumulators of WeightedQuadsV4 to the
// stack. (VnniQDotK4's vpdpbusd by inline assembly measured slower.)
ATTNKIT_TARGET_VNNI inline void DpBusd(__m512i& acc, __m512i u8, __m512i s8) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
}

// a[r] += (K + 128) . Q[r] over 64 bytes at column c, r < 4.
ATTNKIT_TARGET_VNNI inline void Step(__m512i kv, const int8_t* q, size_t ldq, size_t c,
                                     __m512i* a) {
  const __m512i ku = _mm512_xor_si512(kv, _mm512_set1_epi8(static_cast<char>(0x80)));
  a[0] = _mm512_dpbusd_epi32(a[0], ku, _mm512_loadu_si512(q + c));
  a[1] = _mm512_dpbusd_epi32(a[1], ku, _mm512_loadu_si512(q + ldq + c));
  a[2] = _mm512_dpbusd_epi32(a[2], ku, _mm512_loadu_si512(q + 2 * ldq + c));
  a[3] = _mm512_dpbusd_epi32(a[3], ku, _mm512_loadu_si512(q + 3 * ldq + c));
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

// Q rows as FourKeyBlocks multiplies them: each 32-byte half h of each
// 64-byte step st of row r repeated across a vector, at qd + 64 * (8 st +
// 2 r + h), for the steps of d rounded up to 64 (Q rows are zero past d).
constexpr size_t kMaxQDotSteps = (kMaxVnniQDotD + 63) / 64;
ATTNKIT_TARGET_VNNI inline void DoubleQueryHalves(const int8_t* q, size_t ldq, size_t steps,
                                                  int8_t* qd) {
  for (size_t st = 0; st < steps; ++st) {
    for (size_t r = 0; r < 4; ++r) {
      for (size_t h = 0; h < 2; ++h) {
        const __m256i x =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + r * ldq + 64 * st + 32 * h));
        _mm512_store_si512(qd + 64 * (8 * st + 2 * r + h), _mm512_broadcast_i64x4(x));
      }
    }
  }
}

// a[x][r] += (K + 128) . Q[r] over the 64 bytes at column c (those `mask`
// keeps, kMasked; the rest read as 0) of keys 2x and 2x + 1 (rows k + key *
// ldk), x < 2, r < 4. Each vector pairs the two keys, a 32-byte half of
// each (blocks 0-1 key 2x, blocks 2-3 key 2x + 1), against the doubled Q
// halves qd (DoubleQueryHalves' step), so the sums of a key lie in half a
// vector and the tree below starts a level down: against four keys' rows
// each a vector, a shuffle more per vector loaded and half the tree (one
// thread, d 128, 64 keys in L1, Xeon with AMX: 3.8-4.0 -> 2.9-3.1 ns a key).
template <bool kMasked>
ATTNKIT_TARGET_VNNI inline void PairStep(const int8_t* k, size_t ldk, size_t c, __mmask64 mask,
                                         const __m512i* qd, __m512i (*a)[4]) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 2
  for (int x = 0; x < 2; ++x) {
    const int8_t* k0 = k + 2 * x * ldk + c;
    const int8_t* k1 = k0 + ldk;
    const __m512i v0 = kMasked ? _mm512_maskz_loadu_epi8(mask, k0) : _mm512_loadu_si512(k0);
    const __m512i v1 = kMasked ? _mm512_maskz_loadu_epi8(mask, k1) : _mm512_loadu_si512(k1);
    const __m512i lo = _mm512_xor_si512(_mm512_shuffle_i64x2(v0, v1, 0x44), flip);
    const __m512i hi = _mm512_xor_si512(_mm512_shuffle_i64x2(v0, v1, 0xEE), flip);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      a[x][r] = _mm512_dpbusd_epi32(a[x][r], lo, qd[2 * r]);
      a[x][r] = _mm512_dpbusd_epi32(a[x][r], hi, qd[2 * r + 1]);
    }
  }
}

// a[x][r] += the products of four keys (rows k + key * ldk) with rows r <
// 4 over the whole 64-byte steps [0, full): written out step by step
// where their count kSteps is known here (VnniQDotK4 passes 1-4 for d
// 64-256, 1-2 before a tail), a loop otherwise (kSteps 0). Written out,
// GCC 12 keeps the accumulators in registers; through a loop it copied
// each to a new register at every step and spilled some to the stack
// (Zen 5, one thread, d 128, 64 keys in L1: 4.3 -> 4.05 ns a key, with a
// vector per key and row).
template <size_t kSteps>
ATTNKIT_TARGET_VNNI inline void FullPairSteps(const int8_t* k, size_t ldk, size_t full,
                                              const __m512i* qd, __m512i (*a)[4]) {
  if constexpr (kSteps == 0) {
    for (size_t c = 0; c < full; c += 64) PairStep<false>(k, ldk, c, 0, qd + c / 8, a);
  } else {
    PairStep<false>(k, ldk, 0, 0, qd, a);
    if constexpr (kSteps > 1) PairStep<false>(k, ldk, 64, 0, qd + 8, a);
    if constexpr (kSteps > 2) PairStep<false>(k, ldk, 128, 0, qd + 16, a);
    if constexpr (kSteps > 3) PairStep<false>(k, ldk, 192, 0, qd + 24, a);
  }
}

// VnniQDotK4's keys [0, keys rounded down to 4), four at a time: 8
// accumulators (PairStep's: two keys and a row each), Q's doubled halves
// read from qd, and one transposing tree that leaves the 16 sums in
// key-major order, [key 0 rows 0-3, key 1 ...]. kSteps: FullPairSteps;
// kTail: d holds a last part step (d % 64 != 0; its own instantiation, so
// that the registers it takes do not push d 128's Q vectors to the stack).
// Returns the keys done.
template <size_t kSteps, bool kTail>
ATTNKIT_TARGET_VNNI size_t FourKeyBlocks(const int8_t* qd, const int32_t* q_sum128,
                                         const float* row_scale, const int8_t* k, size_t ldk,
                                         size_t d, size_t keys, float* s, size_t lds,
                                         const int8_t* pf_k, size_t ld_pf_k, const int8_t* pf_v,
                                         size_t ld_pf_v, size_t ahead, const L1Rows& l1) {
  const size_t full = d / 64 * 64, rest = d - full;  // rest: 0, 16, 32 or 48 bytes
  const __mmask64 rest_mask = rest == 0 ? 0 : (__mmask64{1} << rest) - 1;
  const __m512i sum128 =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q_sum128)));
  const __m512 scale = _mm512_broadcast_f32x4(_mm_loadu_ps(row_scale));
  // The whole steps' Q vectors as locals where their count is known: GCC
  // then keeps them in registers (d 64 and 128); read from qd by each
  // vpdpbusd, they took Q.K from 2.9 to 3.6 ns a key (as in PairStep).
  // (3 and 4 steps' 24 and 32 vectors would not fit beside the
  // accumulators: they are read from qd.)
  constexpr bool kQInRegisters = kSteps == 1 || kSteps == 2;
  const __m512i* qv = reinterpret_cast<const __m512i*>(qd);
  __m512i qreg[8 * (kQInRegisters ? kSteps : 1)];
  if constexpr (kQInRegisters) {
#pragma GCC unroll 16
    for (size_t i = 0; i < 8 * kSteps; ++i) qreg[i] = qv[i];
  }
  const __m512i* qfull = kQInRegisters ? qreg : qv;
  // Where the prefetches end, worked out once, so that a block of keys past
  // them costs one compare each: clamping per block (PrefetchL1Rows, the
  // ahead loop's two bounds) was 3 % slower here (one thread, d 128, 64
  // keys in L1: 3.43-3.53 against 3.32-3.42 ns a key, no rows to
  // prefetch; 3.96-4.06 against 3.76-3.90 with the tile's V rows).
  const size_t ahead_end = std::min(ahead, keys), l1_end = std::min(l1.count, keys);
  size_t j = 0;
  for (; j + 4 <= keys; j += 4) {
    if (j < ahead_end) {
      for (size_t x = j; x < j + 4 && x < ahead_end; ++x) {
        PrefetchAheadKeyL2(pf_k, ld_pf_k, pf_v, ld_pf_v, x, d);
      }
    }
    if (j < l1_end) PrefetchRowsL1(l1.rows, l1.ld, l1.bytes, j, std::min(j + 4, l1_end));
    __m512i a[2][4];
#pragma GCC unroll 2
    for (int x = 0; x < 2; ++x) {
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) a[x][r] = _mm512_setzero_si512();
    }
    FullPairSteps<kSteps>(k + j * ldk, ldk, full, qfull, a);
    // Q rows are zero past d (ldq >= d rounded up to 64), so the bytes the
    // masked load leaves 0 (read as 128) add nothing.
    if (kTail) PairStep<true>(k + j * ldk, ldk, full, rest_mask, qv + full / 8, a);
    // Per block [rows 0-3]: blocks 0-1 of u[x] key 2x's halves, 2-3 key 2x + 1's.
    const __m512i u0 = QuadSums(PairSums32(a[0][0], a[0][1]), PairSums32(a[0][2], a[0][3]));
    const __m512i u1 = QuadSums(PairSums32(a[1][0], a[1][1]), PairSums32(a[1][2], a[1][3]));
    const __m512i dots = BlockPairSums(u0, u1);
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
  return j;
}

}  // namespace

ATTNKIT_TARGET_VNNI void VnniQDotK4(const int8_t* q, size_t ldq, const int32_t* q_sum128,
                                    const float* row_scale, const int8_t* k, size_t ldk, size_t d,
                                    size_t keys, float* s, size_t lds, const int8_t* pf_k,
                                    size_t ld_pf_k, const int8_t* pf_v, size_t ld_pf_v,
                                    size_t ahead, const L1Rows& l1) {
  const size_t full = d / 64 * 64, rest = d - full;
  const __mmask64 rest_mask = rest == 0 ? 0 : (__mmask64{1} << rest) - 1;
  const auto blocks = rest != 0     ? (full == 64    ? &FourKeyBlocks<1, true>
                                       : full == 128 ? &FourKeyBlocks<2, true>
                                                     : &FourKeyBlocks<0, true>)
                      : full == 64  ? &FourKeyBlocks<1, false>
                      : full == 128 ? &FourKeyBlocks<2, false>
                      : full == 192 ? &FourKeyBlocks<3, false>
                      : full == 256 ? &FourKeyBlocks<4, false>
                                    : &FourKeyBlocks<0, false>;
  size_t j = 0;
  if (keys >= 4) {
    alignas(64) int8_t qd[64 * 8 * kMaxQDotSteps];
    DoubleQueryHalves(q, ldq, (d + 63) / 64, qd);
    j = blocks(qd, q_sum128, row_scale, k, ldk, d, keys, s, lds, pf_k, ld_pf_k, pf_v, ld_pf_v,
               ahead, l1);
  }
  const __m128i sum128 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q_sum128));
  const __m128 scale = _mm_loadu_ps(row_scale);
  for (; j < keys; ++j) {
    if (j < ahead) PrefetchAheadKeyL2(pf_k, ld_pf_k, pf_v, ld_pf_v, j, d);
    PrefetchL1Rows(l1, j, j + 1);
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
  PrefetchL1Rows(l1, keys, l1.count);
}

namespace {

// out[m] = [x[0] block m, x[1] block m, x[2] block m, x[3] block m] for the
// 128-bit blocks m < 4: a 4 x 4 transpose of blocks.
ATTNKIT_TARGET_VNNI inline void TransposeBlocks(const __m512i* x, __m512i* out) {
  const __m512i a = _mm512_shuffle_i32x4(x[0], x[1], 0x44);  // x0 b0 b1, x1 b0 b1
  const __m512i b = _mm512_shuffle_i32x4(x[0], x[1], 0xEE);  // x0 b2 b3, x1 b2 b3
  const __m512i c = _mm512_shuffle_i32x4(x[2], x[3], 0x44);
  const __m512i d = _mm512_shuffle_i32x4(x[2], x[3], 0xEE);
  out[0] = _mm512_shuffle_i32x4(a, c, 0x88);
  out[1] = _mm512_shuffle_i32x4(a, c, 0xDD);
  out[2] = _mm512_shuffle_i32x4(b, d, 0x88);
  out[3] = _mm512_shuffle_i32x4(b, d, 0xDD);
}

// WeightedQuadsV4's column block [c0, c0 + 64) of O: per row four int32
// accumulators, lane (block b, i) of accumulator x the sum over keys of
// column c0 + 16 b + 4 x + i. A quad of keys' V rows is interleaved
// bytewise (two unpack levels) so each int32 lane holds one column of the
// four keys, as the weights' bytes pq do (4 uint32 a quad, one per row).
// Exact: |sum| <= keys * 255 * 128 < 2^24 for keys <= 512, so the sum's
// conversion to f32 is exact too. Then O = alpha O + back * sum for the
// columns below dvp. V's bytes past `mask` read as 0 (kMasked; a whole
// block reads its rows unmasked: masked loads took about a tenth more of
// the block's time). kPrefetches: prefetches rows [4 i, 4 i + 4) of l1
// (into L1) and of l2 (into L2) with quad i, and their rows past the last
// quad after them; else neither (no test per quad in the blocks that
// have no rows to ask for).
template <bool kMasked, bool kPrefetches>
ATTNKIT_TARGET_VNNI inline void QuadColumnBlock(const uint32_t* pq, size_t quads,
                                                const int8_t* const* v, size_t c0, __mmask64 mask,
                                                const L1Rows& l1, const L1Rows& l2,
                                                const float* alpha, const float* back, size_t dvp,
                                                float* o, size_t ldo) {
  __m512i a00 = _mm512_setzero_si512(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00,
          a12 = a00, a13 = a00, a20 = a00, a21 = a00, a22 = a00, a23 = a00, a30 = a00, a31 = a00,
          a32 = a00, a33 = a00;
  const uint32_t* w = pq;
  for (size_t i = 0; i < quads; ++i, w += 4) {
    if (kPrefetches) PrefetchRowLists(l1, l2, 4 * i, 4 * i + 4);
    const int8_t* r0 = v[4 * i] + c0;
    const int8_t* r1 = v[4 * i + 1] + c0;
    const int8_t* r2 = v[4 * i + 2] + c0;
    const int8_t* r3 = v[4 * i + 3] + c0;
    const __m512i v0 = kMasked ? _mm512_maskz_loadu_epi8(mask, r0) : _mm512_loadu_si512(r0);
    const __m512i v1 = kMasked ? _mm512_maskz_loadu_epi8(mask, r1) : _mm512_loadu_si512(r1);
    const __m512i v2 = kMasked ? _mm512_maskz_loadu_epi8(mask, r2) : _mm512_loadu_si512(r2);
    const __m512i v3 = kMasked ? _mm512_maskz_loadu_epi8(mask, r3) : _mm512_loadu_si512(r3);
    const __m512i lo01 = _mm512_unpacklo_epi8(v0, v1), hi01 = _mm512_unpackhi_epi8(v0, v1);
    const __m512i lo23 = _mm512_unpacklo_epi8(v2, v3), hi23 = _mm512_unpackhi_epi8(v2, v3);
    const __m512i x0 = _mm512_unpacklo_epi16(lo01, lo23), x1 = _mm512_unpackhi_epi16(lo01, lo23);
    const __m512i x2 = _mm512_unpacklo_epi16(hi01, hi23), x3 = _mm512_unpackhi_epi16(hi01, hi23);
    const __m512i w0 = _mm512_set1_epi32(static_cast<int>(w[0]));
    const __m512i w1 = _mm512_set1_epi32(static_cast<int>(w[1]));
    const __m512i w2 = _mm512_set1_epi32(static_cast<int>(w[2]));
    const __m512i w3 = _mm512_set1_epi32(static_cast<int>(w[3]));
    DpBusd(a00, w0, x0);
    DpBusd(a01, w0, x1);
    DpBusd(a02, w0, x2);
    DpBusd(a03, w0, x3);
    DpBusd(a10, w1, x0);
    DpBusd(a11, w1, x1);
    DpBusd(a12, w1, x2);
    DpBusd(a13, w1, x3);
    DpBusd(a20, w2, x0);
    DpBusd(a21, w2, x1);
    DpBusd(a22, w2, x2);
    DpBusd(a23, w2, x3);
    DpBusd(a30, w3, x0);
    DpBusd(a31, w3, x1);
    DpBusd(a32, w3, x2);
    DpBusd(a33, w3, x3);
  }
  if (kPrefetches) PrefetchRowLists(l1, l2, 4 * quads, SIZE_MAX);
  // O = alpha O + back * sum, 16 columns at a time below dvp: columns
  // 16 m .. 16 m + 15 are block m of the four accumulators.
  const __m512i acc[4][4] = {
      {a00, a01, a02, a03}, {a10, a11, a12, a13}, {a20, a21, a22, a23}, {a30, a31, a32, a33}};
  for (int r = 0; r < 4; ++r) {
    const __m512 a = _mm512_set1_ps(alpha == nullptr ? 1.0f : alpha[r]);
    const __m512 s = _mm512_set1_ps(back[r]);
    float* orow = o + r * ldo;
    __m512i cols[4];
    TransposeBlocks(acc[r], cols);
    for (int m = 0; m < 4; ++m) {
      const size_t c = c0 + 16 * m;
      if (c >= dvp) break;
      const __m512 sum = _mm512_mul_ps(_mm512_cvtepi32_ps(cols[m]), s);
      _mm512_storeu_ps(orow + c, _mm512_fmadd_ps(_mm512_loadu_ps(orow + c), a, sum));
    }
  }
}

// QuadColumnBlock for the block at c0: whole (no byte of it past dv) or
// masked.
template <bool kPrefetches>
ATTNKIT_TARGET_VNNI inline void ColumnBlock(const uint32_t* pq, size_t quads,
                                            const int8_t* const* v, size_t dv, size_t c0,
                                            const L1Rows& l1, const L1Rows& l2, const float* alpha,
                                            const float* back, size_t dvp, float* o, size_t ldo) {
  if (c0 + 64 <= dv) {
    QuadColumnBlock<false, kPrefetches>(pq, quads, v, c0, ~__mmask64{0}, l1, l2, alpha, back, dvp,
                                        o, ldo);
  } else {
    QuadColumnBlock<true, kPrefetches>(pq, quads, v, c0, RowBytesMask(c0, dv), l1, l2, alpha, back,
                                       dvp, o, ldo);
  }
}

}  // namespace

ATTNKIT_TARGET_VNNI bool WeightedQuadsV4(const float* p, size_t keys, const int8_t* const* v,
                                         size_t dv, size_t dvp, const float* alpha, float* o,
                                         size_t ldo, const L1Rows& l1, const L1Rows& l2) {
  // Each row's largest weight: the 128-bit blocks of a vector are keys,
  // their lanes rows. P holds zeros up to keys rounded up to 4.
  const size_t quads = (keys + 3) / 4;
  const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  const __m512 zero = _mm512_setzero_ps();
  __m512 mx = zero;
  __mmask16 refused = 0;  // lanes that held a NaN, an Inf or a negative weight
  for (size_t i = 0; i < quads; ++i) {
    const __m512 w = _mm512_loadu_ps(p + 16 * i);
    refused |= _mm512_cmp_ps_mask(w, inf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(w, zero, _CMP_LT_OQ);
    mx = _mm512_max_ps(mx, w);
  }
  if (refused != 0) {
    PrefetchRowLists(l1, l2, 0, SIZE_MAX);
    return false;
  }
  mx = _mm512_max_ps(mx, _mm512_shuffle_f32x4(mx, mx, 0x4E));  // blocks (2, 3, 0, 1)
  mx = _mm512_max_ps(mx, _mm512_shuffle_f32x4(mx, mx, 0xB1));  // blocks (1, 0, 3, 2)
  // Every block: [max_0, max_1, max_2, max_3]. Weights below 1e-30 (well
  // before 255 / max overflows) send the tile, as a NaN or Inf does, to the
  // caller's f32 kernel.
  alignas(64) float row_max[16];
  _mm512_storeu_ps(row_max, mx);
  for (int r = 0; r < 4; ++r) {
    if (row_max[r] != 0 && row_max[r] < 1e-30f) {
      PrefetchRowLists(l1, l2, 0, SIZE_MAX);
      return false;
    }
  }
  // q = round(w * 255 / max) to nearest even (0 <= q <= 255), and back
  // scale max / 255: a row of zeros quantizes to zeros.
  alignas(64) float inv[16], back[4];
  for (int r = 0; r < 4; ++r) {
    back[r] = row_max[r] / 255.0f;
    inv[r] = row_max[r] == 0 ? 0.0f : 1.0f / back[r];
  }
  for (int r = 4; r < 16; ++r) inv[r] = inv[r % 4];
  const __m512 inv_v = _mm512_loadu_ps(inv);
  // pq[4 i + r]: row r's u8 weights of keys 4i .. 4i + 3, low byte first,
  // as vpdpbusd multiplies them with V's interleaved rows. A vector's 16
  // bytes [key 4i rows 0-3, key 4i + 1 rows 0-3, ...] are transposed.
  const __m128i order = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  alignas(64) uint32_t pq[4 * (kMaxWeightedQuadsKeys / 4 + 1)];
  for (size_t i = 0; i < quads; ++i) {
    const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(p + 16 * i), inv_v));
    _mm_store_si128(reinterpret_cast<__m128i*>(pq + 4 * i),
                    _mm_shuffle_epi8(_mm512_cvtusepi32_epi8(q), order));
  }
  // Column blocks of 64 (QuadColumnBlock); l1's and l2's rows spread
  // over the first, a quad per quad.
  const bool prefetches = l1.count > 0 || l2.count > 0;
  for (size_t c0 = 0; c0 < dvp; c0 += 64) {
    if (c0 == 0 && prefetches) {
      ColumnBlock<true>(pq, quads, v, dv, c0, l1, l2, alpha, back, dvp, o, ldo);
    } else {
      ColumnBlock<false>(pq, quads, v, dv, c0, l1, l2, alpha, back, dvp, o, ldo);
    }
  }
  return true;
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
                size_t, float*, size_t, const int8_t*, size_t, const int8_t*, size_t, size_t,
                const L1Rows&) {}
bool WeightedQuadsV4(const float*, size_t, const int8_t* const*, size_t, size_t, const float*,
                     float*, size_t, const L1Rows&, const L1Rows&) {
  return false;
}

}  // namespace x86_dot
}  // namespace attnkit

#endif
