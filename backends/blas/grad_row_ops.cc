// Compiles grad_row_ops-inl.h once per Highway target and dispatches at run
// time.
#include "backends/blas/grad_row_ops.h"

// foreach_target.h must come before the per-target header: keep this order.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/blas/grad_row_ops-inl.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "backends/blas/grad_row_ops-inl.h"
// clang-format on

#if HWY_ONCE
namespace attnkit {
namespace blas {

HWY_EXPORT(SoftmaxGradRowT);
HWY_EXPORT(SoftcapDerivativeRowT);
HWY_EXPORT(SoftcapGradRowT);

void SoftmaxGradRow(const float* p, float* dp, int64_t n, float row_d) {
  HWY_DYNAMIC_DISPATCH(SoftmaxGradRowT)(p, dp, n, row_d);
}
void SoftcapDerivativeRow(const float* raw, float* dcap, int64_t n, float cap) {
  HWY_DYNAMIC_DISPATCH(SoftcapDerivativeRowT)(raw, dcap, n, cap);
}
void SoftcapGradRow(float* ds, const float* dcap, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SoftcapGradRowT)(ds, dcap, n);
}

}  // namespace blas
}  // namespace attnkit
#endif  // HWY_ONCE
