// Compiles hwy_matmul-inl.h once per target and dispatches to the best one
// the CPU supports; also the "highway" MatmulProvider.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/hwy_matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "ops/hwy_matmul-inl.h"

#if HWY_ONCE
#include "ops/hwy_matmul.h"
#include "ops/matmul.h"

namespace attnkit {

HWY_EXPORT(Linear);
HWY_EXPORT(LinearGradInput);
HWY_EXPORT(LinearGradWeight);

void HwyLinear(const float* x, int64_t ldx, const float* w, const float* bias, int64_t m, int64_t n,
               int64_t k, float* y, int64_t ldy) {
  HWY_DYNAMIC_DISPATCH(Linear)(x, ldx, w, bias, m, n, k, y, ldy);
}

namespace {

class HighwayMatmulProvider : public MatmulProvider {
 public:
  std::string Name() const override { return "highway"; }
  void Linear(const float* x, int64_t ldx, const float* w, const float* bias, int64_t m, int64_t n,
              int64_t k, float* y, int64_t ldy) const override {
    HwyLinear(x, ldx, w, bias, m, n, k, y, ldy);
  }
  void LinearGradInput(const float* dy, int64_t ldy, const float* w, int64_t m, int64_t n,
                       int64_t k, float* dx, int64_t ldx, bool accumulate) const override {
    HWY_DYNAMIC_DISPATCH(LinearGradInput)(dy, ldy, w, m, n, k, dx, ldx, accumulate);
  }
  void LinearGradWeight(const float* dy, int64_t ldy, const float* x, int64_t ldx, int64_t m,
                        int64_t n, int64_t k, float* dw, float* dbias) const override {
    HWY_DYNAMIC_DISPATCH(LinearGradWeight)(dy, ldy, x, ldx, m, n, k, dw, dbias);
  }
};

}  // namespace

const MatmulProvider& HighwayMatmul() {
  static const HighwayMatmulProvider* provider = new HighwayMatmulProvider();
  return *provider;
}

}  // namespace attnkit
#endif  // HWY_ONCE
