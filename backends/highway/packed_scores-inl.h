// Packed score tiles for direct decode items. A decode item has few query
// rows (the query heads of one KV head, at one or a few positions), so a
// score tile laid out row-per-lane ([keys, rows padded to Lanes]) spends most
// of every vector operation on padding: with GQA group 4 and 16 lanes, 12 of
// 16. Packed tiles group the rows by four (a row group) and put each key's
// four scores side by side: row group g's tile is [keys, 4] at
// s + g * group_stride, so one vector holds Lanes / 4 keys of it and the
// online softmax, masks and NaN checks touch a quarter of the lanes they did.
// Per-row state (m, l, alpha, bad) stays one float per row; a row group's
// four values are used as a vector repeating them in every 128-bit block
// (LoadDup128), which lines up with the packed lanes. Not on HWY_SCALAR (one
// lane holds no group). Included once per target (toggle guard).

#if defined(ATTNKIT_BACKENDS_HIGHWAY_PACKED_SCORES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_BACKENDS_HIGHWAY_PACKED_SCORES_INL_H_
#undef ATTNKIT_BACKENDS_HIGHWAY_PACKED_SCORES_INL_H_
#else
#define ATTNKIT_BACKENDS_HIGHWAY_PACKED_SCORES_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <limits>

#include "backends/highway/microkernels-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {

// Rows per row group: one 128-bit block of f32 lanes.
constexpr size_t kGroupRows = 4;

// Where score (key j, row r) of a tile lives: s[At(j, r)]. Row-per-lane
// tiles are {lds, 4}: j * lds + r. Packed tiles are {4, group_stride}.
struct ScoreLayout {
  int64_t key_stride;
  int64_t group_stride;
  int64_t At(int64_t j, int64_t r) const { return j * key_stride + (r / 4) * group_stride + r % 4; }
};

#if HWY_TARGET != HWY_SCALAR
constexpr bool kHavePackedScores = true;
static_assert(hn::MaxLanes(hn::Full128<float>()) == kGroupRows, "a row group is one block");

// Keys of one row group per vector.
HWY_INLINE size_t PackedKeysPerVec() { return hn::Lanes(DF()) / kGroupRows; }

// Folds the 128-bit blocks of v (max or sum) and returns the four results
// repeated in every block: lane i holds the fold over lanes i mod 4.
template <bool kMax, class D>
HWY_INLINE auto FoldBlocks(D d, hn::Vec<D> v) {
  if constexpr (hn::MaxLanes(D()) <= kGroupRows) {
    return v;
  } else {
    const hn::Half<D> dh;
    const auto lo = hn::LowerHalf(dh, v), hi = hn::UpperHalf(dh, v);
    return FoldBlocks<kMax>(dh, kMax ? hn::Max(lo, hi) : hn::Add(lo, hi));
  }
}
template <bool kMax>
HWY_INLINE VF FoldToGroup(VF v) {
  const DF df;
  HWY_ALIGN float four[kGroupRows];
  hn::Store(FoldBlocks<kMax>(df, v), hn::Full128<float>(), four);
  return hn::LoadDup128(df, four);
}
// The row group's four values at x, repeated in every block; and back.
HWY_INLINE VF LoadGroup(const float* HWY_RESTRICT x) { return hn::LoadDup128(DF(), x); }
template <class D>
HWY_INLINE auto FirstBlock(D d, hn::Vec<D> v) {
  if constexpr (hn::MaxLanes(D()) <= kGroupRows) {
    return v;
  } else {
    const hn::Half<D> dh;
    return FirstBlock(dh, hn::LowerHalf(dh, v));
  }
}
HWY_INLINE void StoreGroup(VF v, float* HWY_RESTRICT x) {
  hn::StoreU(FirstBlock(DF(), v), hn::Full128<float>(), x);
}

// Lane i's key index within a vector: i / 4, as f32.
HWY_INLINE VF PackedKeyIndex() {
  const DF df;
  const hn::RebindToSigned<DF> di;
  return hn::ConvertTo(df, hn::ShiftRight<2>(hn::Iota(di, 0)));
}

// Packed tile sg [keys4, 4] (keys4 a multiple of PackedKeysPerVec): scores of
// keys outside [kb[r], ke[r]) become -inf, and with `bad` the visible ones
// that are not finite flag their row. kb, ke, bad: the group's four rows.
HWY_INLINE void PackedMaskKeyRange(float* HWY_RESTRICT sg, size_t keys4,
                                   const float* HWY_RESTRICT kb, const float* HWY_RESTRICT ke,
                                   float* HWY_RESTRICT bad) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const VF neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  const VF step = hn::Set(df, static_cast<float>(PackedKeysPerVec()));
  const VF b = LoadGroup(kb), e = LoadGroup(ke);
  VF j = PackedKeyIndex();
  VF flags = hn::Zero(df);
  for (size_t i = 0; i < keys4 * kGroupRows; i += N, j = hn::Add(j, step)) {
    const auto visible = hn::And(hn::Ge(j, b), hn::Lt(j, e));
    const VF x = hn::Load(df, sg + i);
    if (bad != nullptr) flags = FlagIfNonFinite(df, flags, hn::IfThenElseZero(visible, x));
    hn::Store(hn::IfThenElse(visible, x, neg_inf), df, sg + i);
  }
  if (bad != nullptr) StoreGroup(hn::Max(LoadGroup(bad), FoldToGroup<true>(flags)), bad);
}

// Flags the group's rows (bad) that hold a non-finite score in sg [keys4, 4]:
// a tile whose every pair is visible.
HWY_INLINE void PackedFlagNonFinite(const float* HWY_RESTRICT sg, size_t keys4,
                                    float* HWY_RESTRICT bad) {
  const DF df;
  const size_t N = hn::Lanes(df);
  VF flags = hn::Zero(df);
  for (size_t i = 0; i < keys4 * kGroupRows; i += N) {
    flags = FlagIfNonFinite(df, flags, hn::Load(df, sg + i));
  }
  StoreGroup(hn::Max(LoadGroup(bad), FoldToGroup<true>(flags)), bad);
}

// sg [keys4, 4]: each key's four scores times scales[j]: int8 K scales on
// integer dot products, or V scales on probabilities. keep_zero as in
// ScaleKeyColumns. Each vector's keys' scales are spread over their lanes by
// a lane shuffle. Lanes of keys past the tile's may turn NaN or +inf (-inf
// times a zero or negative scale): the mask sets them to -inf again for
// real rows, and a padded row's lane at the tile's end (RowKeyRanges'
// ke = nk + 1) gives probability 0 (ExpNonPositive takes NaN to 0); rows
// past the real ones are never written out. scales must be readable to
// index keys4 - keys per vector + Lanes: the caller's tile-sized array, or
// the scale tensor itself where TileRowScales (tile_loads-inl.h) found that
// much of it past the tile.
HWY_INLINE void PackedScale(float* HWY_RESTRICT sg, size_t keys4, const float* HWY_RESTRICT scales,
                            bool keep_zero) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const size_t N = hn::Lanes(df), kpv = PackedKeysPerVec();
  const auto spread = hn::IndicesFromVec(df, hn::ShiftRight<2>(hn::Iota(di, 0)));
  const VF zero = hn::Zero(df);
  for (size_t i = 0, v = 0; i < keys4 * kGroupRows; i += N, v += kpv) {
    const VF x = hn::Load(df, sg + i);
    const VF y = hn::Mul(x, hn::TableLookupLanes(hn::LoadU(df, scales + v), spread));
    hn::Store(keep_zero ? hn::IfThenElse(hn::Eq(x, zero), zero, y) : y, df, sg + i);
  }
}

// OnlineSoftmaxUpdate on a packed tile sg [keys4, 4]; m, l, alpha are the
// group's four rows. The same arithmetic per row (max, exp relative to the
// running max, l' = alpha * l + sum), summed over keys in a different order.
HWY_INLINE void PackedSoftmaxUpdate(float* HWY_RESTRICT sg, size_t keys4, float* HWY_RESTRICT m,
                                    float* HWY_RESTRICT l, float* HWY_RESTRICT alpha) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t n = keys4 * kGroupRows;
  const VF neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  VF tile_max = neg_inf;
  for (size_t i = 0; i < n; i += N) tile_max = hn::Max(tile_max, hn::Load(df, sg + i));
  const VF m_old = LoadGroup(m);
  const VF m_new = hn::Max(m_old, FoldToGroup<true>(tile_max));
  const VF m_use = hn::IfThenZeroElse(hn::Eq(m_new, neg_inf), m_new);
  VF sum0 = hn::Zero(df), sum1 = hn::Zero(df);
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const VF p0 = ExpNonPositive(df, hn::Sub(hn::Load(df, sg + i), m_use));
    const VF p1 = ExpNonPositive(df, hn::Sub(hn::Load(df, sg + i + N), m_use));
    hn::Store(p0, df, sg + i);
    hn::Store(p1, df, sg + i + N);
    sum0 = hn::Add(sum0, p0);
    sum1 = hn::Add(sum1, p1);
  }
  if (i < n) {
    const VF p0 = ExpNonPositive(df, hn::Sub(hn::Load(df, sg + i), m_use));
    hn::Store(p0, df, sg + i);
    sum0 = hn::Add(sum0, p0);
  }
  const VF a = ExpNonPositive(df, hn::Sub(m_old, m_use));
  StoreGroup(m_new, m);
  StoreGroup(hn::MulAdd(a, LoadGroup(l), FoldToGroup<false>(hn::Add(sum0, sum1))), l);
  StoreGroup(a, alpha);
}
#else
constexpr bool kHavePackedScores = false;
#endif

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#endif  // toggle guard
