// The roundings ComputeMode::kFast permits (config.proto compute), written
// once as functions of the stored values alone: the kernels that round Q
// call them, and the fp64 reference (oracle/reference.cc) consumes exactly
// the rounded Q they give, so the oracle stays tight. The rounding of P is
// not a function of the inputs alone; it enters the oracle's bound as
// derived terms (oracle/compare.h): the unit roundoff FastWeightRoundoff
// and, for int8 V's u8 weights (FastQuantizesWeights), a per-key grid
// term (RowErrorTerms::weight_grid).
#ifndef ATTNKIT_CORE_FAST_COMPUTE_H_
#define ATTNKIT_CORE_FAST_COMPUTE_H_

#include <cstdint>

#include "core/dtype.h"
#include "core/problem.h"

namespace attnkit {

// Whether p's Q rows are rounded before Q.K: FAST, with K stored as bf16,
// f16, int8 or fp8 (f32 K: nothing to round to).
//
// fp8 K/V (E4M3, E5M2) rounds Q, and may round P, to bf16 rather than to
// the 8-bit format: bf16 holds every fp8 value exactly (E4M3's subnormals
// and E5M2's range included), so an fp8 code widened to bf16 meets Q and P
// in bf16 dot products (x86 vdpbf16ps, tensor cores) with exact products,
// while 3 mantissa bits would cost Q and P far more than K's own rounding.
bool FastRoundsQuery(const AttentionProblem& p);

// One Q value as FAST multiplies it with a bf16, f16 or fp8 K: rounded to
// K's 16-bit type (bf16 for fp8), to nearest even (values beyond the type's
// range become +-Inf, and the row then reads an Inf: NaN, reference.h's
// rule). Other types: x.
float RoundQueryValue(float x, DType kv_dtype);

// One Q row as FAST multiplies it with an int8 K: the symmetric int8 values
// out[c] = round(q[c] / scale), scale = max_c |q[c]| / 127 (QuantizeRowI8,
// core/quantize.h, the same rule as K and V rows). Returns the scale: 0 for
// an all-zero row, NaN for a row holding a NaN or Inf.
float QuantizeQueryRow(const float* q, int64_t d, int8_t* out);

// The relative error FAST may add to each softmax weight by rounding P to
// V's storage type before P.V: the type's unit roundoff (bf16 2^-8, f16
// 2^-11) under FAST with 16-bit V, bf16's with fp8 V; with int8 V, 2^-22
// (4 u, for the f32
// roundings around the integer sum: the weight times the inverse scale,
// the sum's conversion and its product with the scale;
// FastQuantizesWeights); else 0 (f32 V has nothing to round to).
double FastWeightRoundoff(const AttentionProblem& p);

// Whether FAST may quantize the weights for an int8 V, rounding P to V's
// 8 bits: P times V's row scales (w >= 0), to u8 with one scale per query
// row and block of at most kFastWeightBlock consecutive keys (q = round(w *
// kFastWeightSteps / max w) to nearest even), then an exact integer P.V
// (x86 vpdpbusd: u8 weights times s8 V). Each weight then errs by at most
// its block's largest w / (2 kFastWeightSteps), an absolute error the
// oracle bounds per key (oracle/compare.h): about 2^-9 of the block's
// largest weight, the class of bf16's rounding of P. FAST with int8 V.
bool FastQuantizesWeights(const AttentionProblem& p);
inline constexpr int64_t kFastWeightBlock = 64;
inline constexpr int64_t kFastWeightSteps = 255;

// Whether a backend may multiply Q.K with bf16 dot-product instructions
// (x86 vdpbf16ps), which treat subnormal inputs and products as zero: K is
// bf16 and Q is bf16 too, or FAST rounds Q to bf16 (bf16 or fp8 K). The
// oracle then grants the flushed products (at most 2^-126 times the largest
// operand each; for fp8, whose codes meet Q before the row scale, that
// times the scale: oracle/compare.cc).
bool MayFlushBF16Products(const AttentionProblem& p);

// Whether FAST lets the backward pass round the two operands it computes,
// the weights P and the score gradients dX (dS, times softcap's derivative),
// to bf16 before the three products that take them: dV = P^T dO, dQ = scale
// dX K and dK = scale dX^T Q, which then multiply bf16 by bf16 like S = Q
// K^T and dP = dO V^T. Each value is rounded to nearest even (RoundGradOperand),
// a relative error of at most 2^-8, and a magnitude below kFastGradFlush
// becomes 0, so that every product of two nonzero operands (bf16 Q, K and dO
// hold no magnitude below it either, or the product runs in f32) is a normal
// f32 that dot-product instructions which flush subnormals (vdpbf16ps) keep.
// The oracle (oracle/compare_grad.cc) adds both errors. FAST with Q, K and V
// (and so O and dO) all bf16; the forward's own FAST rounding of P reaches
// the backward through O (FastWeightRoundoff).
bool FastRoundsGradOperands(const AttentionProblem& p);
inline constexpr float kFastGradFlush = 0x1p-63f;

// One P or dX value as FAST's backward multiplies it (FastRoundsGradOperands):
// bf16 bits, to nearest even, magnitudes below kFastGradFlush to 0 (sign
// kept), NaN and Inf kept (NaN made quiet, as BF16FromF32).
uint16_t RoundGradOperand(float x);

}  // namespace attnkit

#endif  // ATTNKIT_CORE_FAST_COMPUTE_H_
