// fp8 decode Q.K on f32 FMAs (x86_dot.h), for AVX-512 CPUs whose bf16
// products do not outrun their FMAs (Intel's: PreferBF16Dot() false),
// under EXACT and FAST: the tiles that widen codes to f32 without their
// special codes and with few subnormal ones (microkernels-inl.h's
// Fp8Folded, Fp8RowsNeedDecoding). Compiled for AVX-512 by
// its target attribute; callers check HaveFp8FmaDot().
//
// Why by hand: the flash loop's Highway kernel for these tiles
// (QDotTwoKeys) issues the same widening and FMAs per code, but reduces
// each pair of keys' 8 accumulators alone, and GCC copies accumulators
// between registers at most steps. Here four keys share each Q vector and
// one transposing tree (x86_bf16_ops.h) leaves their 16 sums in the packed
// order: per key and group of 4 rows at d 128, 8 x (3 widening + 4 FMAs)
// and about 11 tree operations. decode_kernels_bench, Xeon with AMX, rows
// in L1: 10.6 ns a key, against about 8.5 for the widening and FMAs alone
// (decode_floor_bench's fp8 floor in L1, one thread, its Q.K half). In
// the decode, B1 H32/8 Tk512 d128 E4M3 FAST (K and V in L2), phase_bench,
// one thread, two alternating rounds: decode tiles 0.111-0.113 -> 0.104-
// 0.106 ms.
//
// Tried and left out: widening by GFNI and VBMI, 6 operations per 64 codes
// where this takes 12 (vgf2p8affineqb picking each code's two bytes of
// f32 out of its bits for 64 codes at once, one vpermt2b per 16 codes
// placing them in the lanes): slower here, Q.K 12.6-13.1 against 10.5-11.0
// ns a key, and a P.V written so 11.1-11.8 against the f32 kernels'
// roughly 9 in the decode (vpermt2b issues one per 2 cycles here). Nor
// with one vpermd, two vgf2p8affineqb and byte and word unpacks (9
// operations per 64 codes, the same sums): 11.5-12.3 against 11.0-11.5,
// GCC keeping Q's 16 vectors in registers across the four keys, spilling.
#include "backends/highway/x86_dot.h"
#include "platform/prefetch.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <utility>

#include "backends/highway/x86_bf16_ops.h"

// GCC 12's AVX-512 headers start some intrinsics from an undefined vector,
// which -Wmaybe-uninitialized reports at every use.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define ATTNKIT_TARGET_FP8_FMA ATTNKIT_TARGET_AVX512  // x86_bf16_ops.h's: AVX-512 F/BW/VL/DQ

namespace attnkit {
namespace x86_dot {
namespace {

using bf16_ops::FourKeySums;

// 16 codes from p (those `mask` keeps; the rest read as code 0) as f32:
// each code's value times 2^-bias (microkernels-inl.h's Fp8Folded):
// sign-extended to 32 bits and shifted left by 20 (E4M3) or 21 (E5M2), the
// sign lands on bit 31 and the magnitude under f32's exponent, subnormal
// codes included; the AND clears the sign's copies. Exact for every code
// but the special ones (E4M3's NaN, E5M2's Inf and NaN).
template <bool kE4M3>
ATTNKIT_TARGET_FP8_FMA inline __m512 Widen16(const uint8_t* p, __mmask16 mask) {
  constexpr int kShift = kE4M3 ? 20 : 21;
  constexpr uint32_t kMask = kE4M3 ? 0x87F00000u : 0x8FE00000u;  // sign, 7 magnitude bits
  const __m128i codes = mask == 0xFFFF ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                                       : _mm_maskz_loadu_epi8(mask, p);
  const __m512i bits = _mm512_slli_epi32(_mm512_cvtepi8_epi32(codes), kShift);
  return _mm512_castsi512_ps(_mm512_and_si512(bits, _mm512_set1_epi32(static_cast<int>(kMask))));
}

// a[key][r] += Q[r, c, c + 16) * the codes of key `key` there (row k[key])
// for four keys and rows r < 4: each Q vector is loaded once for the four
// keys, each widened key vector serves the four rows.
template <bool kE4M3>
ATTNKIT_TARGET_FP8_FMA inline void StepFourKeys(const float* q, size_t ldq, const uint8_t* const* k,
                                                size_t c, __mmask16 mask, __m512 (*a)[4]) {
  __m512 kv[4];
#pragma GCC unroll 4
  for (int key = 0; key < 4; ++key) kv[key] = Widen16<kE4M3>(k[key] + c, mask);
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
    const __m512 qv = _mm512_loadu_ps(q + r * ldq + c);
#pragma GCC unroll 4
    for (int key = 0; key < 4; ++key) a[key][r] = _mm512_fmadd_ps(qv, kv[key], a[key][r]);
  }
}

// The whole 16-code steps of four keys: written out where their count
// kSteps is known (d 64-256), so that GCC keeps the 16 accumulators in
// registers (x86_vnni_dot.cc's FullPairSteps says what a loop cost); a loop
// otherwise (kSteps 0).
template <bool kE4M3, size_t... kStep>
ATTNKIT_TARGET_FP8_FMA inline void WrittenOutSteps(const float* q, size_t ldq,
                                                   const uint8_t* const* k, __m512 (*a)[4],
                                                   std::index_sequence<kStep...>) {
  (StepFourKeys<kE4M3>(q, ldq, k, kStep * 16, 0xFFFF, a), ...);
}
template <bool kE4M3, size_t kSteps>
ATTNKIT_TARGET_FP8_FMA inline void FullSteps(const float* q, size_t ldq, const uint8_t* const* k,
                                             size_t full, __m512 (*a)[4]) {
  if constexpr (kSteps == 0) {
    for (size_t c = 0; c < full; c += 16) StepFourKeys<kE4M3>(q, ldq, k, c, 0xFFFF, a);
  } else {
    WrittenOutSteps<kE4M3>(q, ldq, k, a, std::make_index_sequence<kSteps>());
  }
}

// Fp8FmaQDotK4 for one format and step count: keys four at a time (a last
// group of 1-3 keys repeats its last key and stores only its own sums).
template <bool kE4M3, size_t kSteps>
ATTNKIT_TARGET_FP8_FMA void QDotK4(const float* q, size_t ldq, const uint8_t* k, size_t ldk,
                                   size_t d, size_t keys, float* s, const uint8_t* pf_k,
                                   size_t ld_pf_k, const uint8_t* pf_v, size_t ld_pf_v,
                                   size_t ahead, const L1Rows& l1) {
  const size_t full = d / 16 * 16, rest = d - full;
  const __mmask16 rest_mask = static_cast<__mmask16>((1u << rest) - 1);
  for (size_t j = 0; j < keys; j += 4) {
    const size_t n = keys - j < 4 ? keys - j : 4;
    for (size_t x = j; x < j + n && x < ahead; ++x) {
      PrefetchAheadKeyL2(pf_k, ld_pf_k, pf_v, ld_pf_v, x, d);
    }
    PrefetchL1Rows(l1, j, j + 4);
    const uint8_t* rows[4];
#pragma GCC unroll 4
    for (size_t key = 0; key < 4; ++key) rows[key] = k + (j + (key < n ? key : n - 1)) * ldk;
    __m512 a[4][4];
#pragma GCC unroll 4
    for (int key = 0; key < 4; ++key) {
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) a[key][r] = _mm512_setzero_ps();
    }
    FullSteps<kE4M3, kSteps>(q, ldq, rows, full, a);
    if (rest != 0) StepFourKeys<kE4M3>(q, ldq, rows, full, rest_mask, a);
    const __m512 dots = FourKeySums(a);
    if (n == 4) {
      _mm512_storeu_ps(s + j * 4, dots);
    } else {
      _mm512_mask_storeu_ps(s + j * 4, static_cast<__mmask16>((1u << (4 * n)) - 1), dots);
    }
  }
  PrefetchL1Rows(l1, keys, l1.count);
}

using QDotK4Fn = void (*)(const float*, size_t, const uint8_t*, size_t, size_t, size_t, float*,
                          const uint8_t*, size_t, const uint8_t*, size_t, size_t, const L1Rows&);
template <bool kE4M3>
QDotK4Fn ForFullSteps(size_t full) {
  switch (full / 16) {
    case 4:
      return &QDotK4<kE4M3, 4>;
    case 8:
      return &QDotK4<kE4M3, 8>;
    case 12:
      return &QDotK4<kE4M3, 12>;
    case 16:
      return &QDotK4<kE4M3, 16>;
    default:
      return &QDotK4<kE4M3, 0>;
  }
}

}  // namespace

void Fp8FmaQDotK4(const float* q, size_t ldq, const uint8_t* k, size_t ldk, size_t d, size_t keys,
                  bool e4m3, float* s, const uint8_t* pf_k, size_t ld_pf_k, const uint8_t* pf_v,
                  size_t ld_pf_v, size_t ahead, const L1Rows& l1) {
  const size_t full = d / 16 * 16;
  if (e4m3) {
    ForFullSteps<true>(full)(q, ldq, k, ldk, d, keys, s, pf_k, ld_pf_k, pf_v, ld_pf_v, ahead, l1);
  } else {
    ForFullSteps<false>(full)(q, ldq, k, ldk, d, keys, s, pf_k, ld_pf_k, pf_v, ld_pf_v, ahead, l1);
  }
}

bool HaveFp8FmaDot() {
  static const bool have = __builtin_cpu_supports("avx512f") &&
                           __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return have;
}

}  // namespace x86_dot
}  // namespace attnkit

#else  // not x86-64 with GCC or Clang: HaveFp8FmaDot() is false, so never called

namespace attnkit {
namespace x86_dot {

bool HaveFp8FmaDot() { return false; }
void Fp8FmaQDotK4(const float*, size_t, const uint8_t*, size_t, size_t, size_t, bool, float*,
                  const uint8_t*, size_t, const uint8_t*, size_t, size_t, const L1Rows&) {}

}  // namespace x86_dot
}  // namespace attnkit

#endif
