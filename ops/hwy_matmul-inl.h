// Per-target Highway code for hwy_matmul.cc; included once per target.
#if defined(ATTNKIT_OPS_HWY_MATMUL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_OPS_HWY_MATMUL_INL_H_
#undef ATTNKIT_OPS_HWY_MATMUL_INL_H_
#else
#define ATTNKIT_OPS_HWY_MATMUL_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Keys per pass: a 4-row X panel and the W rows of one column block stay in
// L1/L2 while every tile of the block reads them.
constexpr int64_t kKBlock = 512;
constexpr int64_t kNBlock = 48;  // W rows per column block (a multiple of kNR)
constexpr int kMR = 4;           // X rows per register tile
constexpr int kNR = 3;           // W rows per register tile: 12 accumulators fit AVX2's 16

// Y[r, c] (+)= X[r, 0:kc] . W[c, 0:kc] for an MR x NR tile: vector products
// over whole vectors, lanes summed, then the kc % lanes tail in scalar (never
// reading past a row).
template <int MR, int NR>
HWY_INLINE void DotTile(const float* HWY_RESTRICT x, int64_t ldx, const float* HWY_RESTRICT w,
                        int64_t ldw, int64_t kc, bool accumulate, float* HWY_RESTRICT y,
                        int64_t ldy) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  V acc[MR][NR];
  for (int r = 0; r < MR; ++r) {
    for (int c = 0; c < NR; ++c) acc[r][c] = hn::Zero(df);
  }
  int64_t i = 0;
  for (; i + lanes <= kc; i += lanes) {
    V wv[NR];
    for (int c = 0; c < NR; ++c) wv[c] = hn::LoadU(df, w + c * ldw + i);
    for (int r = 0; r < MR; ++r) {
      const V xv = hn::LoadU(df, x + r * ldx + i);
      for (int c = 0; c < NR; ++c) acc[r][c] = hn::MulAdd(xv, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int c = 0; c < NR; ++c) {
      float s = hn::GetLane(hn::SumOfLanes(df, acc[r][c]));
      for (int64_t t = i; t < kc; ++t) s += x[r * ldx + t] * w[c * ldw + t];
      float* out = y + r * ldy + c;
      *out = accumulate ? *out + s : s;
    }
  }
}

// The rows [m0, m0 + MR) against W rows [n0, n1).
template <int MR>
HWY_INLINE void RowPanel(const float* HWY_RESTRICT x, int64_t ldx, const float* HWY_RESTRICT w,
                         int64_t ldw, int64_t n0, int64_t n1, int64_t kc, bool accumulate,
                         float* HWY_RESTRICT y, int64_t ldy) {
  int64_t c = n0;
  for (; c + kNR <= n1; c += kNR) {
    DotTile<MR, kNR>(x, ldx, w + c * ldw, ldw, kc, accumulate, y + c, ldy);
  }
  for (; c < n1; ++c) DotTile<MR, 1>(x, ldx, w + c * ldw, ldw, kc, accumulate, y + c, ldy);
}

// inline: the tests compile this file per target too.
inline void Linear(const float* HWY_RESTRICT x, int64_t ldx, const float* HWY_RESTRICT w,
                   const float* HWY_RESTRICT bias, int64_t m, int64_t n, int64_t k,
                   float* HWY_RESTRICT y, int64_t ldy) {
  if (k == 0) {
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < n; ++c) y[r * ldy + c] = 0.0f;
    }
  }
  for (int64_t k0 = 0; k0 < k; k0 += kKBlock) {
    const int64_t kc = std::min(kKBlock, k - k0);
    const bool accumulate = k0 > 0;
    for (int64_t n0 = 0; n0 < n; n0 += kNBlock) {
      const int64_t n1 = std::min(n, n0 + kNBlock);
      int64_t r = 0;
      for (; r + kMR <= m; r += kMR) {
        RowPanel<kMR>(x + r * ldx + k0, ldx, w + k0, k, n0, n1, kc, accumulate, y + r * ldy, ldy);
      }
      for (; r < m; ++r) {
        RowPanel<1>(x + r * ldx + k0, ldx, w + k0, k, n0, n1, kc, accumulate, y + r * ldy, ldy);
      }
    }
  }
  if (bias != nullptr) {
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < n; ++c) y[r * ldy + c] += bias[c];
    }
  }
}

// dX [M, K] (+)= dY [M, N] W [N, K]: per row of dX, kVecs vectors of K stay
// in registers while the N rows of W stream past; the K % lanes tail in
// scalar.
inline void LinearGradInput(const float* HWY_RESTRICT dy, int64_t ldy, const float* HWY_RESTRICT w,
                            int64_t m, int64_t n, int64_t k, float* HWY_RESTRICT dx, int64_t ldx,
                            bool accumulate) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  constexpr int kVecs = 4;
  for (int64_t r = 0; r < m; ++r) {
    const float* g = dy + r * ldy;
    float* out = dx + r * ldx;
    int64_t i = 0;
    for (; i + kVecs * lanes <= k; i += kVecs * lanes) {
      V acc[kVecs];
      for (int j = 0; j < kVecs; ++j) {
        acc[j] = accumulate ? hn::LoadU(df, out + i + j * lanes) : hn::Zero(df);
      }
      for (int64_t c = 0; c < n; ++c) {
        const V a = hn::Set(df, g[c]);
        const float* wc = w + c * k + i;
        for (int j = 0; j < kVecs; ++j)
          acc[j] = hn::MulAdd(a, hn::LoadU(df, wc + j * lanes), acc[j]);
      }
      for (int j = 0; j < kVecs; ++j) hn::StoreU(acc[j], df, out + i + j * lanes);
    }
    for (; i + lanes <= k; i += lanes) {
      V acc = accumulate ? hn::LoadU(df, out + i) : hn::Zero(df);
      for (int64_t c = 0; c < n; ++c)
        acc = hn::MulAdd(hn::Set(df, g[c]), hn::LoadU(df, w + c * k + i), acc);
      hn::StoreU(acc, df, out + i);
    }
    for (; i < k; ++i) {
      float s = accumulate ? out[i] : 0.0f;
      for (int64_t c = 0; c < n; ++c) s += g[c] * w[c * k + i];
      out[i] = s;
    }
  }
}

// dW [N, K] += dY^T [N, M] X [M, K] (and dbias [N] += column sums of dY):
// kRows rows of dW share each vector load of X; the K % lanes tail in scalar.
inline void LinearGradWeight(const float* HWY_RESTRICT dy, int64_t ldy, const float* HWY_RESTRICT x,
                             int64_t ldx, int64_t m, int64_t n, int64_t k, float* HWY_RESTRICT dw,
                             float* HWY_RESTRICT dbias) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  constexpr int kRows = 4;
  int64_t c = 0;
  const auto rows = [&](auto rows_tag) {
    constexpr int R = decltype(rows_tag)::value;
    int64_t i = 0;
    for (; i + lanes <= k; i += lanes) {
      V acc[R];
      for (int j = 0; j < R; ++j) acc[j] = hn::LoadU(df, dw + (c + j) * k + i);
      for (int64_t r = 0; r < m; ++r) {
        const V xv = hn::LoadU(df, x + r * ldx + i);
        const float* g = dy + r * ldy + c;
        for (int j = 0; j < R; ++j) acc[j] = hn::MulAdd(hn::Set(df, g[j]), xv, acc[j]);
      }
      for (int j = 0; j < R; ++j) hn::StoreU(acc[j], df, dw + (c + j) * k + i);
    }
    for (; i < k; ++i) {
      for (int j = 0; j < R; ++j) {
        float s = dw[(c + j) * k + i];
        for (int64_t r = 0; r < m; ++r) s += dy[r * ldy + c + j] * x[r * ldx + i];
        dw[(c + j) * k + i] = s;
      }
    }
  };
  for (; c + kRows <= n; c += kRows) rows(std::integral_constant<int, kRows>());
  for (; c < n; ++c) rows(std::integral_constant<int, 1>());
  if (dbias != nullptr) {
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j = 0; j < n; ++j) dbias[j] += dy[r * ldy + j];
    }
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#endif  // ATTNKIT_OPS_HWY_MATMUL_INL_H_
