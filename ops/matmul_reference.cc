// The scalar matmul that goes with the reference backend: plain loops, fp64
// accumulation, four output columns per pass so each X element is loaded once
// for four products.
#include "ops/matmul.h"

namespace attnkit {
namespace {

class ReferenceMatmulProvider : public MatmulProvider {
 public:
  std::string Name() const override { return "reference"; }
  void Linear(const float* x, int64_t ldx, const float* w, const float* bias, int64_t m, int64_t n,
              int64_t k, float* y, int64_t ldy) const override {
    for (int64_t r = 0; r < m; ++r) {
      const float* xr = x + r * ldx;
      int64_t c = 0;
      for (; c + 4 <= n; c += 4) {
        const float *w0 = w + c * k, *w1 = w0 + k, *w2 = w1 + k, *w3 = w2 + k;
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (int64_t i = 0; i < k; ++i) {
          const double xi = xr[i];
          s0 += xi * w0[i];
          s1 += xi * w1[i];
          s2 += xi * w2[i];
          s3 += xi * w3[i];
        }
        const double s[4] = {s0, s1, s2, s3};
        for (int j = 0; j < 4; ++j) {
          y[r * ldy + c + j] = static_cast<float>(s[j] + (bias ? bias[c + j] : 0.0));
        }
      }
      for (; c < n; ++c) {
        double s = 0;
        for (int64_t i = 0; i < k; ++i) s += double(xr[i]) * w[c * k + i];
        y[r * ldy + c] = static_cast<float>(s + (bias ? bias[c] : 0.0));
      }
    }
  }
  // dX[r, i] (+)= sum_c dY[r, c] W[c, i], summed in fp64.
  void LinearGradInput(const float* dy, int64_t ldy, const float* w, int64_t m, int64_t n,
                       int64_t k, float* dx, int64_t ldx, bool accumulate) const override {
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t i = 0; i < k; ++i) {
        double s = accumulate ? dx[r * ldx + i] : 0.0;
        for (int64_t c = 0; c < n; ++c) s += double(dy[r * ldy + c]) * w[c * k + i];
        dx[r * ldx + i] = static_cast<float>(s);
      }
    }
  }
  // dW[c, i] += sum_r dY[r, c] X[r, i] and dbias[c] += sum_r dY[r, c], in fp64.
  void LinearGradWeight(const float* dy, int64_t ldy, const float* x, int64_t ldx, int64_t m,
                        int64_t n, int64_t k, float* dw, float* dbias) const override {
    for (int64_t c = 0; c < n; ++c) {
      for (int64_t i = 0; i < k; ++i) {
        double s = dw[c * k + i];
        for (int64_t r = 0; r < m; ++r) s += double(dy[r * ldy + c]) * x[r * ldx + i];
        dw[c * k + i] = static_cast<float>(s);
      }
      if (dbias != nullptr) {
        double s = dbias[c];
        for (int64_t r = 0; r < m; ++r) s += dy[r * ldy + c];
        dbias[c] = static_cast<float>(s);
      }
    }
  }
};

}  // namespace

const MatmulProvider& ReferenceMatmul() {
  static const ReferenceMatmulProvider* provider = new ReferenceMatmulProvider();
  return *provider;
}

}  // namespace attnkit
