// The roundings ComputeMode::kFast permits (config.proto compute), written
// once as functions of the stored values alone: the kernels that round Q
// call them, and the fp64 reference (oracle/reference.cc) consumes exactly
// the rounded Q they give, so the oracle stays tight. The rounding of P is
// not a function of the inputs alone; it enters the oracle's bound as
// derived terms (oracle/compare.h): the unit roundoff FastWeightRoundoff
// and, for int8 V's int16 weights (FastQuantizesWeights), a per-key grid
// term (RowErrorTerms::weight_grid).
#ifndef ATTNKIT_CORE_FAST_COMPUTE_H_
#define ATTNKIT_CORE_FAST_COMPUTE_H_

#include <cstdint>

#include "core/dtype.h"
#include "core/problem.h"

namespace attnkit {

// Whether p's Q rows are rounded to K's storage type before Q.K: FAST, with
// K stored as bf16, f16 or int8 (f32 K: nothing to round to).
bool FastRoundsQuery(const AttentionProblem& p);

// One Q value as FAST multiplies it with a bf16 or f16 K: rounded to K's
// type, to nearest even (values beyond the type's range become +-Inf, and
// the row then reads an Inf: NaN, reference.h's rule). Other types: x.
float RoundQueryValue(float x, DType kv_dtype);

// One Q row as FAST multiplies it with an int8 K: the symmetric int8 values
// out[c] = round(q[c] / scale), scale = max_c |q[c]| / 127 (QuantizeRowI8,
// core/quantize.h, the same rule as K and V rows). Returns the scale: 0 for
// an all-zero row, NaN for a row holding a NaN or Inf.
float QuantizeQueryRow(const float* q, int64_t d, int8_t* out);

// The relative error FAST may add to each softmax weight by rounding P to
// V's storage type before P.V: the type's unit roundoff (bf16 2^-8, f16
// 2^-11) under FAST with 16-bit V; with int8 V, 2^-22 (4 u, for the f32
// roundings around the integer sum: the weight times the inverse scale,
// the sum's conversion and its product with the scale;
// FastQuantizesWeights); else 0 (f32 V has nothing to round to).
double FastWeightRoundoff(const AttentionProblem& p);

// Whether FAST may quantize the weights for an int8 V: P times V's row
// scales, to int16 with one scale per query row and block of at most
// kFastWeightBlock consecutive keys (q = round(w * 32767 / max |w|) to
// nearest even), then an exact integer P.V (x86 vpdpwssd). Each weight then
// errs by at most its block's largest |w| / 65534, an absolute error the
// oracle bounds per key (oracle/compare.h). FAST with int8 V.
bool FastQuantizesWeights(const AttentionProblem& p);
inline constexpr int64_t kFastWeightBlock = 64;

// Whether a backend may multiply Q.K with bf16 dot-product instructions
// (x86 vdpbf16ps), which treat subnormal inputs and products as zero: K is
// bf16 and Q is bf16 too, or FAST rounds Q to bf16. The oracle then grants
// the flushed products (at most 2^-126 times the largest operand each).
bool MayFlushBF16Products(const AttentionProblem& p);

}  // namespace attnkit

#endif  // ATTNKIT_CORE_FAST_COMPUTE_H_
