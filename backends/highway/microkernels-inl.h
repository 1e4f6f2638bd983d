// Per-target micro-kernels of the flash attention loop: the two matrix
// products as register-tiled kernels, the online softmax update, masking,
// soft-capping, row conversion and the log-sum-exp merge of split-K partials.
// All arithmetic is fp32. Included once per Highway target (toggle guard).
//
// Layouts (all row-major, leading dimensions in floats):
//   qt [d, ldq]     the query tile transposed and pre-scaled: column r is a
//                   query row (one head at one position)
//   k  [keys, ldk]  one key tile, converted to f32
//   s  [keys, lds]  scores, then probabilities, key-major: one vector holds
//                   Lanes() query rows of one key, so the softmax statistics
//                   of Lanes() rows are updated with plain vector max/add
//   v  [keys, ldv]  one value tile, converted to f32, padded with zeros
//   o  [rows, ldo]  the unnormalised output accumulator

#if defined(ATTNKIT_BACKENDS_HIGHWAY_MICROKERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_BACKENDS_HIGHWAY_MICROKERNELS_INL_H_
#undef ATTNKIT_BACKENDS_HIGHWAY_MICROKERNELS_INL_H_
#else
#define ATTNKIT_BACKENDS_HIGHWAY_MICROKERNELS_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/dtype.h"
#include "hwy/cache_control.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "platform/exp_nonpositive-inl.h"
#include "platform/prefetch.h"
#include "platform/widen-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Register tiles. QK^T: kWideKeys keys x kWideRowVecs vectors of query rows:
// 16 accumulators where the target has 32 vector registers (AVX-512), else 8
// (which just cover the FMA latency x 2 pipes, with no slack: on Zen 5, one
// thread, alternating runs, the f32 Q.K phase of GQA T1024 d128 took
// 21.8-23.5 ms with 8 and 20.3-20.8 with 16; T2048 d64 causal 61-63 -> 59-60
// ms in all). Each element's sum over c keeps its order. Tiles with at most one
// vector of rows (decode) use QDotKRows instead, which pads rows to one
// vector and takes any key count (kNarrowKeys = 1: no key padding). PV: kValueRows rows x
// kValueColVecs vectors of the head dimension: 16 accumulators where the
// target has 32 vector registers (AVX-512), so each broadcast P value feeds
// four FMAs (Zen 5, 2 threads, paired runs: decode B8 d128 3-4 % and
// prefill 2-5 % faster than with 8), else 8 (AVX2's 16 registers would
// spill 16). Column blocks do not change any element's summation order.
constexpr int kWideRowVecs = 2;
constexpr int kNarrowKeys = 1;
constexpr int kNarrowRowVecs = 1;
constexpr int kValueRows = 4;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int kWideKeys = 8;
constexpr int kValueColVecs = 4;
#else
constexpr int kWideKeys = 4;
constexpr int kValueColVecs = 2;
#endif
// WeightedSumV runs V tiles larger than this column block first.
constexpr size_t kWeightedSumVL1Bytes = 32 << 10;
static_assert(kValueColVecs % 2 == 0, "value tiles load BF16Pairs two vectors at a time");

// Rows of K or V storage some keys past the tile being multiplied, which the
// product kernels prefetch a cache line at a time between their FMAs. Decode
// reads every K/V byte once: prefetching a whole tile in one burst stalls on
// the core's few miss buffers, then leaves memory idle while the tile
// computes, so time is memory + compute; spread out, the two overlap
// (paired single-thread runs on Zen 3, B = 8, d = 128: fp32 1.1-1.2x, bf16
// 1.3-1.8x faster). Row j (of the tile's keys) is rows + j * ld; rows
// [0, count) exist, count = 0 prefetches nothing.
template <typename T>
struct AheadRows {
  static constexpr size_t kPerLine = 64 / sizeof(T);  // elements per cache line
  const T* rows = nullptr;
  size_t ld = 0;
  size_t count = 0;
  // Prefetch f32 rows into L1 (prefetcht0) rather than L2 (prefetcht1):
  // for rows that lie back to back (and dense fp8 V rows under
  // Fp8FmaQDotK4's schedule: sdpa-inl.h's fp8_fma_l1). Rows far apart (paged caches hold all KV
  // heads of a token in one page row: 2 KiB apart at Hkv 8, d 128, bf16)
  // fall into few L1 sets and evict each other there. Zen 5, B8 H32/8
  // Tk4096 d128 decode, alternating runs, L1 against L2: dense f32 8.1-8.4
  // vs 9.2-9.6 ms at one thread, 5.7 vs 6.1 ms at two; bf16 and int8 within
  // the noise (so they stay in L2); bf16 in 16-token pages 10.4 vs 6.8 ms,
  // in 64-token pages 7.7 vs 5.5.
  bool into_l1 = false;
};

// The same rows read as storage tag U (a tag of the same bytes).
template <typename U, typename T>
HWY_INLINE AheadRows<U> RecastAheadRows(const AheadRows<T>& a) {
  static_assert(sizeof(U) == sizeof(T), "a tag of the same storage");
  return {reinterpret_cast<const U*>(a.rows), a.ld, a.count, a.into_l1};
}

// S[j, r] = sum_c qt[c, r] * k[j, c] for r < rows, j < keys.
// rows must be a multiple of kRowVecs * Lanes, keys of kKeys; qt, s aligned.
// The HWY_UNROLL(8) pragmas (8 >= every tile constant; GCC 12 takes no
// template parameter there) matter: without full unrolling GCC keeps the
// accumulator array on the stack.
template <int kKeys, int kRowVecs>
HWY_INLINE void QDotK(const float* HWY_RESTRICT qt, size_t ldq, const float* HWY_RESTRICT k,
                      size_t ldk, size_t d, size_t rows, size_t keys, float* HWY_RESTRICT s,
                      size_t lds) {
  const DF df;
  const size_t N = hn::Lanes(df);
  for (size_t r0 = 0; r0 < rows; r0 += kRowVecs * N) {
    for (size_t j0 = 0; j0 < keys; j0 += kKeys) {
      VF acc[kKeys][kRowVecs];
      HWY_UNROLL(8)
      for (int kk = 0; kk < kKeys; ++kk) {
        HWY_UNROLL(8)
        for (int rv = 0; rv < kRowVecs; ++rv) acc[kk][rv] = hn::Zero(df);
      }
      const float* HWY_RESTRICT kj = k + j0 * ldk;
      const float* HWY_RESTRICT qc = qt + r0;
      for (size_t c = 0; c < d; ++c, qc += ldq) {
        VF q[kRowVecs];
        HWY_UNROLL(8)
        for (int rv = 0; rv < kRowVecs; ++rv) q[rv] = hn::Load(df, qc + rv * N);
        HWY_UNROLL(8)
        for (int kk = 0; kk < kKeys; ++kk) {
          const VF kc = hn::Set(df, kj[kk * ldk + c]);
          HWY_UNROLL(8)
          for (int rv = 0; rv < kRowVecs; ++rv) {
            acc[kk][rv] = hn::MulAdd(kc, q[rv], acc[kk][rv]);
          }
        }
      }
      HWY_UNROLL(8)
      for (int kk = 0; kk < kKeys; ++kk) {
        HWY_UNROLL(8)
        for (int rv = 0; rv < kRowVecs; ++rv) {
          hn::Store(acc[kk][rv], df, s + (j0 + kk) * lds + r0 + rv * N);
        }
      }
    }
  }
}

// One vector of K or V storage as f32. bf16 widens by a 16-bit shift and f16
// by F16C (where the target has it), so 16-bit caches are read at half the
// bytes and converted in registers. Unaligned: storage rows are strided views.
HWY_INLINE VF LoadF32(DF df, const float* HWY_RESTRICT p) { return hn::LoadU(df, p); }

// x[c] *= f for c < n, whole vectors and then the rest one at a time (each
// element rounded once, as a scalar loop would). A scalar loop was not
// vectorised, and where x was just written by vector stores each element
// waited on them (half of LoadQueryTile's time on Zen 5).
HWY_INLINE void ScaleRowInPlace(float* HWY_RESTRICT x, size_t n, float f) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const VF vf = hn::Set(df, f);
  size_t c = 0;
  for (; c + N <= n; c += N) hn::StoreU(hn::Mul(hn::LoadU(df, x + c), vf), df, x + c);
  for (; c < n; ++c) x[c] *= f;
}
HWY_INLINE VF LoadF32(DF df, const hwy::bfloat16_t* HWY_RESTRICT p) {
  return hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::bfloat16_t, DF>(), p));
}
HWY_INLINE VF LoadF32(DF df, const hwy::float16_t* HWY_RESTRICT p) {
  return LoadF16AsF32(df, p);  // exact for Inf/NaN on every target
}
// int8 K/V: the integer values (exact in f32); the caller applies the row
// scales to the scores and probabilities (ScaleKeyColumns).
HWY_INLINE VF LoadF32(DF df, const int8_t* HWY_RESTRICT p) {
  const hn::Rebind<int8_t, DF> d8;
  const hn::Rebind<int32_t, DF> d32;
  return hn::ConvertTo(df, hn::PromoteTo(d32, hn::LoadU(d8, p)));
}
// Storage tags of fp8 K/V (core/fp8.h): the decoded codes, exact
// (LoadFp8AsF32); like int8, the caller applies the row scales
// (ScaleKeyColumns). A quarter of f32's bytes, decoded in registers.
struct Fp8E4M3 {
  uint8_t bits;
};
struct Fp8E5M2 {
  uint8_t bits;
};
HWY_INLINE VF LoadF32(DF df, const Fp8E4M3* HWY_RESTRICT p) {
  return LoadFp8AsF32(df, reinterpret_cast<const uint8_t*>(p), /*e4m3=*/true);
}
HWY_INLINE VF LoadF32(DF df, const Fp8E5M2* HWY_RESTRICT p) {
  return LoadFp8AsF32(df, reinterpret_cast<const uint8_t*>(p), /*e4m3=*/false);
}
// fp8 codes of a tile known to hold no special code (Fp8RowsNeedDecoding:
// E4M3's NaN, E5M2's Inf and NaN) and few subnormal ones (exact, but slow
// on Intel), read without building one: exact for every other code. A code sign-extended to 32 bits
// and shifted left by kFp8Shift (20 for E4M3, 21 for E5M2) puts the sign at bit 31 (its copies
// below, masked off) and the magnitude under f32's exponent; that is the
// value times 2^-kFp8Bias (120 = 127 - 7, 112 = 127 - 15), subnormal codes
// included. Three integer operations per vector against LoadFp8AsF32's
// conversion through f16 and its NaN (x86 from AVX2 up; elsewhere eight
// operations for E4M3, the f32 bits): decode with an fp8
// cache is bound by these instructions (Zen 3, B8 H32/8 Tk4096 d128: 9.1
// -> 6.4 ms with Fp8Folded).
//   Fp8Finite<kE4M3>: times 2^kFp8Bias in the load (one multiply more);
//   Fp8Folded<kE4M3>: the 2^kFp8Bias left to the other factor: K's codes
//     meet Q rows times it, V's codes weights times it (the products then
//     equal the exact path's, the same roundings in the same ranges). The
//     caller checks neither can overflow: |q| and each V row scale (weights
//     are at most 1 times it) below kFp8FoldLimit.
template <bool kE4M3>
struct Fp8Finite {
  uint8_t bits;
};
template <bool kE4M3>
struct Fp8Folded {
  uint8_t bits;
};
template <bool kE4M3>
constexpr int kFp8Shift = kE4M3 ? 20 : 21;
template <bool kE4M3>
constexpr float kFp8TwoToBias = kE4M3 ? 0x1p120f : 0x1p112f;
constexpr float kFp8FoldLimit = 0x1p7f;  // |q| and V scales below this fold

// The codes' values times 2^-kFp8Bias (LoadFp8AsF32's bits before its multiply).
template <bool kE4M3>
HWY_INLINE VF LoadFp8TimesTwoToMinusBias(DF df, const uint8_t* HWY_RESTRICT p) {
  const hn::RebindToSigned<DF> di;
  const auto bits =
      hn::PromoteTo(di, hn::LoadU(hn::Rebind<int8_t, DF>(), reinterpret_cast<const int8_t*>(p)));
  constexpr uint32_t kMask = kE4M3 ? 0x87F00000u : 0x8FE00000u;  // sign, 7 magnitude bits
  return hn::BitCast(
      df, hn::And(hn::ShiftLeft<kFp8Shift<kE4M3>>(bits), hn::Set(di, static_cast<int32_t>(kMask))));
}
template <bool kE4M3>
HWY_INLINE VF LoadF32(DF df, const Fp8Finite<kE4M3>* HWY_RESTRICT p) {
  return hn::Mul(LoadFp8TimesTwoToMinusBias<kE4M3>(df, reinterpret_cast<const uint8_t*>(p)),
                 hn::Set(df, kFp8TwoToBias<kE4M3>));
}
template <bool kE4M3>
HWY_INLINE VF LoadF32(DF df, const Fp8Folded<kE4M3>* HWY_RESTRICT p) {
  return LoadFp8TimesTwoToMinusBias<kE4M3>(df, reinterpret_cast<const uint8_t*>(p));
}

// Fp8HalfFolded: E4M3 codes of a tile that holds no special code but many
// subnormal ones (Fp8RowsNeedDecoding true, Fp8RowsHaveSpecial false), as
// one cached with a single scale per tensor (vLLM's default scale is 1)
// holds in most tiles: on x86 from AVX2 up (kFp8CountsSubnormal), widened
// through f16 as LoadFp8AsF32 widens them but without its multiply by 2^8
// and its NaN, to the value times 2^-8, exact and never an f32 subnormal.
// The 2^8 is left to the other factor as Fp8Folded leaves its 2^bias: Q
// rows and the V scales times kFp8HalfFactor, where neither can overflow
// (FoldBelowLimit against kFp8HalfFoldLimit), so the products equal the
// decoded path's (but where a weight times its V scale is an f32
// subnormal, which the fold may round with more bits, as Fp8Folded's). Five
// operations a vector against the decoding's nine. B8 H32/8 Tk4096 d128
// E4M3 decode, K and V from N(0, 1) stored with scale 1 (every tile holds
// many subnormal codes: phase_bench's unit-scale), Xeon with AMX, two
// alternating rounds, decoded -> through f16: FAST (24) 2 threads
// 5.54-5.67 -> 4.67-4.69 ms, 1 thread 10.65-10.76 -> 8.60-8.80; EXACT (23)
// 6.71-6.83 -> 5.91-6.03 and 12.15-12.16 -> 10.68-10.69. (The folded reads
// of the suite's own-scale rows: 24 at 3.9-4.0 and 8.1-8.5 in the same
// runs.) The checks it adds (Fp8RowsHaveSpecial on K and V) run only on
// tiles handed back.
struct Fp8HalfFolded {
  uint8_t bits;
};
constexpr float kFp8HalfFactor = 0x1p8f;
constexpr float kFp8HalfFoldLimit = 0x1p119f;  // |q| and V scales below this fold by 2^8
HWY_INLINE VF LoadF32(DF df, const Fp8HalfFolded* HWY_RESTRICT p) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  return LoadE4M3TimesTwoToMinus8(df, reinterpret_cast<const uint8_t*>(p));
#else  // (not taken there: the same values from the f32 bits)
  return hn::Mul(LoadFp8TimesTwoToMinusBias<true>(df, reinterpret_cast<const uint8_t*>(p)),
                 hn::Set(df, 0x1p112f));
#endif
}

// folded[i] = x[i] * factor for i < n, and true, where every finite x[i]
// is below fold_limit in magnitude (NaN and Inf stay what they are);
// else false (folded is then unspecified). For Q rows and V row scales.
// Whole vectors, then the rest (the scalar loop was 2 % of an fp8 decode:
// it runs on each tile's V scales).
HWY_INLINE bool FoldBelowLimit(const float* HWY_RESTRICT x, int64_t n, float factor,
                               float* HWY_RESTRICT folded, float fold_limit = kFp8FoldLimit) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const VF limit = hn::Set(df, fold_limit);
  const VF inf = hn::Set(df, std::numeric_limits<float>::infinity());
  const VF f = hn::Set(df, factor);
  VF over = hn::Zero(df);  // the largest finite |x| at or over the limit seen, else 0
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const VF v = hn::LoadU(df, x + i);
    const VF a = hn::Abs(v);
    over = hn::Max(over, hn::IfThenElseZero(hn::And(hn::Ge(a, limit), hn::Lt(a, inf)), a));
    hn::StoreU(hn::Mul(v, f), df, folded + i);
  }
  bool ok = hn::AllTrue(df, hn::Eq(over, hn::Zero(df)));
  for (; i < n; ++i) {
    ok &= !(std::fabs(x[i]) >= fold_limit) || !std::isfinite(x[i]);
    folded[i] = x[i] * factor;
  }
  return ok;
}

// Whether a tile's fp8 rows must be read decoded (LoadFp8AsF32) rather than
// by the folded reads (Fp8Finite, Fp8Folded, x86_dot::Fp8FmaQDotK4). The
// rows come in `count` runs (pages): run r's rows are rows[r] + j * ld for
// j < begin[r + 1] - begin[r], d codes each. True where they hold
//  - a special code (core/fp8.h): E4M3's NaN S.1111.111, E5M2's Inf and
//    NaN S.11111.xx, the codes that ORed with kOthers (0x80, 0x83) give
//    0xFF. Read as f32 bits they are finite values of no meaning.
//  - more than kFp8SubnormalCodesFolded subnormal codes (exponent 0,
//    mantissa not 0). Such a code is exact as f32 bits, but an f32
//    subnormal, and Intel's FMAs take a microcode assist on each (about 35
//    ns against 0.26 a vector, Xeon with AMX; in the decode 4 FMAs a code,
//    about 130 ns). Rows quantized with their own scale (max|x| / 448) hold
//    a few in a tile at most, cheaper taken as assists than a decoded
//    tile; a cache with one scale per tensor (vLLM's default scale is 1)
//    holds them in every tile wherever |x| < 2^-6 (E4M3; 2^-14 for E5M2),
//    and LoadFp8AsF32 widens them through f16 on x86 from AVX2 up, without
//    assists (E4M3 tiles without a special code: Fp8HalfFolded, the same
//    widening without its multiply and NaN). Counted there only (kFp8CountsSubnormal): SSE4's
//    decoding makes the same f32 subnormals, and other CPUs (Arm's) take no assist.
// The answer depends on the codes alone, not on how the runs split the
// rows (so paged tiles take the path dense ones take). Per vector of
// codes: an OR, a max (specials) and a min (exponent 0: a zero or a
// subnormal code); only a tile with a code of exponent 0 is read again to
// count the subnormal ones (zeros are harmless). Measured on B8 H32/8
// Tk4096 d128 E4M3 FAST (24), phase_bench, Xeon with AMX, alternating
// rounds, against the specials alone:
//  - the suite's rows, their own scale (a quarter of the tiles hold a
//    subnormal code on each side): 2 threads 3.43-3.69 -> 3.56-3.75 ms, 1
//    thread 6.98-7.19 -> 7.06-7.54;
//  - one scale per tensor, max|x| / 448 (about 2.6 subnormal codes in a
//    64-key tile, left to their assists; most tiles counted again): 2
//    threads 4.02-4.04 -> 4.21-4.32, 1 thread 7.81 -> 8.99;
//  - unit scale (every tile decoded): 1 thread 106.6 -> 11.2 ms.
// Tried and no better: a saturating sum of weights per code of exponent 0
// in the first pass (two operations more a vector, counting again only
// past the limit: 3.60-3.64 and 4.15-4.26 ms at 2 threads); the min kept
// per 1 KiB block, counting again only the blocks it marks; the min taken
// on every fourth row only (per-row loops cost more than they saved).
constexpr size_t kFp8SubnormalCodesFolded = 8;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
constexpr bool kFp8CountsSubnormal = true;
#else
constexpr bool kFp8CountsSubnormal = false;
#endif
// Calls visit(codes, n) for the tile's fp8 rows run by run (the runs as
// Fp8RowsNeedDecoding takes them), each row a span of d codes, or a run's
// rows back to back (ld == d) one span of all their codes.
template <typename T, class Visit>
HWY_INLINE void ForEachFp8Span(const T* const* rows, const int64_t* begin, int count, size_t ld,
                               size_t d, const Visit& visit) {
  static_assert(sizeof(T) == 1, "fp8 codes");
  for (int r = 0; r < count; ++r) {
    const uint8_t* first = reinterpret_cast<const uint8_t*>(rows[r]);
    const size_t n = static_cast<size_t>(begin[r + 1] - begin[r]);
    if (ld == d) {
      visit(first, n * d);
    } else {
      for (size_t j = 0; j < n; ++j) visit(first + j * ld, d);
    }
  }
}

// Fp8RowsNeedDecoding, and with kCountSubnormal false its specials alone
// (Fp8RowsHaveSpecial).
template <bool kE4M3, bool kCountSubnormal, typename T>
HWY_INLINE bool Fp8RowsCheck(const T* const* rows, const int64_t* begin, int count, size_t ld,
                             size_t d) {
  const hn::ScalableTag<uint8_t> d8;
  const size_t N = hn::Lanes(d8);
  constexpr uint8_t kOthers = kE4M3 ? 0x80 : 0x83;  // the bits that do not decide specials
  // code | kOthers at most this: exponent 0 (a zero or a subnormal code)
  constexpr uint8_t kExponentZero = kE4M3 ? 0x87 : 0x83;
  const auto others = hn::Set(d8, kOthers);
  auto most = hn::Zero(d8);        // 0xFF in a lane iff a special code
  auto least = hn::Set(d8, 0xFF);  // at most kExponentZero iff a zero or subnormal code
  uint8_t tail_most = 0, tail_least = 0xFF;
  ForEachFp8Span(rows, begin, count, ld, d, [&](const uint8_t* HWY_RESTRICT codes, size_t n) {
    size_t c = 0;
    for (; c + N <= n; c += N) {
      const auto x = hn::Or(hn::LoadU(d8, codes + c), others);
      most = hn::Max(most, x);
      if constexpr (kCountSubnormal) least = hn::Min(least, x);
    }
    for (; c < n; ++c) {
      const uint8_t x = static_cast<uint8_t>(codes[c] | kOthers);
      tail_most = std::max(tail_most, x);
      tail_least = std::min(tail_least, x);
    }
  });
  if (tail_most == 0xFF || !hn::AllFalse(d8, hn::Eq(most, hn::Set(d8, 0xFF)))) return true;
  if (!kCountSubnormal ||
      (tail_least > kExponentZero && hn::AllTrue(d8, hn::Gt(least, hn::Set(d8, kExponentZero))))) {
    return false;
  }
  // Count the subnormal codes: (code & 0x7F) ^ kExponent is above kExponent
  // exactly for those (a zero gives kExponent; a normal code's exponent
  // bits are not all flipped to ones). Two vector operations and a
  // popcount per vector of codes.
  constexpr uint8_t kExponent = kE4M3 ? 0x78 : 0x7C;  // the exponent bits
  const auto magnitude = hn::Set(d8, 0x7F);
  const auto exponent = hn::Set(d8, kExponent);
  size_t subnormal = 0;
  ForEachFp8Span(rows, begin, count, ld, d, [&](const uint8_t* HWY_RESTRICT codes, size_t n) {
    size_t c = 0;
    for (; c + N <= n; c += N) {
      const auto flipped = hn::Xor(hn::And(hn::LoadU(d8, codes + c), magnitude), exponent);
      subnormal += hn::CountTrue(d8, hn::Gt(flipped, exponent));
    }
    for (; c < n; ++c) subnormal += ((codes[c] & 0x7F) ^ kExponent) > kExponent;
  });
  return subnormal > kFp8SubnormalCodesFolded;
}
template <bool kE4M3, typename T>
HWY_INLINE bool Fp8RowsNeedDecoding(const T* const* rows, const int64_t* begin, int count,
                                    size_t ld, size_t d) {
  return Fp8RowsCheck<kE4M3, kFp8CountsSubnormal>(rows, begin, count, ld, d);
}
// Whether the rows (as Fp8RowsNeedDecoding takes them) hold a special code.
template <bool kE4M3, typename T>
HWY_INLINE bool Fp8RowsHaveSpecial(const T* const* rows, const int64_t* begin, int count, size_t ld,
                                   size_t d) {
  return Fp8RowsCheck<kE4M3, false>(rows, begin, count, ld, d);
}

template <typename T>
constexpr bool kFp8FastTag =
    std::is_same<T, Fp8Finite<true>>::value || std::is_same<T, Fp8Finite<false>>::value ||
    std::is_same<T, Fp8Folded<true>>::value || std::is_same<T, Fp8Folded<false>>::value;
// E4M3 (not E5M2) for the fast tags.
template <typename T>
constexpr bool kFp8TagE4M3 =
    std::is_same<T, Fp8Finite<true>>::value || std::is_same<T, Fp8Folded<true>>::value;
template <typename T>
constexpr bool kFp8FoldedTag =
    std::is_same<T, Fp8Folded<true>>::value || std::is_same<T, Fp8Folded<false>>::value;
template <typename T>
constexpr bool kFp8HalfTag = std::is_same<T, Fp8HalfFolded>::value;

// K/V storage read times a row scale applied to the scores and weights
// (ScaleKeyColumns, PackedScale): int8 and the fp8 tags.
template <typename T>
constexpr bool kScaledStorage = std::is_same<T, int8_t>::value || std::is_same<T, Fp8E4M3>::value ||
                                kFp8FastTag<T> || kFp8HalfTag<T> || std::is_same<T, Fp8E5M2>::value;

// Storage tag: bf16 K/V rows read two f32 vectors at a time. One load of
// 2 * Lanes bf16 as 32-bit lanes gives both (a bf16 is the upper half of an
// f32): a 16-bit shift left makes the even columns, masking off the low half
// the odd ones. Half the loads of widening each vector with PromoteTo, and no
// shuffles; decode with a bf16 cache is bound by exactly this arithmetic. The
// pair holds the 2 * Lanes columns in the order BF16PairColumns gives (even,
// then odd): the caller stores Q in that order, and the output accumulates in
// it (dot products and the row-wise output do not care which column is
// where). Rows must hold a multiple of 2 * Lanes columns. Not on HWY_SCALAR
// (one lane: no pairs).
struct BF16Pairs {
  uint16_t bits;
};
#if HWY_TARGET == HWY_SCALAR
constexpr bool kHaveBF16Pairs = false;
#else
constexpr bool kHaveBF16Pairs = true;
#endif
template <typename T>
constexpr int kVecsPerLoad = std::is_same<T, BF16Pairs>::value ? 2 : 1;

// out[0, kVecsPerLoad<T>) = the f32 vectors of storage at p.
template <typename T>
HWY_INLINE void LoadF32Vecs(DF df, const T* HWY_RESTRICT p, VF* HWY_RESTRICT out) {
#if HWY_TARGET != HWY_SCALAR
  if constexpr (std::is_same<T, BF16Pairs>::value) {
    const hn::Repartition<uint32_t, DF> d32;
    const auto v = hn::LoadU(d32, reinterpret_cast<const uint32_t*>(p));
    out[0] = hn::BitCast(df, hn::ShiftLeft<16>(v));
    out[1] = hn::BitCast(df, hn::And(v, hn::Set(d32, 0xFFFF0000u)));
    return;
  }
#endif
  if constexpr (!std::is_same<T, BF16Pairs>::value) out[0] = LoadF32(df, p);
}

// perm[i], i < 2 * Lanes: the column (within a chunk of 2 * Lanes) that
// position i of a BF16Pairs vector pair holds: 2i, then 2(i - Lanes) + 1.
HWY_INLINE void BF16PairColumns(uint32_t* HWY_RESTRICT perm) {
#if HWY_TARGET != HWY_SCALAR
  const size_t N = hn::Lanes(DF());
  for (size_t i = 0; i < N; ++i) {
    perm[i] = static_cast<uint32_t>(2 * i);
    perm[N + i] = static_cast<uint32_t>(2 * i + 1);
  }
#else
  perm[0] = 0;
#endif
}

#if HWY_TARGET != HWY_SCALAR
// Sums 128-bit blocks: [N] -> [4] lanes, lane i = sum of lanes i mod 4.
template <class D>
HWY_INLINE auto SumOfBlocks(D d, hn::Vec<D> v) {
  if constexpr (hn::MaxLanes(D()) <= 4) {
    return v;
  } else {
    const hn::Half<D> dh;
    return SumOfBlocks(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  }
}
#endif

#if HWY_TARGET != HWY_SCALAR
// Per 128-bit block: [a[0], a[1], a[2], a[3]] summed over the block's
// lanes (a block's share of the four sums). Two interleave-and-add steps.
HWY_INLINE VF BlockLaneSums4(const VF* HWY_RESTRICT a) {
  const DF df;
  // Per block: [a0_0 + a0_2, a1_0 + a1_2, a0_1 + a0_3, a1_1 + a1_3].
  const VF t01 = hn::Add(hn::InterleaveLower(df, a[0], a[1]), hn::InterleaveUpper(df, a[0], a[1]));
  const VF t23 = hn::Add(hn::InterleaveLower(df, a[2], a[3]), hn::InterleaveUpper(df, a[2], a[3]));
  // Per block: [a0, a1, a2, a3] (pairs of lanes interleaved as u64).
  const hn::Repartition<uint64_t, DF> du;
  const auto u01 = hn::BitCast(du, t01), u23 = hn::BitCast(du, t23);
  return hn::Add(hn::BitCast(df, hn::InterleaveLower(du, u01, u23)),
                 hn::BitCast(df, hn::InterleaveUpper(du, u01, u23)));
}

// out[0, 4) = the block sums of x, out[4, 8) those of y (BlockLaneSums4's
// layout): the blocks folded pairwise, the last fold of both in one add.
template <class D>
HWY_INLINE void StoreBlockSumsOfTwo(D d, hn::Vec<D> x, hn::Vec<D> y, float* HWY_RESTRICT out) {
  if constexpr (hn::MaxLanes(D()) <= 4) {
    hn::StoreU(x, d, out);
    hn::StoreU(y, d, out + 4);
  } else if constexpr (hn::MaxLanes(D()) == 8) {
    hn::StoreU(hn::Add(hn::ConcatLowerLower(d, y, x), hn::ConcatUpperUpper(d, y, x)), d, out);
  } else {
    const hn::Half<D> dh;
    StoreBlockSumsOfTwo(dh, hn::Add(hn::LowerHalf(dh, x), hn::UpperHalf(dh, x)),
                        hn::Add(hn::LowerHalf(dh, y), hn::UpperHalf(dh, y)), out);
  }
}
#endif

// out[r] = sum of the lanes of a[r], r < 4: the four dot products of one key
// with four query rows. Two interleave-and-add steps and a block fold instead
// of four SumOfLanes, which each broadcast their result.
HWY_INLINE void StoreLaneSums4(const VF* HWY_RESTRICT a, float* HWY_RESTRICT out) {
#if HWY_TARGET == HWY_SCALAR
  for (int r = 0; r < 4; ++r) out[r] = hn::GetLane(a[r]);
#else
  hn::StoreU(SumOfBlocks(DF(), BlockLaneSums4(a)), hn::CappedTag<float, 4>(), out);
#endif
}

// out[r] = sum of the lanes of a[r], out[4 + r] that of b[r], r < 4: two
// keys' dot products with four query rows, in the packed score layout.
HWY_INLINE void StoreLaneSums4x2(const VF* HWY_RESTRICT a, const VF* HWY_RESTRICT b,
                                 float* HWY_RESTRICT out) {
#if HWY_TARGET == HWY_SCALAR
  StoreLaneSums4(a, out);
  StoreLaneSums4(b, out + 4);
#else
  StoreBlockSumsOfTwo(DF(), BlockLaneSums4(a), BlockLaneSums4(b), out);
#endif
}

// One key's dot products with query rows [r0, r0 + 4): out[r] = q[r0 + r, :]
// . krow. The row is read front to back, a pair of vectors at a time, into
// two banks of accumulators (the pair's first and second vector: eight
// chains cover the FMA latency). Reading K strictly in address order matters
// as much as the FMAs: the hardware prefetchers follow a forward walk but
// lose two rows read in lockstep (Zen 5, one thread, streaming 2 x 128 MiB
// with 8 FMAs per line: 37 GB/s in order, 12 GB/s with rows paired). With
// kPrefetch, also prefetches the same lines of the ahead rows pfk and pfv
// (into L1 with kIntoL1, else L2: see AheadRows).
// kPairs > 0: dp is exactly kPairs pairs of vectors (fully unrolled: decode
// is bound by this loop's overhead as much as by its FMAs); 0: any dp.
template <bool kPrefetch, size_t kPairs, bool kIntoL1, typename T>
HWY_INLINE void QDotOneKey(const float* HWY_RESTRICT q, size_t ldq, const T* HWY_RESTRICT krow,
                           size_t dp, float* HWY_RESTRICT out, const T* HWY_RESTRICT pfk,
                           const T* HWY_RESTRICT pfv) {
  const DF df;
  constexpr size_t N = hn::MaxLanes(DF());  // fixed-width targets: Lanes
  constexpr int kRows = 4;
  // Lines of K per pair of vectors (at least one: int8 prefetches each line
  // twice rather than branch).
  constexpr size_t kLines = 2 * N * sizeof(T) > 64 ? 2 * N * sizeof(T) / 64 : 1;
  constexpr size_t kPerLine = AheadRows<T>::kPerLine;
  VF even[kRows], odd[kRows];
  HWY_UNROLL(4)
  for (int r = 0; r < kRows; ++r) even[r] = odd[r] = hn::Zero(df);
  auto pair = [&](size_t c) HWY_ATTR {
    if (kPrefetch) {
      HWY_UNROLL(4)
      for (size_t x = 0; x < kLines; ++x) {
        __builtin_prefetch(pfk + c + x * kPerLine, 0, kIntoL1 ? 3 : 2);
        __builtin_prefetch(pfv + c + x * kPerLine, 0, kIntoL1 ? 3 : 2);
      }
    }
    VF kv[2] = {hn::Zero(df), hn::Zero(df)};
    if constexpr (kVecsPerLoad<T> == 2) {
      LoadF32Vecs(df, krow + c, kv);
    } else {
      kv[0] = LoadF32(df, krow + c);
      kv[1] = LoadF32(df, krow + c + N);
    }
    HWY_UNROLL(4)
    for (int r = 0; r < kRows; ++r) {
      even[r] = hn::MulAdd(hn::Load(df, q + r * ldq + c), kv[0], even[r]);
      odd[r] = hn::MulAdd(hn::Load(df, q + r * ldq + c + N), kv[1], odd[r]);
    }
  };
  size_t c = 0;
  if constexpr (kPairs > 0) {
    HWY_UNROLL(8)
    for (size_t i = 0; i < kPairs; ++i) pair(i * 2 * N);
    c = kPairs * 2 * N;
  } else {
    for (; c + 2 * N <= dp; c += 2 * N) pair(c);
  }
  if constexpr (kVecsPerLoad<T> == 1 && kPairs == 0) {  // BF16Pairs rows hold whole pairs
    for (; c < dp; c += N) {
      if (kPrefetch && c % kPerLine == 0) {
        __builtin_prefetch(pfk + c, 0, kIntoL1 ? 3 : 2);
        __builtin_prefetch(pfv + c, 0, kIntoL1 ? 3 : 2);
      }
      const VF kv = LoadF32(df, krow + c);
      HWY_UNROLL(4)
      for (int r = 0; r < kRows; ++r)
        even[r] = hn::MulAdd(hn::Load(df, q + r * ldq + c), kv, even[r]);
    }
  }
  HWY_UNROLL(4)
  for (int r = 0; r < kRows; ++r) even[r] = hn::Add(even[r], odd[r]);
  StoreLaneSums4(even, out);
}

// Two keys' dot products with query rows [r0, r0 + 4) (QDotOneKey's work
// for keys krow0 and krow1): out[r] and out[4 + r], the packed layout.
// Each Q vector loaded once serves both keys, and one reduction folds the
// eight sums (decode, Zen 3: the per-key reduction was a sixth of a tile).
// Eight accumulator chains cover the FMA latency without even/odd banks.
// With kPrefetch, prefetches the same lines of the ahead rows pf*.
// kSteps > 0: dp is exactly kSteps loads of kVecsPerLoad<T> vectors
// (fully unrolled); 0: any dp (a multiple of kVecsPerLoad<T> * Lanes).
template <bool kPrefetch, size_t kSteps, typename T>
HWY_INLINE void QDotTwoKeys(const float* HWY_RESTRICT q, size_t ldq, const T* HWY_RESTRICT krow0,
                            const T* HWY_RESTRICT krow1, size_t dp, float* HWY_RESTRICT out,
                            const T* HWY_RESTRICT pfk0, const T* HWY_RESTRICT pfv0,
                            const T* HWY_RESTRICT pfk1, const T* HWY_RESTRICT pfv1) {
  const DF df;
  constexpr size_t N = hn::MaxLanes(DF());
  constexpr int kRows = 4;
  constexpr size_t kStep = kVecsPerLoad<T> * N;  // columns per load
  constexpr size_t kPerLine = AheadRows<T>::kPerLine;
  VF a[kRows], b[kRows];
  HWY_UNROLL(4)
  for (int r = 0; r < kRows; ++r) a[r] = b[r] = hn::Zero(df);
  auto step = [&](size_t c) HWY_ATTR {
    if (kPrefetch && c % kPerLine < kStep) {  // the first load of each line
      __builtin_prefetch(pfk0 + c, 0, 2);
      __builtin_prefetch(pfv0 + c, 0, 2);
      __builtin_prefetch(pfk1 + c, 0, 2);
      __builtin_prefetch(pfv1 + c, 0, 2);
    }
    VF k0[kVecsPerLoad<T>], k1[kVecsPerLoad<T>];
    LoadF32Vecs(df, krow0 + c, k0);
    LoadF32Vecs(df, krow1 + c, k1);
    HWY_UNROLL(2)
    for (int v = 0; v < kVecsPerLoad<T>; ++v) {
      HWY_UNROLL(4)
      for (int r = 0; r < kRows; ++r) {
        const VF qv = hn::Load(df, q + r * ldq + c + v * N);
        a[r] = hn::MulAdd(qv, k0[v], a[r]);
        b[r] = hn::MulAdd(qv, k1[v], b[r]);
      }
    }
  };
  if constexpr (kSteps > 0) {
    HWY_UNROLL(16)
    for (size_t i = 0; i < kSteps; ++i) step(i * kStep);
  } else {
    for (size_t c = 0; c < dp; c += kStep) step(c);
  }
  StoreLaneSums4x2(a, b, out);
}

// All keys of a tile for query rows [r0, r0 + 4) (see QDotOneKey); the first
// row tile (r0 == 0) prefetches the ahead rows of the keys that have one.
template <size_t kPairs, typename T>
HWY_INLINE void QDotKeysOfRows(const float* HWY_RESTRICT q, size_t ldq, const T* HWY_RESTRICT k,
                               size_t ldk, size_t dp, size_t r0, size_t keys, float* HWY_RESTRICT s,
                               size_t lds, const AheadRows<T>& k_ahead,
                               const AheadRows<T>& v_ahead) {
  const float* HWY_RESTRICT q0 = q + r0 * ldq;
  const size_t ahead = r0 == 0 ? std::min(keys, k_ahead.count) : 0;
  size_t j = 0;
  // into_l1 is set for f32 rows only here (PlanTiling; PackedTileUpdate sets
  // it for fp8 V rows, which only WeightedSumV reads); sizeof(T) keeps the L1
  // loop out of the other types' code.
  if (sizeof(T) == 4 && k_ahead.into_l1) {
    for (; j < ahead; ++j) {
      QDotOneKey<true, kPairs, true>(q0, ldq, k + j * ldk, dp, s + j * lds + r0,
                                     k_ahead.rows + j * k_ahead.ld, v_ahead.rows + j * v_ahead.ld);
    }
  } else {
    for (; j < ahead; ++j) {
      QDotOneKey<true, kPairs, false>(q0, ldq, k + j * ldk, dp, s + j * lds + r0,
                                      k_ahead.rows + j * k_ahead.ld, v_ahead.rows + j * v_ahead.ld);
    }
  }
  for (; j < keys; ++j) {
    QDotOneKey<false, kPairs, false>(q0, ldq, k + j * ldk, dp, s + j * lds + r0, k, k);
  }
}

// QDotKeysOfRows for rows [0, 4) into packed scores (lds == 4), two keys
// at a time (QDotTwoKeys); the ahead rows of the first k_ahead.count keys
// are prefetched.
template <size_t kSteps, typename T>
HWY_INLINE void QDotKeyPairsOfRows(const float* HWY_RESTRICT q, size_t ldq, const T* HWY_RESTRICT k,
                                   size_t ldk, size_t dp, size_t keys, float* HWY_RESTRICT s,
                                   const AheadRows<T>& k_ahead, const AheadRows<T>& v_ahead) {
  const size_t ahead = std::min(keys, k_ahead.count);
  size_t j = 0;
  for (; j + 1 < keys && j < ahead; j += 2) {
    const size_t j1 = j + 1 < ahead ? j + 1 : j;  // a key without an ahead row repeats j's
    QDotTwoKeys<true, kSteps>(q, ldq, k + j * ldk, k + (j + 1) * ldk, dp, s + j * 4,
                              k_ahead.rows + j * k_ahead.ld, v_ahead.rows + j * v_ahead.ld,
                              k_ahead.rows + j1 * k_ahead.ld, v_ahead.rows + j1 * v_ahead.ld);
  }
  for (; j + 1 < keys; j += 2) {
    QDotTwoKeys<false, kSteps>(q, ldq, k + j * ldk, k + (j + 1) * ldk, dp, s + j * 4, k, k, k, k);
  }
  if (j < keys) {  // an odd key out
    if (j < ahead) {
      QDotOneKey<true, 0, false>(q, ldq, k + j * ldk, dp, s + j * 4, k_ahead.rows + j * k_ahead.ld,
                                 v_ahead.rows + j * v_ahead.ld);
    } else {
      QDotOneKey<false, 0, false>(q, ldq, k + j * ldk, dp, s + j * 4, k, k);
    }
  }
}

// S[j, r] = q[r, :] . k[j, :] for r < rows, j < keys, as dot products along
// the head dimension: for decode, where only a few query rows exist, this
// spends FMAs on real rows only. q [rows_padded, ldq] f32 row-major (aligned),
// k [keys, ldk] of T (f32, bf16 or f16: K storage itself or a converted
// tile); dp (a multiple of Lanes) is the padded head dim, zero-padded in
// both. Rows [rows rounded up to 4, rows_padded) of S are set to 0. The K
// and V rows in k_ahead and v_ahead (see AheadRows) are prefetched along the
// way (the same number of rows in both; a caller may pass the K rows for
// both).
template <typename T>
HWY_INLINE void QDotKRows(const float* HWY_RESTRICT q, size_t ldq, const T* HWY_RESTRICT k,
                          size_t ldk, size_t dp, size_t rows, size_t rows_padded, size_t keys,
                          float* HWY_RESTRICT s, size_t lds, const AheadRows<T>& k_ahead = {},
                          const AheadRows<T>& v_ahead = {}) {
  constexpr size_t kRows = 4;
  const size_t rows4 = (rows + kRows - 1) / kRows * kRows;
  const size_t N = hn::Lanes(DF());
  // Narrow types into packed scores (one row group): two keys at a time.
  constexpr size_t kStep = kVecsPerLoad<T> * hn::MaxLanes(DF());
  if (sizeof(T) < 4 && lds == kRows && rows4 == kRows && dp % kStep == 0) {
    if (dp == 16 * kStep) {
      QDotKeyPairsOfRows<16>(q, ldq, k, ldk, dp, keys, s, k_ahead, v_ahead);
    } else if (dp == 8 * kStep) {
      QDotKeyPairsOfRows<8>(q, ldq, k, ldk, dp, keys, s, k_ahead, v_ahead);
    } else {
      QDotKeyPairsOfRows<0>(q, ldq, k, ldk, dp, keys, s, k_ahead, v_ahead);
    }
  } else {
    for (size_t r0 = 0; r0 < rows4; r0 += kRows) {
      // Unrolled for d = 128 (AVX-512; 64 on AVX2) and narrow K/V, which are
      // bound by this loop's instructions; f32 is bound by memory and was
      // faster with the loop (Zen 5, B8 d128 decode, alternating runs: f32
      // 9.5 vs 10.4 ms at 1 thread, 6.7 vs 7.2 at 2; int8 4.2 vs 4.6 at 1).
      if (sizeof(T) < 4 && dp == 8 * N) {
        QDotKeysOfRows<4>(q, ldq, k, ldk, dp, r0, keys, s, lds, k_ahead, v_ahead);
      } else {
        QDotKeysOfRows<0>(q, ldq, k, ldk, dp, r0, keys, s, lds, k_ahead, v_ahead);
      }
    }
  }
  for (size_t j = 0; j < keys; ++j) {
    for (size_t r = rows4; r < rows_padded; ++r) s[j * lds + r] = 0.0f;
  }
}

// Ahead row j's first `bytes` into L1 or L2 (AheadRows::into_l1).
template <typename T>
HWY_INLINE void PrefetchAheadRow(const AheadRows<T>& ahead, size_t j, size_t bytes) {
  const size_t ld = ahead.ld * sizeof(T);
  if (ahead.into_l1) {
    PrefetchRowsL1(ahead.rows, ld, bytes, j, j + 1);
  } else {
    PrefetchRowsL2(ahead.rows, ld, bytes, j, j + 1);
  }
}

// One register tile of WeightedSumV: rows [r0, r0 + kRows), columns
// [c0, c0 + kColVecs * Lanes). With `ahead`, also prefetches ahead row j
// (its first row_bytes) with key j, as QDotOneKey prefetches with K.
template <int kRows, int kColVecs, typename T>
HWY_INLINE void WeightedSumVTile(const float* HWY_RESTRICT p, size_t ldp, const T* HWY_RESTRICT v,
                                 size_t ldv, size_t keys, const float* HWY_RESTRICT alpha,
                                 size_t r0, size_t c0, float* HWY_RESTRICT o, size_t ldo,
                                 const AheadRows<T>* ahead = nullptr, size_t row_bytes = 0) {
  const DF df;
  const size_t N = hn::Lanes(df);
  VF acc[kRows][kColVecs];
  HWY_UNROLL(8)
  for (int r = 0; r < kRows; ++r) {
    const VF a = hn::Set(df, alpha != nullptr ? alpha[r0 + r] : 1.0f);
    HWY_UNROLL(8)
    for (int cv = 0; cv < kColVecs; ++cv) {
      acc[r][cv] = hn::Mul(a, hn::Load(df, o + (r0 + r) * ldo + c0 + cv * N));
    }
  }
  const float* HWY_RESTRICT pj = p + r0;
  const T* HWY_RESTRICT vj = v + c0;
  for (size_t j = 0; j < keys; ++j, pj += ldp, vj += ldv) {
    if (ahead != nullptr && j < ahead->count) PrefetchAheadRow(*ahead, j, row_bytes);
    VF vv[kColVecs];
    HWY_UNROLL(8)
    for (int cv = 0; cv < kColVecs; cv += kVecsPerLoad<T>) LoadF32Vecs(df, vj + cv * N, vv + cv);
    HWY_UNROLL(8)
    for (int r = 0; r < kRows; ++r) {
      const VF w = hn::Set(df, pj[r]);
      HWY_UNROLL(8)
      for (int cv = 0; cv < kColVecs; ++cv) acc[r][cv] = hn::MulAdd(w, vv[cv], acc[r][cv]);
    }
  }
  HWY_UNROLL(8)
  for (int r = 0; r < kRows; ++r) {
    HWY_UNROLL(8)
    for (int cv = 0; cv < kColVecs; ++cv) {
      hn::Store(acc[r][cv], df, o + (r0 + r) * ldo + c0 + cv * N);
    }
  }
}

// O[r, c] = alpha[r] * O[r, c] + sum_j P[j, r] * V[j, c] for r < rows, c < dp
// (alpha == nullptr: 1; keys == 0 only rescales).
// P is key-major [keys, ldp]; rows a multiple of kValueRows, dp of Lanes. V
// [keys, ldv] of T is a converted f32 tile or, for decode, V storage itself:
// each column block re-reads the tile's rows from L1, the first pass from
// memory. With `ahead` (AheadRows: V rows past the tile), its first register
// tile prefetches ahead row j with key j.
template <typename T>
HWY_INLINE void WeightedSumV(const float* HWY_RESTRICT p, size_t ldp, const T* HWY_RESTRICT v,
                             size_t ldv, size_t keys, const float* HWY_RESTRICT alpha, size_t rows,
                             size_t dp, float* HWY_RESTRICT o, size_t ldo,
                             const AheadRows<T>& ahead = {}) {
  const size_t N = hn::Lanes(DF());
  // The first register tile prefetches the ahead rows.
  const AheadRows<T>* first = ahead.count > 0 ? &ahead : nullptr;
  const size_t row_bytes = dp * sizeof(T);
  if (std::is_same<T, float>::value && kValueColVecs == 4 && dp == 8 * N && rows <= 8) {
    // f32 rows of 8 vectors (d = 128 on AVX-512): two rows at a time over
    // whole V rows, so V storage is read front to back (as QDotOneKey reads
    // K); the second pair of rows rereads the tile from L1. Zen 5, B8 H32/8
    // Tk4096 f32 decode, one thread: 10.5 -> 9.1 ms against column blocks.
    // Narrower types stay in column blocks: they are bound by instructions,
    // and a second pass would convert each V row twice (int8: 4.2 -> 4.1 ms).
    // Only for decode-sized tiles (rows <= 8): over a prefill tile's 64 rows
    // this reads the whole V tile 32 times, 4x4 blocks 16 times, and they
    // are faster there (GQA H32/8 T1024 d128 causal f32, one thread,
    // alternating runs: P.V phase 25.8-27.8 ms with 2x8 tiles, 21.0-22.3 ms
    // with 4x4). Every element's sum over keys keeps its order either way.
    for (size_t r0 = 0; r0 < rows; r0 += 2) {
      WeightedSumVTile<2, 8>(p, ldp, v, ldv, keys, alpha, r0, 0, o, ldo, r0 == 0 ? first : nullptr,
                             row_bytes);
    }
    return;
  }
  const size_t block = kValueColVecs * N;
  const size_t whole = dp / block * block;  // columns in whole blocks
  // A V tile larger than L1 (MLA's 512 value dims: 32 keys are 64 KiB of
  // f32) would stream from L2 once per block of rows: the whole blocks then
  // run a column block at a time, its V columns (8 KiB there) staying in L1
  // over every row. Each element's sum keeps its order. Zen 5, MLA decode
  // B8 H128 d576/512 bf16, one thread, alternating runs, over prepared rows
  // (padded off 1 KiB multiples: PaddedRowFloats): P.V phase 25.4-27.5 ->
  // 23.8-24.8 ms. That decode now reads V from a converted scratch tile,
  // padded the same way (Tiling::ldv).
  const bool blocks_first = keys * dp * sizeof(T) > kWeightedSumVL1Bytes;
  if (blocks_first) {
    for (size_t c0 = 0; c0 < whole; c0 += block) {
      for (size_t r0 = 0; r0 < rows; r0 += kValueRows) {
        WeightedSumVTile<kValueRows, kValueColVecs>(p, ldp, v, ldv, keys, alpha, r0, c0, o, ldo,
                                                    first, row_bytes);
        first = nullptr;
      }
    }
  }
  for (size_t r0 = 0; r0 < rows; r0 += kValueRows) {
    size_t c0 = blocks_first ? whole : 0;
    for (; c0 < whole; c0 += block) {
      WeightedSumVTile<kValueRows, kValueColVecs>(p, ldp, v, ldv, keys, alpha, r0, c0, o, ldo,
                                                  first, row_bytes);
      first = nullptr;
    }
    // The rest two vectors at a time (BF16Pairs rows come in pairs of
    // vectors: dp is then a multiple of 2 Lanes), then one.
    for (; c0 + 2 * N <= dp; c0 += 2 * N) {
      WeightedSumVTile<kValueRows, 2>(p, ldp, v, ldv, keys, alpha, r0, c0, o, ldo, first,
                                      row_bytes);
      first = nullptr;
    }
    if constexpr (kVecsPerLoad<T> == 1) {  // BF16Pairs rows hold whole pairs
      for (; c0 < dp; c0 += N) {
        WeightedSumVTile<kValueRows, 1>(p, ldp, v, ldv, keys, alpha, r0, c0, o, ldo, first,
                                        row_bytes);
        first = nullptr;
      }
    }
  }
}

// bad[r] = 1 where a raw score S[j, r] of a visible pair is NaN or +-Inf: a
// NaN or Inf in that query row or key row (every backend then gives the row
// NaN; see oracle/reference.h). Rows hold no other flag values.
HWY_INLINE VF FlagIfNonFinite(DF df, VF flags, VF score) {
  return hn::IfThenElse(hn::IsFinite(score), flags, hn::Set(df, 1.0f));
}

// The maximum over keys of S[j, r0 + lane]. With kFlag, also
// bad[r0 + lane] = 1 where one of those scores is NaN or +-Inf (every pair
// visible), tested while the max pass has the score in a register: S * 0 is
// NaN exactly for those, and a NaN stays in a sum. (A separate pass over
// the tile cost 2.2 ms of a FAST d64 prefill's 55; this costs 0.6 of it.
// Mask-register tests and a tree of adds measured slower or the same.)
template <bool kFlag>
HWY_INLINE VF TileRowMax(const float* HWY_RESTRICT s, size_t lds, size_t keys, size_t r0,
                         float* HWY_RESTRICT bad) {
  const DF df;
  const VF neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  const VF zero = hn::Zero(df);
  // Four chains: one waited the Max latency per key (the max of exact
  // values is the same in any order; a row holding a NaN is flagged and
  // comes out NaN whatever its max).
  VF max0 = neg_inf, max1 = neg_inf, max2 = neg_inf, max3 = neg_inf;
  VF nf0 = zero, nf1 = zero, nf2 = zero, nf3 = zero;
  size_t j = 0;
  for (; j + 4 <= keys; j += 4) {
    const float* s0 = s + j * lds + r0;
    const VF v0 = hn::Load(df, s0), v1 = hn::Load(df, s0 + lds);
    const VF v2 = hn::Load(df, s0 + 2 * lds), v3 = hn::Load(df, s0 + 3 * lds);
    max0 = hn::Max(max0, v0);
    max1 = hn::Max(max1, v1);
    max2 = hn::Max(max2, v2);
    max3 = hn::Max(max3, v3);
    if constexpr (kFlag) {
      nf0 = hn::MulAdd(v0, zero, nf0);
      nf1 = hn::MulAdd(v1, zero, nf1);
      nf2 = hn::MulAdd(v2, zero, nf2);
      nf3 = hn::MulAdd(v3, zero, nf3);
    }
  }
  for (; j < keys; ++j) {
    const VF v = hn::Load(df, s + j * lds + r0);
    max0 = hn::Max(max0, v);
    if constexpr (kFlag) nf0 = hn::MulAdd(v, zero, nf0);
  }
  if constexpr (kFlag) {
    const VF nf = hn::Add(hn::Add(nf0, nf1), hn::Add(nf2, nf3));
    hn::Store(hn::IfThenElse(hn::IsNaN(nf), hn::Set(df, 1.0f), hn::Load(df, bad + r0)), df,
              bad + r0);
  }
  return hn::Max(hn::Max(max0, max1), hn::Max(max2, max3));
}

// Online softmax over one key tile, vectorised over query rows:
//   m' = max(m, max_j S[j, r]);  alpha = exp(m - m');
//   P[j, r] = exp(S[j, r] - m');  l' = alpha * l + sum_j P[j, r].
// Every exp argument is <= 0 (ExpNonPositive); blocked scores are -inf and
// give P = 0. While a row has seen only -inf, m' = -inf and exp is taken
// relative to 0 instead, so no -inf - -inf = NaN appears; l stays 0. With
// `bad` (a tile whose every pair is visible), the rows holding a NaN or Inf
// score are flagged too, as by FlagIfNonFinite. P goes to store_p: a pair of
// keys (j even) as store_p(j, r0, P[j], P[j + 1]), an odd tile's last key as
// store_p(j, r0, P[j], 0) (see OnlineSoftmaxUpdate for S's own storage).
// With key_end (RowKeyRanges' ke: every score of row r from key ke[r] on
// is -inf), a vector of rows stops after the pair holding the last key one
// of them sees: the P left out would be 0, and no one reads it.
// kScaleScores: S holds the scores divided by score_scale (0 < score_scale
// <= 1, so no finite score overflows), each multiplied here as it is read:
// the same rounded scores, and the same flags and -inf, as a pass over S.
template <bool kScaleScores = false, class StoreP>
HWY_INLINE void OnlineSoftmaxUpdateWith(const float* s, size_t lds, size_t all_keys, size_t rows,
                                        float* HWY_RESTRICT m, float* HWY_RESTRICT l,
                                        float* HWY_RESTRICT alpha, float* HWY_RESTRICT bad,
                                        const float* HWY_RESTRICT key_end, float score_scale,
                                        const StoreP& store_p) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const VF neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  const VF sv = hn::Set(df, score_scale);
  // A score as the exps take it: the product rounded on its own. (GCC
  // fuses a multiply and the max's subtraction into one FMA, whose exact
  // product can exceed the rounded max: an exp argument above 0, and
  // weights other than a pass over S gives. The empty asm hides it.)
  auto score = [&](const float* at) HWY_ATTR {
    VF x = hn::Load(df, at);
    if constexpr (kScaleScores) {
      x = hn::Mul(x, sv);
#if HWY_ARCH_X86 && defined(__GNUC__)
      asm("" : "+v"(x.raw));
#endif
    }
    return x;
  };
  (void)sv;
  for (size_t r0 = 0; r0 < rows; r0 += N) {
    size_t keys = all_keys;
    if (key_end != nullptr) {
      const float end = hn::GetLane(hn::MaxOfLanes(df, hn::Load(df, key_end + r0)));
      const size_t pairs_end = end > 0.0f ? 2 * ((static_cast<size_t>(end) + 1) / 2) : 0;
      keys = std::min(keys, pairs_end);
    }
    VF tile_max = bad != nullptr ? TileRowMax<true>(s, lds, keys, r0, bad)
                                 : TileRowMax<false>(s, lds, keys, r0, nullptr);
    // The max of the rounded products is the rounded max (scale > 0).
    if constexpr (kScaleScores) tile_max = hn::Mul(tile_max, sv);
    const VF m_old = hn::Load(df, m + r0);
    const VF m_new = hn::Max(m_old, tile_max);
    const VF m_use = hn::IfThenZeroElse(hn::Eq(m_new, neg_inf), m_new);
    const VF a = ExpNonPositive(df, hn::Sub(m_old, m_use));
    VF sum0 = hn::Zero(df), sum1 = hn::Zero(df);
    size_t j = 0;
    // Four keys a step, where two left the exp's chains of multiply-adds
    // less room to overlap (softmax phase of the d64 causal prefills, one
    // thread, Zen 5, alternating builds: 4.59-4.88 -> 4.31-4.56 ms), their
    // exps interleaved step by step (ExpNonPositiveN; one after another,
    // FAST: 4.53-4.66 -> 4.14-4.40 ms; eight keys a step measured the same).
    for (; j + 4 <= keys; j += 4) {
      const float* s0 = s + j * lds + r0;
      VF p[4];
      HWY_UNROLL(4)
      for (int i = 0; i < 4; ++i) p[i] = hn::Sub(score(s0 + i * lds), m_use);
      ExpNonPositiveN<4>(df, p);
      store_p(j, r0, p[0], p[1]);
      store_p(j + 2, r0, p[2], p[3]);
      sum0 = hn::Add(sum0, hn::Add(p[0], p[2]));
      sum1 = hn::Add(sum1, hn::Add(p[1], p[3]));
    }
    for (; j + 2 <= keys; j += 2) {
      const float* s0 = s + j * lds + r0;
      VF p[2] = {hn::Sub(score(s0), m_use), hn::Sub(score(s0 + lds), m_use)};
      ExpNonPositiveN<2>(df, p);
      store_p(j, r0, p[0], p[1]);
      sum0 = hn::Add(sum0, p[0]);
      sum1 = hn::Add(sum1, p[1]);
    }
    if (j < keys) {
      const VF p0 = ExpNonPositive(df, hn::Sub(score(s + j * lds + r0), m_use));
      store_p(j, r0, p0, hn::Zero(df));
      sum0 = hn::Add(sum0, p0);
    }
    hn::Store(m_new, df, m + r0);
    hn::Store(hn::MulAdd(a, hn::Load(df, l + r0), hn::Add(sum0, sum1)), df, l + r0);
    hn::Store(a, df, alpha + r0);
  }
}

// OnlineSoftmaxUpdate storing P over S as f32; score_scale != 1: S holds
// the scores divided by it (OnlineSoftmaxUpdateWith's kScaleScores).
HWY_INLINE void OnlineSoftmaxUpdate(float* HWY_RESTRICT s, size_t lds, size_t keys, size_t rows,
                                    float* HWY_RESTRICT m, float* HWY_RESTRICT l,
                                    float* HWY_RESTRICT alpha, float* HWY_RESTRICT bad = nullptr,
                                    float score_scale = 1.0f) {
  const DF df;
  auto store_p = [&](size_t j, size_t r0, VF p0, VF p1) HWY_ATTR {
    hn::Store(p0, df, s + j * lds + r0);
    if (j + 1 < keys) hn::Store(p1, df, s + (j + 1) * lds + r0);
  };
  if (score_scale != 1.0f) {
    OnlineSoftmaxUpdateWith<true>(s, lds, keys, rows, m, l, alpha, bad, /*key_end=*/nullptr,
                                  score_scale, store_p);
  } else {
    OnlineSoftmaxUpdateWith(s, lds, keys, rows, m, l, alpha, bad, /*key_end=*/nullptr, 1.0f,
                            store_p);
  }
}

#if HWY_TARGET == HWY_AVX3_DL && defined(__x86_64__) && defined(__GNUC__)
// AVX3_DL's instructions plus AVX512_BF16's, for a function or lambda.
#define ATTNKIT_AVX3_DL_BF16 __attribute__((target("avx512bf16")))
// OnlineSoftmaxUpdate for FAST bf16 P.V: P goes straight to bf16 key pairs
// as x86_dot::BF16PackWeights lays them out and rounds them (nearest even),
// pp [(keys + 1) / 2, ldpp], pp[jp * ldpp + r] = P[2 jp, r] in the low half
// and P[2 jp + 1, r] (0 past keys) in the high half; S is left as it was.
// With key_end (see OnlineSoftmaxUpdateWith), pairs past a vector of rows'
// last visible key are not written: BF16WeightedSumV given the same ends
// never reads them.
// This skips P's f32 store and the pack's second pass over it (FAST d64
// causal prefill, one thread, Zen 5, alternating builds, three rounds, the
// fusion alone: softmax 4.30-4.57 -> 4.51-4.66 ms, P.V with the pack
// 9.85-10.47 -> 9.08-9.41, the call 25.7-27.4 -> 25.0-26.0). Compiled for AVX3_DL plus
// AVX512_BF16 (vcvtne2ps2bf16): call only where x86_dot::HaveBF16Dot().
// score_scale as OnlineSoftmaxUpdate's.
ATTNKIT_AVX3_DL_BF16 HWY_NOINLINE inline void OnlineSoftmaxUpdateToBF16Pairs(
    const float* HWY_RESTRICT s, size_t lds, size_t keys, size_t rows, float* HWY_RESTRICT m,
    float* HWY_RESTRICT l, float* HWY_RESTRICT alpha, float* HWY_RESTRICT bad,
    const float* HWY_RESTRICT key_end, uint32_t* HWY_RESTRICT pp, size_t ldpp,
    float score_scale = 1.0f) {
  // 16-bit lane 2 i <- lane i, 2 i + 1 <- lane 16 + i: the two keys'
  // roundings of row i side by side.
  alignas(64) int16_t order[32];
  for (int i = 0; i < 16; ++i) {
    order[2 * i] = static_cast<int16_t>(i);
    order[2 * i + 1] = static_cast<int16_t>(16 + i);
  }
  const __m512i interleave = _mm512_load_si512(order);
  auto store_p = [&](size_t j, size_t r0, VF p0, VF p1) ATTNKIT_AVX3_DL_BF16 {
    // Low 16 lanes p0, high 16 p1, each rounded.
    const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(p1.raw, p0.raw);
    _mm512_storeu_si512(pp + j / 2 * ldpp + r0, _mm512_permutexvar_epi16(interleave, both));
  };
  if (score_scale != 1.0f) {
    OnlineSoftmaxUpdateWith<true>(s, lds, keys, rows, m, l, alpha, bad, key_end, score_scale,
                                  store_p);
  } else {
    OnlineSoftmaxUpdateWith(s, lds, keys, rows, m, l, alpha, bad, key_end, 1.0f, store_p);
  }
}
#undef ATTNKIT_AVX3_DL_BF16
#endif

// Flags (see FlagIfNonFinite) every score of S [keys, lds], rows < `rows` (a
// multiple of Lanes): a tile whose every pair is visible.
HWY_INLINE void FlagNonFiniteScores(const float* HWY_RESTRICT s, size_t lds, size_t keys,
                                    size_t rows, float* HWY_RESTRICT bad) {
  const DF df;
  const size_t N = hn::Lanes(df);
  for (size_t r0 = 0; r0 < rows; r0 += N) {
    VF flags = hn::Load(df, bad + r0);
    for (size_t j = 0; j < keys; ++j)
      flags = FlagIfNonFinite(df, flags, hn::Load(df, s + j * lds + r0));
    hn::Store(flags, df, bad + r0);
  }
}

// S[j, r] = -inf where tile-relative key j is outside [kb[r], ke[r]): the
// structured mask (and padding) on a partially visible tile. With `bad`, the
// visible scores are flagged first (FlagIfNonFinite).
HWY_INLINE void MaskKeyRange(float* HWY_RESTRICT s, size_t lds, size_t keys, size_t rows,
                             const float* HWY_RESTRICT kb, const float* HWY_RESTRICT ke,
                             float* HWY_RESTRICT bad = nullptr) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const VF neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  const VF zero = hn::Zero(df);
  for (size_t r0 = 0; r0 < rows; r0 += N) {
    const VF b = hn::Load(df, kb + r0);
    const VF e = hn::Load(df, ke + r0);
    VF flags = bad != nullptr ? hn::Load(df, bad + r0) : zero;
    for (size_t j = 0; j < keys; ++j) {
      const VF jj = hn::Set(df, static_cast<float>(j));
      const auto visible = hn::And(hn::Ge(jj, b), hn::Lt(jj, e));
      float* sj = s + j * lds + r0;
      const VF x = hn::Load(df, sj);
      if (bad != nullptr) flags = FlagIfNonFinite(df, flags, hn::IfThenElseZero(visible, x));
      hn::Store(hn::IfThenElse(visible, x, neg_inf), df, sj);
    }
    if (bad != nullptr) hn::Store(flags, df, bad + r0);
  }
}

// True when the n (a multiple of kVecsPerLoad<T> * Lanes) values at x, of
// storage type T, are all finite.
template <typename T>
HWY_INLINE bool AllFinite(const T* HWY_RESTRICT x, size_t n) {
  const DF df;
  const size_t N = hn::Lanes(df);
  constexpr int kV = kVecsPerLoad<T>;
  auto ok = hn::Eq(hn::Zero(df), hn::Zero(df));
  for (size_t c = 0; c < n; c += kV * N) {
    VF v[kV];
    LoadF32Vecs(df, x + c, v);
    HWY_UNROLL(2)
    for (int i = 0; i < kV; ++i) ok = hn::And(ok, hn::IsFinite(v[i]));
  }
  return hn::AllTrue(df, ok);
}

// S[j, r] *= scale[j] for j < keys, r < rows (a multiple of Lanes): the
// int8 K scales on raw integer dot products, or the V scales on
// probabilities. With keep_zero, a zero stays zero whatever the scale (a
// key a row does not see must not bring a NaN scale into its sum).
HWY_INLINE void ScaleKeyColumns(float* HWY_RESTRICT s, size_t lds, size_t keys, size_t rows,
                                const float* HWY_RESTRICT scale, bool keep_zero) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const VF zero = hn::Zero(df);
  for (size_t j = 0; j < keys; ++j) {
    const VF sc = hn::Set(df, scale[j]);
    float* HWY_RESTRICT sj = s + j * lds;
    for (size_t r = 0; r < rows; r += N) {
      const VF x = hn::Load(df, sj + r);
      const VF y = hn::Mul(x, sc);
      hn::Store(keep_zero ? hn::IfThenElse(hn::Eq(x, zero), zero, y) : y, df, sj + r);
    }
  }
}

// x = cap * tanh(x / cap) for the n (a multiple of Lanes) values at x; -inf
// (a blocked pair) stays -inf.
HWY_INLINE void SoftCap(float* HWY_RESTRICT x, size_t n, float cap) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const VF vcap = hn::Set(df, cap);
  const VF inv = hn::Set(df, 1.0f / cap);
  const VF neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  for (size_t i = 0; i < n; i += N) {
    const VF v = hn::Load(df, x + i);
    const VF capped = hn::Mul(vcap, hn::Tanh(df, hn::Mul(v, inv)));
    hn::Store(hn::IfThenElse(hn::Eq(v, neg_inf), v, capped), df, x + i);
  }
}

// dst[0, n) = src[0, n) converted to f32 (src element stride `stride`), and
// dst[n, n_padded) = 0.
HWY_INLINE void LoadRowAsF32(const void* src, DType type, int64_t stride, size_t n, size_t n_padded,
                             float* HWY_RESTRICT dst) {
  size_t i = 0;
  if (stride == 1) {
    WidenRowToF32(src, type, n, dst);
    i = n;
  }
  for (; i < n; ++i) dst[i] = LoadAsF32(src, type, static_cast<int64_t>(i) * stride);
  for (; i < n_padded; ++i) dst[i] = 0.0f;
}

// core/fast_compute.h's QuantizeQueryRow in vectors, to the same bits, for
// n a multiple of Lanes: out[c] = q[c] * (127 / max_c |q[c]|) rounded to
// the nearest integer, ties to even (the f32 product, then Round, an
// intrinsic on the SIMD targets, so no sum is fused with the product),
// within +-127; zeros for a row of zeros or one holding a NaN or Inf.
// Stores the row's scale, max|q| / 127 (0 or NaN for those rows), and the
// sum of out, and returns true; returns false, having written nothing,
// where 127 / max|q| overflows f32 (max|q| below about 3.7e-37), which the
// caller leaves to QuantizeQueryRow. The scalar function took about 2 us
// of each int8 decode item (4 rows of 128): B8 H32/8 Tk4096 d128 int8
// FAST decode, Xeon with AMX, AVX3_DL, one thread, `phase_bench ...
// paired`, three alternating rounds: query phase 0.144 -> 0.053-0.058 ms a
// call, the call 64.2-65.1 -> 64.9-65.9 % of the paired read loop.
HWY_INLINE bool QuantizeQueryRowInt8(const float* HWY_RESTRICT q, size_t n,
                                     int8_t* HWY_RESTRICT out, float* HWY_RESTRICT scale,
                                     int32_t* HWY_RESTRICT sum) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<int8_t, DF> d8;
  const size_t N = hn::Lanes(df);
  const float kFiniteMax = std::numeric_limits<float>::max();
  const VF finite_max = hn::Set(df, kFiniteMax);
  VF max_abs = hn::Zero(df);
  auto finite = hn::Eq(max_abs, max_abs);  // lanes that saw only finite values
  for (size_t c = 0; c < n; c += N) {
    const VF a = hn::Abs(hn::LoadU(df, q + c));
    finite = hn::And(finite, hn::Le(a, finite_max));  // false for NaN and Inf
    max_abs = hn::Max(max_abs, a);
  }
  const float m = hn::AllTrue(df, finite) ? hn::GetLane(hn::MaxOfLanes(df, max_abs))
                                          : std::numeric_limits<float>::quiet_NaN();
  if (!(m > 0.0f)) {
    std::fill(out, out + n, int8_t{0});
    *scale = m;
    *sum = 0;
    return true;
  }
  const float inv_scale = 127.0f / m;
  if (!(inv_scale <= kFiniteMax)) return false;
  const VF inv = hn::Set(df, inv_scale);
  const VF hi = hn::Set(df, 127.0f), lo = hn::Set(df, -127.0f);
  auto total = hn::Zero(di);
  for (size_t c = 0; c < n; c += N) {
    const VF rounded = hn::Round(hn::Mul(hn::LoadU(df, q + c), inv));
    const auto i = hn::ConvertTo(di, hn::Min(hi, hn::Max(lo, rounded)));
    total = hn::Add(total, i);
    hn::StoreU(hn::DemoteTo(d8, i), d8, out + c);
  }
  *scale = m / 127.0f;
  *sum = hn::GetLane(hn::SumOfLanes(di, total));
  return true;
}

// Merges one row's partial results over disjoint key ranges (split-K):
//   lse = log sum_s exp(lse_s);  out = sum_s exp(lse_s - lse) * o_s
// where o_s [n_parts, ldo] are each normalised over their own range. Parts
// with lse_s = -inf (nothing visible) contribute nothing; if all are -inf,
// out = 0 and lse = -inf. A part with lse_s = NaN (its keys hold a NaN or Inf
// the row reads) makes out NaN and lse NaN. dp is a multiple of Lanes.
// Returns lse.
HWY_INLINE float MergeLsePartials(const float* HWY_RESTRICT o_parts, size_t ldo,
                                  const float* HWY_RESTRICT lse_parts, size_t n_parts, size_t dp,
                                  float* HWY_RESTRICT out) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const float kNegInf = -std::numeric_limits<float>::infinity();
  float max_lse = kNegInf;
  bool poisoned = false;
  for (size_t s = 0; s < n_parts; ++s) {
    max_lse = std::max(max_lse, lse_parts[s]);
    poisoned = poisoned || std::isnan(lse_parts[s]);
  }
  if (poisoned) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (size_t c = 0; c < dp; c += N) hn::Store(hn::Set(df, nan), df, out + c);
    return nan;
  }
  for (size_t c = 0; c < dp; c += N) hn::Store(hn::Zero(df), df, out + c);
  if (max_lse == kNegInf) return kNegInf;
  float total = 0.0f;
  for (size_t s = 0; s < n_parts; ++s) {
    if (lse_parts[s] == kNegInf) continue;
    total += std::exp(lse_parts[s] - max_lse);
  }
  const float lse = max_lse + std::log(total);
  for (size_t s = 0; s < n_parts; ++s) {
    if (lse_parts[s] == kNegInf) continue;
    const VF w = hn::Set(df, std::exp(lse_parts[s] - lse));
    const float* HWY_RESTRICT os = o_parts + s * ldo;
    for (size_t c = 0; c < dp; c += N) {
      hn::Store(hn::MulAdd(w, hn::Load(df, os + c), hn::Load(df, out + c)), df, out + c);
    }
  }
  return lse;
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#endif  // toggle guard
