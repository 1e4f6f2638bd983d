// Per-target masking of score tiles: the dense mask, bias and ALiBi per pair,
// the bias and ALiBi after soft-capping, V rows with a NaN or Inf that some row must not
// see, and each row's visible key range. Included once per target (toggle guard).

#if defined(ATTNKIT_BACKENDS_HIGHWAY_MASKING_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_BACKENDS_HIGHWAY_MASKING_INL_H_
#undef ATTNKIT_BACKENDS_HIGHWAY_MASKING_INL_H_
#else
#define ATTNKIT_BACKENDS_HIGHWAY_MASKING_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "backends/highway/flash_params.h"
#include "backends/highway/microkernels-inl.h"
#include "backends/highway/packed_scores-inl.h"
#include "backends/highway/tiling.h"
#include "core/alibi.h"
#include "core/mask.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {

using highway_plan::Item;
using highway_plan::Tiling;

// The optional per-pair inputs on tile [k0, k0 + nk), on the raw scores
// (before soft-capping): a pair the dense mask blocks, or whose bias is -inf,
// becomes -inf (its K and V rows are not read for that row). Of the other
// pairs the structured mask lets through, a non-finite raw score (NaN or Inf
// in Q or K), a NaN or +inf bias or a non-finite ALiBi term sets bad[r]. With
// add_bias (no softcap) the bias and ALiBi term are added here; otherwise
// AddBiasToUnblocked adds them after the cap. Scalar: these inputs are per
// (h, i, j).
inline void ApplyPairInputs(const FlashParams& p, const Item& it, int64_t k0, int64_t nk,
                            bool add_bias, const ScoreLayout& lay, float* HWY_RESTRICT s,
                            float* HWY_RESTRICT bad) {
  const float kInf = std::numeric_limits<float>::infinity();
  const int64_t kv_length = p.KvLength(it.b);
  for (int64_t r = 0; r < it.nh * it.nq; ++r) {
    const int64_t h = it.h0 + r / it.nq, i = it.q0 + r % it.nq;
    const KeyRange range = VisibleKeys(p.mask, i, kv_length);
    const int64_t diag = Diagonal(p.mask, i, kv_length);
    const float slope = p.alibi_slopes != nullptr ? p.AlibiSlope(h) : 0.0f;
    const float* bias = p.bias != nullptr ? p.bias + p.bias_view.Offset(it.b, h, i, k0) : nullptr;
    const int64_t bs = p.bias != nullptr ? p.bias_view.strides[3] : 0;
    const uint8_t* blocked =
        p.blocked != nullptr ? p.blocked + p.blocked_view.Offset(it.b, h, i, k0) : nullptr;
    const int64_t ms = p.blocked != nullptr ? p.blocked_view.strides[3] : 0;
    bool row_bad = false;
    for (int64_t j = 0; j < nk; ++j) {
      float& x = s[lay.At(j, r)];
      const float b = bias != nullptr ? bias[j * bs] : 0.0f;
      if ((blocked != nullptr && blocked[j * ms] != 0) || b == -kInf) {
        x = -kInf;
        continue;
      }
      const bool visible = k0 + j >= range.begin && k0 + j < range.end;
      const float alibi = p.alibi_scalar() ? AlibiTerm(slope, diag, k0 + j) : 0.0f;
      row_bad = row_bad || (visible && (!std::isfinite(x) || !(b < kInf) || !std::isfinite(alibi)));
      if (add_bias) x += b + alibi;
    }
    if (row_bad) bad[r] = 1.0f;
  }
}

// s += bias + ALiBi term on tile [k0, k0 + nk) where s is not -inf (blocked
// or masked): after soft-capping.
inline void AddBiasToUnblocked(const FlashParams& p, const Item& it, int64_t k0, int64_t nk,
                               const ScoreLayout& lay, float* HWY_RESTRICT s) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t kv_length = p.KvLength(it.b);
  for (int64_t r = 0; r < it.nh * it.nq; ++r) {
    const int64_t h = it.h0 + r / it.nq, i = it.q0 + r % it.nq;
    const float* bias = p.bias != nullptr ? p.bias + p.bias_view.Offset(it.b, h, i, k0) : nullptr;
    const int64_t bs = p.bias != nullptr ? p.bias_view.strides[3] : 0;
    const int64_t diag = Diagonal(p.mask, i, kv_length);
    const float slope = p.alibi_slopes != nullptr ? p.AlibiSlope(h) : 0.0f;
    for (int64_t j = 0; j < nk; ++j) {
      float& x = s[lay.At(j, r)];
      if (x == kNegInf) continue;
      const float b = bias != nullptr ? bias[j * bs] : 0.0f;
      x += p.alibi_scalar() ? b + AlibiTerm(slope, diag, k0 + j) : b;
    }
  }
}

// s += -slope |diag - j| (core/alibi.h) on tile [k0, k0 + nk) for every row
// of `it` when every term is finite (p.alibi_vector): blocked and masked
// scores stay -inf, so no check. Row-per-lane tiles (key_stride == rows'
// count, rows contiguous) run a vector over rows; packed decode tiles run
// the same arithmetic per element. diag - j is a difference of integers
// below 2^24 in f32, exact, as AlibiTerm's distance.
inline void AddAlibi(const FlashParams& p, const Item& it, int64_t k0, int64_t nk,
                     const ScoreLayout& lay, float* HWY_RESTRICT s, float* HWY_RESTRICT row_slope,
                     float* HWY_RESTRICT row_diag) {
  const int64_t kv_length = p.KvLength(it.b);
  const int64_t rows = it.nh * it.nq;
  for (int64_t r = 0; r < rows; ++r) {
    row_slope[r] = -p.AlibiSlope(it.h0 + r / it.nq);
    row_diag[r] = static_cast<float>(Diagonal(p.mask, it.q0 + r % it.nq, kv_length) - k0);
  }
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const bool rows_contiguous = lay.group_stride == 4;
  for (int64_t j = 0; j < nk; ++j) {
    const float jf = static_cast<float>(j);
    int64_t r = 0;
    if (rows_contiguous) {
      float* HWY_RESTRICT col = s + lay.At(j, 0);
      const auto vj = hn::Set(df, jf);
      for (; r + N <= rows; r += N) {
        const auto dist = hn::Abs(hn::Sub(hn::LoadU(df, row_diag + r), vj));
        hn::StoreU(hn::MulAdd(hn::LoadU(df, row_slope + r), dist, hn::LoadU(df, col + r)), df,
                   col + r);
      }
    }
    for (; r < rows; ++r) {
      float& x = s[lay.At(j, r)];
      x += row_slope[r] * std::fabs(row_diag[r] - jf);
    }
  }
}

// The keys j < nk with is_bad(j): their indices to bad_keys (returns how
// many), and every row that sees one (a score not -inf) flagged in bad.
template <class IsBad>
int64_t FlagValueRowsWhere(const IsBad& is_bad, int64_t nk, const float* HWY_RESTRICT s,
                           const ScoreLayout& lay, int64_t rows, float* HWY_RESTRICT bad,
                           int32_t* HWY_RESTRICT bad_keys) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  int64_t n = 0;
  for (int64_t j = 0; j < nk; ++j) {
    if (!is_bad(j)) continue;
    bad_keys[n++] = static_cast<int32_t>(j);
    for (int64_t r = 0; r < rows; ++r) {
      if (s[lay.At(j, r)] != kNegInf) bad[r] = 1.0f;
    }
  }
  return n;
}
// The V rows of tile keys j < nk that hold a NaN or Inf: their indices go to
// bad_keys (returns how many), and every real row that sees such a key (a
// score not -inf after masking) is flagged in bad. The caller leaves those
// keys out of P.V: 0 * NaN is NaN, and a row that does not see a key must
// not be changed by it (a key no row sees may hold anything: padding, or keys
// the dense mask blocks, found by `attnkit fuzz` with poison_blocked).
// Only tiles where some row may not see some key need this; on the others a
// non-finite V row reaches every row's accumulator, which the final check
// catches. v [nk, ldv] of T: a converted tile or V storage (dp values).
// row_at(j): V row j of the tile (rows need not be evenly spaced: paged).
template <typename T, class RowAt>
int64_t FlagNonFiniteValueRowsAt(const RowAt& row_at, int64_t nk, int64_t dp,
                                 const float* HWY_RESTRICT s, const ScoreLayout& lay, int64_t rows,
                                 float* HWY_RESTRICT bad, int32_t* HWY_RESTRICT bad_keys) {
  return FlagValueRowsWhere(
      [&](int64_t j) {
        return !AllFinite(static_cast<const T*>(row_at(j)), static_cast<size_t>(dp));
      },
      nk, s, lay, rows, bad, bad_keys);
}
// FlagNonFiniteValueRowsAt for bf16 V already packed as pairs along the
// keys (x86_dot::BF16PackValues' layout: pair row jp holds keys 2 jp and
// 2 jp + 1 as the low and high halves of each of its dvp 32-bit values),
// nk even (an odd nk would leave its last key unread: callers check): the
// pairs P.V reads next, where the V rows themselves are cold
// (FAST d 64 causal bf16 prefill, one thread, Zen 5: the diagonal tiles'
// scan of the stored rows took 0.4 of 26 ms). A bf16 value is NaN or Inf
// where its 8 exponent bits are all set.
inline int64_t FlagNonFiniteValuePairs(const uint32_t* HWY_RESTRICT pairs, size_t dvp, int64_t nk,
                                       const float* HWY_RESTRICT s, const ScoreLayout& lay,
                                       int64_t rows, float* HWY_RESTRICT bad,
                                       int32_t* HWY_RESTRICT bad_keys) {
  const hn::ScalableTag<uint32_t> du;
  const size_t N = hn::Lanes(du);
  const auto lo = hn::Set(du, 0x00007F80u);  // key 2 jp's exponent bits
  const auto hi = hn::Set(du, 0x7F800000u);  // key 2 jp + 1's
  bool bad_key[highway_plan::kMaxKeyTile] = {};
  bool any = false;
  for (int64_t jp = 0; jp < nk / 2; ++jp) {
    const uint32_t* HWY_RESTRICT row = pairs + jp * dvp;
    auto lo_all = hn::Zero(du), hi_all = hn::Zero(du);  // lanes with every exponent bit set
    size_t c = 0;
    for (; c + N <= dvp; c += N) {
      const auto x = hn::LoadU(du, row + c);
      lo_all = hn::Or(lo_all, hn::VecFromMask(du, hn::Eq(hn::And(x, lo), lo)));
      hi_all = hn::Or(hi_all, hn::VecFromMask(du, hn::Eq(hn::And(x, hi), hi)));
    }
    bool lo_bad = !hn::AllTrue(du, hn::Eq(lo_all, hn::Zero(du)));
    bool hi_bad = !hn::AllTrue(du, hn::Eq(hi_all, hn::Zero(du)));
    for (; c < dvp; ++c) {
      lo_bad = lo_bad || (row[c] & 0x00007F80u) == 0x00007F80u;
      hi_bad = hi_bad || (row[c] & 0x7F800000u) == 0x7F800000u;
    }
    bad_key[2 * jp] = lo_bad;
    bad_key[2 * jp + 1] = hi_bad;
    any = any || lo_bad || hi_bad;
  }
  if (!any) return 0;
  return FlagValueRowsWhere([&bad_key](int64_t j) { return bad_key[j]; }, nk, s, lay, rows, bad,
                            bad_keys);
}

template <typename T>
int64_t FlagNonFiniteValueRows(const T* HWY_RESTRICT v, size_t ldv, int64_t nk, int64_t dp,
                               const float* HWY_RESTRICT s, const ScoreLayout& lay, int64_t rows,
                               float* HWY_RESTRICT bad, int32_t* HWY_RESTRICT bad_keys) {
  return FlagNonFiniteValueRowsAt<T>([v, ldv](int64_t j) { return v + j * ldv; }, nk, dp, s, lay,
                                     rows, bad, bad_keys);
}

// Tile-relative visible key range [kb, ke) of every row; padded rows see all.
inline void RowKeyRanges(const FlashParams& p, const Tiling& t, const Item& it, int64_t k0,
                         int64_t nk, float* HWY_RESTRICT kb, float* HWY_RESTRICT ke) {
  const int64_t kv_length = p.KvLength(it.b);
  const int64_t rows = it.nh * it.nq;
  auto clamp = [nk](int64_t x) {
    return static_cast<float>(std::min<int64_t>(std::max<int64_t>(x, -1), nk + 1));
  };
  for (int64_t r = 0; r < rows; ++r) {
    const KeyRange range = VisibleKeys(p.mask, it.q0 + r % it.nq, kv_length);
    kb[r] = clamp(range.begin - k0);
    ke[r] = clamp(std::min(range.end, k0 + nk) - k0);
  }
  for (int64_t r = rows; r < t.rows_padded; ++r) {
    kb[r] = 0.0f;
    ke[r] = static_cast<float>(nk + 1);
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#endif  // toggle guard
