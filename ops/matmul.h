// The matrix multiply behind the layer's projections, chosen with the
// attention backend so that one layer runs one kind of code end to end.
//
// Every provider computes the product of an nn.Linear:
//   Y[m, n] = sum_k X[m, k] * W[n, k] + bias[n]
// with X [M, K] (row stride ldx), W [N, K] contiguous (PyTorch's [out, in]
// orientation) and Y [M, N] (row stride ldy). Both operands are read along k,
// so W never needs a transpose.
#ifndef ATTNKIT_OPS_MATMUL_H_
#define ATTNKIT_OPS_MATMUL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attnkit {

class MatmulProvider {
 public:
  virtual ~MatmulProvider() = default;
  virtual std::string Name() const = 0;
  // Y = X W^T (+ bias); `bias` may be null. Y must not alias X or W.
  virtual void Linear(const float* x, int64_t ldx, const float* w, const float* bias, int64_t m,
                      int64_t n, int64_t k, float* y, int64_t ldy) const = 0;

  // Linear's backward pass, for dY [M, N] (row stride ldy), W [N, K] contiguous.
  // dX [M, K] (row stride ldx) = dY W, added to dX when `accumulate`.
  virtual void LinearGradInput(const float* dy, int64_t ldy, const float* w, int64_t m, int64_t n,
                               int64_t k, float* dx, int64_t ldx, bool accumulate) const;
  // dW [N, K] += dY^T X for X [M, K] (row stride ldx); dbias [N] += the column
  // sums of dY when dbias is not null. Always accumulates (a gradient over
  // several calls). The defaults (matmul.cc) are portable loops with f32
  // accumulation, written as row updates the compiler vectorises; blas
  // overrides both with sgemm, reference with fp64 accumulation.
  virtual void LinearGradWeight(const float* dy, int64_t ldy, const float* x, int64_t ldx,
                                int64_t m, int64_t n, int64_t k, float* dw, float* dbias) const;
};

// Providers by name: "reference" (scalar, fp64 accumulation), "highway"
// (SIMD, dynamic dispatch), "blas" (OpenBLAS cblas_sgemm).
absl::StatusOr<const MatmulProvider*> FindMatmul(absl::string_view name);
std::vector<std::string> MatmulNames();

// The provider that goes with the attention backend `backend_name`: the one
// of the same name ("reference-plugin" is the reference built as a plugin),
// else the documented default kDefaultMatmul, the portable SIMD one, which
// runs on every CPU at its best target.
constexpr char kDefaultMatmul[] = "highway";
const MatmulProvider& MatmulForBackend(absl::string_view backend_name);

// The providers themselves (matmul_reference.cc, hwy_matmul.cc, blas_matmul.cc).
const MatmulProvider& ReferenceMatmul();
const MatmulProvider& HighwayMatmul();
const MatmulProvider& BlasMatmul();

}  // namespace attnkit

#endif  // ATTNKIT_OPS_MATMUL_H_
