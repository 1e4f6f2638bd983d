// The Highway matmul: Y[m, n] = sum_k X[m, k] W[n, k] (+ bias[n]), fp32 with
// fp32 accumulation, dispatched once per call to the best compiled target.
// Plain C++ here; the per-target code is in hwy_matmul-inl.h.
#ifndef ATTNKIT_OPS_HWY_MATMUL_H_
#define ATTNKIT_OPS_HWY_MATMUL_H_

#include <cstdint>

namespace attnkit {

// X [M, K] row stride ldx; W [N, K] contiguous; Y [M, N] row stride ldy.
// Each output's summation order depends only on K, never on M or N, so a row
// projected alone (a decode step) equals the same row projected in a batch.
void HwyLinear(const float* x, int64_t ldx, const float* w, const float* bias, int64_t m, int64_t n,
               int64_t k, float* y, int64_t ldy);

}  // namespace attnkit

#endif  // ATTNKIT_OPS_HWY_MATMUL_H_
