// Compiles row_ops-inl.h once per Highway target and dispatches at run time.
#include "backends/blas/row_ops.h"

// foreach_target.h must come before the per-target header: keep this order.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/blas/row_ops-inl.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "backends/blas/row_ops-inl.h"
// clang-format on

#if HWY_ONCE
namespace attnkit {
namespace blas {

HWY_EXPORT(SoftcapRowT);
HWY_EXPORT(RowMaxT);
HWY_EXPORT(RowMaxFiniteT);
HWY_EXPORT(ExpSubtractSumT);
HWY_EXPORT(ScaleRowT);
HWY_EXPORT(AddAlibiRowT);
HWY_EXPORT(AllFiniteT);
HWY_EXPORT(AllFinite16T);
HWY_EXPORT(WidenRowT);
HWY_EXPORT(DequantizeRowT);
HWY_EXPORT(ScaleIntRowT);
HWY_EXPORT(QuantizeWeightsRowU8T);
HWY_EXPORT(AccumulateIntRowT);
HWY_EXPORT(NarrowRowBF16T);
HWY_EXPORT(ScaleNarrowRowBF16T);
HWY_EXPORT(RoundGradOperandRowT);
HWY_EXPORT(NarrowExactBF16RowT);
HWY_EXPORT(ScaleNarrowRowF16T);
HWY_EXPORT(TargetT);

void SoftcapRow(float* s, int64_t n, float cap) { HWY_DYNAMIC_DISPATCH(SoftcapRowT)(s, n, cap); }
float RowMax(const float* s, int64_t n) { return HWY_DYNAMIC_DISPATCH(RowMaxT)(s, n); }
float RowMaxFinite(const float* s, int64_t n, bool* all_finite) {
  return HWY_DYNAMIC_DISPATCH(RowMaxFiniteT)(s, n, all_finite);
}
float ExpSubtractSum(float* s, int64_t n, float max) {
  return HWY_DYNAMIC_DISPATCH(ExpSubtractSumT)(s, n, max);
}
void ScaleRow(float* x, int64_t n, float f) { HWY_DYNAMIC_DISPATCH(ScaleRowT)(x, n, f); }
void AddAlibiRow(float* x, int64_t n, float slope, float diag) {
  HWY_DYNAMIC_DISPATCH(AddAlibiRowT)(x, n, slope, diag);
}
bool AllFinite(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(AllFiniteT)(x, n); }
bool AllFinite16(const uint16_t* x, int64_t n, DType type) {
  const uint16_t exponent = type == DType::kBF16 ? 0x7f80 : 0x7c00;
  return HWY_DYNAMIC_DISPATCH(AllFinite16T)(x, n, exponent);
}
void WidenRow(const void* src, DType type, int64_t n, float* dst) {
  HWY_DYNAMIC_DISPATCH(WidenRowT)(src, type, n, dst);
}
void DequantizeRow(const int8_t* src, int64_t n, float scale, float* dst) {
  HWY_DYNAMIC_DISPATCH(DequantizeRowT)(src, n, scale, dst);
}
void ScaleIntRow(const int32_t* sums, int64_t n, float row_factor, const float* col_factors,
                 float* out) {
  HWY_DYNAMIC_DISPATCH(ScaleIntRowT)(sums, n, row_factor, col_factors, out);
}
bool QuantizeWeightsRowU8(const float* p, const float* v_scale, int64_t kn, uint8_t* out,
                          int64_t block_stride, uint8_t* tail_out, float* back) {
  return HWY_DYNAMIC_DISPATCH(QuantizeWeightsRowU8T)(p, v_scale, kn, out, block_stride, tail_out,
                                                     back);
}
void AccumulateIntRow(const int32_t* sums, int64_t n, float f, float* o) {
  HWY_DYNAMIC_DISPATCH(AccumulateIntRowT)(sums, n, f, o);
}
void NarrowRow(const float* x, int64_t n, DType type, uint16_t* out) {
  if (type == DType::kBF16) {
    HWY_DYNAMIC_DISPATCH(NarrowRowBF16T)(x, n, out);
    return;
  }
  for (int64_t j = 0; j < n; ++j) out[j] = F16FromF32(x[j]);  // in order: read before written
}
void ScaleNarrowRow(const float* x, int64_t n, float f, DType type, uint16_t* out) {
  if (type == DType::kBF16) {
    HWY_DYNAMIC_DISPATCH(ScaleNarrowRowBF16T)(x, n, f, out);
    return;
  }
  HWY_DYNAMIC_DISPATCH(ScaleNarrowRowF16T)(x, n, f, out);
}
void RoundGradOperandRow(const float* x, int64_t n, uint16_t* out) {
  HWY_DYNAMIC_DISPATCH(RoundGradOperandRowT)(x, n, out);
}
bool NarrowExactBF16Row(const float* x, int64_t n, uint16_t* out) {
  return HWY_DYNAMIC_DISPATCH(NarrowExactBF16RowT)(x, n, out);
}
const char* RowOpsTarget() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(TargetT)()); }

}  // namespace blas
}  // namespace attnkit
#endif  // HWY_ONCE
