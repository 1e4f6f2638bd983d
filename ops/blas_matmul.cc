// The matmul that goes with the blas backend: one cblas_sgemm per call,
// Y = X W^T with W in [out, in] order passed as the transposed operand.
#include <cblas.h>

#include <algorithm>

#include "ops/matmul.h"

namespace attnkit {
namespace {

class BlasMatmulProvider : public MatmulProvider {
 public:
  std::string Name() const override { return "blas"; }
  void Linear(const float* x, int64_t ldx, const float* w, const float* bias, int64_t m, int64_t n,
              int64_t k, float* y, int64_t ldy) const override {
    if (m == 0 || n == 0) return;
    float beta = 0.0f;
    if (bias != nullptr) {  // Y starts as the bias in every row, then beta = 1 adds the product.
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t c = 0; c < n; ++c) y[r * ldy + c] = bias[c];
      }
      beta = 1.0f;
    }
    if (k == 0) {
      if (bias == nullptr) {
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t c = 0; c < n; ++c) y[r * ldy + c] = 0.0f;
        }
      }
      return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
                static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, x,
                static_cast<blasint>(ldx), w, static_cast<blasint>(k), beta, y,
                static_cast<blasint>(ldy));
  }
  // dX [M, K] (+)= dY [M, N] W [N, K]: both operands as stored.
  void LinearGradInput(const float* dy, int64_t ldy, const float* w, int64_t m, int64_t n,
                       int64_t k, float* dx, int64_t ldx, bool accumulate) const override {
    if (m == 0 || k == 0) return;
    if (n == 0) {
      if (!accumulate) {
        for (int64_t r = 0; r < m; ++r) std::fill(dx + r * ldx, dx + r * ldx + k, 0.0f);
      }
      return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(m),
                static_cast<blasint>(k), static_cast<blasint>(n), 1.0f, dy,
                static_cast<blasint>(ldy), w, static_cast<blasint>(k), accumulate ? 1.0f : 0.0f, dx,
                static_cast<blasint>(ldx));
  }
  // dW [N, K] += dY^T X: dY passed as the transposed operand.
  void LinearGradWeight(const float* dy, int64_t ldy, const float* x, int64_t ldx, int64_t m,
                        int64_t n, int64_t k, float* dw, float* dbias) const override {
    if (m == 0 || n == 0) return;
    if (k > 0) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<blasint>(n),
                  static_cast<blasint>(k), static_cast<blasint>(m), 1.0f, dy,
                  static_cast<blasint>(ldy), x, static_cast<blasint>(ldx), 1.0f, dw,
                  static_cast<blasint>(k));
    }
    if (dbias != nullptr) {
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t c = 0; c < n; ++c) dbias[c] += dy[r * ldy + c];
      }
    }
  }
};

}  // namespace

const MatmulProvider& BlasMatmul() {
  static const BlasMatmulProvider* provider = new BlasMatmulProvider();
  return *provider;
}

}  // namespace attnkit
