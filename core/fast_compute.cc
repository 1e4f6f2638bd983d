#include "core/fast_compute.h"

#include <cmath>

#include "core/quantize.h"

namespace attnkit {

bool FastRoundsQuery(const AttentionProblem& p) { return p.fast() && p.kv_dtype != DType::kF32; }

float RoundQueryValue(float x, DType kv_dtype) {
  switch (kv_dtype) {
    case DType::kBF16:
      return F32FromBF16(BF16FromF32(x));
    case DType::kF16:
      return F32FromF16(F16FromF32(x));
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return F32FromBF16(BF16FromF32(x));  // bf16 holds every fp8 value
    default:
      return x;
  }
}

float QuantizeQueryRow(const float* q, int64_t d, int8_t* out) { return QuantizeRowI8(q, d, out); }

double FastWeightRoundoff(const AttentionProblem& p) {
  if (!p.fast()) return 0.0;
  switch (p.kv_dtype) {
    case DType::kBF16:
    case DType::kF16:
      return DTypeEpsilon(p.kv_dtype) / 2;
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return DTypeEpsilon(DType::kBF16) / 2;  // P rounded to bf16, as Q is
    case DType::kI8:
      return 0x1p-22;
    default:
      return 0.0;
  }
}

bool FastQuantizesWeights(const AttentionProblem& p) {
  return p.fast() && p.kv_dtype == DType::kI8;
}

bool FastRoundsGradOperands(const AttentionProblem& p) {
  return p.fast() && p.dtype == DType::kBF16 && p.kv_dtype == DType::kBF16;
}

uint16_t RoundGradOperand(float x) {
  if (std::fabs(x) < kFastGradFlush) return std::signbit(x) ? 0x8000 : 0;
  return BF16FromF32(x);
}

bool MayFlushBF16Products(const AttentionProblem& p) {
  return (p.kv_dtype == DType::kBF16 && (p.dtype == DType::kBF16 || p.fast())) ||
         (IsFp8(p.kv_dtype) && p.fast());
}

}  // namespace attnkit
