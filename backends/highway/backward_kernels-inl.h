// Per-target micro-kernels of the flash attention backward pass: one
// register-tiled matrix product that serves all five products of a
// (query tile, key block) step, and the row-wise softmax gradient. All
// arithmetic is fp32. Included once per Highway target (toggle guard).
//
// One step, with nq query rows r, nk keys j and head dim d (all row-major):
//   S  [nq, nk] = Q Kt           (Q pre-scaled, Kt = K transposed [d, nk])
//   dP [nq, nk] = dO Vt
//   P = exp(softcap(S) + bias - lse),  dX = P (dP - D) (1 - tanh^2)
//   dV [nk, d] += P^T dO,  dK [nk, d] += dX^T Q,  dQ [nq, d] += dX K
// Each is C[m, :] (+)= sum_k A(m, k) B[k, :] with B row-major (vectors along
// its columns) and A read one broadcast scalar at a time through two strides,
// so P and dX serve both as A (transposed, for dV and dK) and as A (for dQ)
// without a transposed copy.

#if defined(ATTNKIT_BACKENDS_HIGHWAY_BACKWARD_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_BACKENDS_HIGHWAY_BACKWARD_KERNELS_INL_H_
#undef ATTNKIT_BACKENDS_HIGHWAY_BACKWARD_KERNELS_INL_H_
#else
#define ATTNKIT_BACKENDS_HIGHWAY_BACKWARD_KERNELS_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <limits>

#include "backends/highway/microkernels-inl.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "platform/exp_nonpositive-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {

// Register tile of BroadcastMatMul: kGradTileM rows x kGradTileVecs vectors
// (16 accumulators with 32 registers, 8 with 16): per depth step kTileVecs
// loads and kGradTileM broadcasts feed kGradTileM x kTileVecs FMAs.
constexpr int kGradTileM = 4;
constexpr int kGradTileVecs = HWY_MAX_BYTES >= 64 ? 4 : 2;

// One register tile: C[m0 + m, c0 + v * N + l] for m < kM, v < kVecs.
template <int kM, int kVecs>
HWY_INLINE void BroadcastMatMulTile(const float* HWY_RESTRICT a, size_t a_m, size_t a_k,
                                    const float* HWY_RESTRICT b, size_t ldb, size_t depth,
                                    float* HWY_RESTRICT c, size_t ldc, bool accumulate) {
  const DF df;
  const size_t N = hn::Lanes(df);
  VF acc[kM][kVecs];
  HWY_UNROLL(8)
  for (int m = 0; m < kM; ++m) {
    HWY_UNROLL(8)
    for (int v = 0; v < kVecs; ++v) {
      acc[m][v] = accumulate ? hn::Load(df, c + m * ldc + v * N) : hn::Zero(df);
    }
  }
  const float* HWY_RESTRICT ak = a;
  const float* HWY_RESTRICT bk = b;
  for (size_t k = 0; k < depth; ++k, ak += a_k, bk += ldb) {
    VF bv[kVecs];
    HWY_UNROLL(8)
    for (int v = 0; v < kVecs; ++v) bv[v] = hn::Load(df, bk + v * N);
    HWY_UNROLL(8)
    for (int m = 0; m < kM; ++m) {
      const VF av = hn::Set(df, ak[m * a_m]);
      HWY_UNROLL(8)
      for (int v = 0; v < kVecs; ++v) acc[m][v] = hn::MulAdd(av, bv[v], acc[m][v]);
    }
  }
  HWY_UNROLL(8)
  for (int m = 0; m < kM; ++m) {
    HWY_UNROLL(8)
    for (int v = 0; v < kVecs; ++v) hn::Store(acc[m][v], df, c + m * ldc + v * N);
  }
}

// C[m, n] = (accumulate ? C[m, n] : 0) + sum_{k < depth} A(m, k) B[k, n]
// for m < rows (a multiple of kGradTileM), n < cols (a multiple of Lanes),
// where A(m, k) = a[m * a_m + k * a_k]. b [depth, ldb] and c [rows, ldc] are
// vector-aligned. Row tiles outer: each re-reads B (one operand of a step,
// <= 16 KiB) from L1.
HWY_INLINE void BroadcastMatMul(const float* HWY_RESTRICT a, size_t a_m, size_t a_k,
                                const float* HWY_RESTRICT b, size_t ldb, size_t depth, size_t rows,
                                size_t cols, float* HWY_RESTRICT c, size_t ldc, bool accumulate) {
  const size_t N = hn::Lanes(DF());
  const size_t vecs = cols / N;
  for (size_t m0 = 0; m0 < rows; m0 += kGradTileM) {
    const float* HWY_RESTRICT am = a + m0 * a_m;
    float* HWY_RESTRICT cm = c + m0 * ldc;
    size_t v0 = 0;
    for (; v0 + kGradTileVecs <= vecs; v0 += kGradTileVecs) {
      BroadcastMatMulTile<kGradTileM, kGradTileVecs>(am, a_m, a_k, b + v0 * N, ldb, depth,
                                                     cm + v0 * N, ldc, accumulate);
    }
    for (; v0 < vecs; ++v0) {
      BroadcastMatMulTile<kGradTileM, 1>(am, a_m, a_k, b + v0 * N, ldb, depth, cm + v0 * N, ldc,
                                         accumulate);
    }
  }
}

// exp(x) for x <= 0 including subnormal results: ExpNonPositive flushes
// below -87 (fine for the forward's normalised sums), but dBias = P (dP - D)
// is compared element by element down to the subnormal floor, so lanes in
// [-110, -87) are evaluated 32 ln 2 higher and scaled by 2^-32 (exact
// exponent shift, one rounding into the subnormal range).
template <class D, class V>
HWY_INLINE V ExpWithSubnormals(D d, V x) {
  const auto low = hn::Lt(x, hn::Set(d, -87.0f));
  const V shifted = hn::IfThenElse(low, hn::Add(x, hn::Set(d, 22.18070977791825f)), x);
  const V e = ExpNonPositive(d, shifted);
  return hn::IfThenElse(low, hn::Mul(e, hn::Set(d, 2.3283064365386963e-10f)), e);
}

// sech^2(u) = 1 - tanh^2(u), the soft-cap's derivative d(c tanh(x / c)) / dx
// at u = x / c, as 4 e / (1 + e)^2 with e = exp(-2 |u|). 1 - t * t from a
// rounded t = tanh(u) cancels once t rounds to within a few ulps of +-1
// (|u| above about 4): its error there is about ulp(1) / sech^2(u), 4 % of
// dK at softcap 1, scale 1.7 (issue 33). This form errs by a few ulps for
// every u; +-inf gives 0 and NaN stays NaN (a row that reads one).
template <class D, class V>
HWY_INLINE V SoftcapDerivative(D d, V u) {
  const V e = ExpWithSubnormals(d, hn::Mul(hn::Set(d, -2.0f), hn::Abs(u)));
  const V one_plus_e = hn::Add(hn::Set(d, 1.0f), e);
  const V sech2 = hn::Div(hn::Mul(hn::Set(d, 4.0f), e), hn::Mul(one_plus_e, one_plus_e));
  return hn::IfThenElse(hn::IsNaN(u), u, sech2);
}

// What SoftmaxGradRow needs of one query row.
struct GradRow {
  float lse;     // the forward's log-sum-exp (any value when nothing is visible)
  float dsum;    // D = dO . O
  float kb, ke;  // visible keys [kb, ke) of the block, block-relative
  // bias (or 0) plus the ALiBi term per key, -inf where the pair is blocked
  // (dense mask or a -inf bias), NaN where the ALiBi term is not finite
  // (a NaN row), [cols]; null: no per-pair inputs.
  const float* HWY_RESTRICT add;
};

// One row of a step, in place over cols (a multiple of Lanes) keys:
//   s = x (or c tanh(x / c) with softcap c > 0) + add,   x = S[j] on entry
//   P = exp(s - lse) on visible keys (NaN there when lse is NaN), 0
//       elsewhere (masked lanes are selected away, whatever lse, S or dP
//       hold there)
//   dS = P (dP - D);  dX = dS sech^2(x / c)  (dS without softcap); both 0
//       on masked lanes
// Leaves P in s and dX in dp; with ds != null also stores dS there (dbias).
HWY_INLINE void SoftmaxGradRow(float* HWY_RESTRICT s, float* HWY_RESTRICT dp, size_t cols,
                               const GradRow& row, float softcap, float* HWY_RESTRICT ds) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const VF lse = hn::Set(df, row.lse);
  const VF dsum = hn::Set(df, row.dsum);
  const VF kb = hn::Set(df, row.kb);
  const VF ke = hn::Set(df, row.ke);
  const VF cap = hn::Set(df, softcap);
  const VF inv_cap = hn::Set(df, softcap > 0.0f ? 1.0f / softcap : 0.0f);
  const VF one = hn::Set(df, 1.0f);
  const VF neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  const bool nan_row = std::isnan(row.lse);
  const VF nan = hn::Set(df, std::numeric_limits<float>::quiet_NaN());
  VF jj = hn::Iota(df, 0.0f);
  const VF step = hn::Set(df, static_cast<float>(N));
  for (size_t j = 0; j < cols; j += N, jj = hn::Add(jj, step)) {
    auto visible = hn::And(hn::Ge(jj, kb), hn::Lt(jj, ke));
    VF x = hn::Load(df, s + j);
    VF dcap = one;  // d(c tanh(x / c)) / dx
    if (softcap > 0.0f) {
      const VF u = hn::Mul(x, inv_cap);
      x = hn::Mul(cap, hn::Tanh(df, u));
      dcap = SoftcapDerivative(df, u);
    }
    if (row.add != nullptr) {
      const VF add = hn::Load(df, row.add + j);
      // Ne is an ordered compare on x86 (false for NaN): a NaN bias must
      // leave its pair visible (a NaN row), so test for -inf instead.
      visible = hn::AndNot(hn::Eq(add, neg_inf), visible);
      x = hn::Add(x, add);
    }
    // A NaN row (lse NaN: it read a NaN or Inf) has P = NaN wherever it sees
    // a key, as the definition has; the exp polynomial's clamps would not
    // keep a NaN.
    const VF e = nan_row ? nan : ExpWithSubnormals(df, hn::Sub(x, lse));
    const VF p = hn::IfThenElseZero(visible, e);
    // A masked lane's S or dP may be NaN (a K or V row the forward never
    // reads): 0 * NaN must not reach dS.
    VF dx = hn::IfThenElseZero(visible, hn::Mul(p, hn::Sub(hn::Load(df, dp + j), dsum)));
    if (ds != nullptr) hn::Store(dx, df, ds + j);
    if (softcap > 0.0f) dx = hn::IfThenElseZero(visible, hn::Mul(dx, dcap));
    hn::Store(p, df, s + j);
    hn::Store(dx, df, dp + j);
  }
}

// out[c] += x[c] for c < n (a multiple of Lanes).
HWY_INLINE void AddRow(const float* HWY_RESTRICT x, size_t n, float* HWY_RESTRICT out) {
  const DF df;
  const size_t N = hn::Lanes(df);
  for (size_t c = 0; c < n; c += N) {
    hn::Store(hn::Add(hn::Load(df, out + c), hn::Load(df, x + c)), df, out + c);
  }
}

// Dot product of x and y over n (a multiple of Lanes) f32 values.
HWY_INLINE float DotRow(const float* HWY_RESTRICT x, const float* HWY_RESTRICT y, size_t n) {
  const DF df;
  const size_t N = hn::Lanes(df);
  VF acc = hn::Zero(df);
  for (size_t c = 0; c < n; c += N) {
    acc = hn::MulAdd(hn::Load(df, x + c), hn::Load(df, y + c), acc);
  }
  return hn::GetLane(hn::SumOfLanes(df, acc));
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#endif  // toggle guard
