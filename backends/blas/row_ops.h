// Vectorised per-row steps of the blocked softmax: soft-capping, the row
// maximum, exp(s - max) with its sum, and scaling; and widening 16-bit K/V
// rows to the f32 the GEMMs read, and dequantizing int8 ones. Plain C++ interface; the
// Highway code lives in row_ops-inl.h and is dispatched in row_ops.cc.
#ifndef ATTNKIT_BACKENDS_BLAS_ROW_OPS_H_
#define ATTNKIT_BACKENDS_BLAS_ROW_OPS_H_

#include <cstdint>

#include "core/dtype.h"

namespace attnkit {
namespace blas {

// s = cap * tanh(s / cap) in place, over s[0, n), leaving -inf (a blocked
// pair) as it is. cap > 0.
void SoftcapRow(float* s, int64_t n, float cap);

// x[j] += -slope |diag - j| over x[0, n) (core/alibi.h's term for keys
// measured from the row's first key; -inf stays -inf). Every term must be
// finite, and diag and diag - n exact in f32 (below 2^24 in magnitude).
void AddAlibiRow(float* x, int64_t n, float slope, float diag);

// max(s[0, n)); -inf when n == 0 or every entry is -inf.
float RowMax(const float* s, int64_t n);
// RowMax(s, n) and, in the same pass, *all_finite = AllFinite(s, n).
float RowMaxFinite(const float* s, int64_t n, bool* all_finite);

// s = exp(s - max) in place, exactly 0 where s is -inf; returns the sum.
// `max` must be finite and >= every entry.
float ExpSubtractSum(float* s, int64_t n, float max);

// True when x[0, n) holds no NaN and no Inf.
bool AllFinite(const float* x, int64_t n);
// True when the 16-bit values x[0, n) of `type` (kBF16 or kF16) hold no
// NaN and no Inf (all exponent bits set): a V row read as stored.
bool AllFinite16(const uint16_t* x, int64_t n, DType type);

// x *= f over x[0, n).
void ScaleRow(float* x, int64_t n, float f);

// dst[0, n) = the contiguous storage src[0, n) of `type` as f32, exactly.
void WidenRow(const void* src, DType type, int64_t n, float* dst);

// dst[0, n) = float(src[c]) * scale: one int8 K/V row dequantized with its
// f32 scale (core/quantize.h), one rounding per element, the same bits as
// the scalar product.
void DequantizeRow(const int8_t* src, int64_t n, float scale, float* dst);

// out[j] = float(sums[j]) * row_factor * col_factors[j] over [0, n): an
// int8 Q.K row's exact sums times the row's and each key's factor. out may
// be sums (in place: the same bytes).
void ScaleIntRow(const int32_t* sums, int64_t n, float row_factor, const float* col_factors,
                 float* out);

// FAST's u8 weights for one row of an int8 V's P.V (core/fast_compute.h
// FastQuantizesWeights), over keys [0, kn) in blocks of kFastWeightBlock
// from key 0: w[j] = p[j] * v_scale[j]; in block x, q[j] = round(w[j] /
// back[x]) to nearest even (0 .. 255) with back[x] = max w / kFastWeightSteps
// over the block (0, and q all 0, when every weight there is 0). The full
// blocks' q go to out + x * block_stride, the partial last block's to
// tail_out. False when a block is refused (its q and the later blocks' are
// then not written): a weight is NaN, Inf or negative, or the block's
// largest is below 1e-30 but not 0, so that 1 / back stays finite
// (x86_dot::WeightedQuadsV4 refuses the same).
bool QuantizeWeightsRowU8(const float* p, const float* v_scale, int64_t kn, uint8_t* out,
                          int64_t block_stride, uint8_t* tail_out, float* back);
// o[j] += float(sums[j]) * f over [0, n): one block's exact u8 x s8 sums of
// a row (below 2^24 in magnitude, so their conversion is exact) times its
// back scale, into the row's f32 accumulator.
void AccumulateIntRow(const int32_t* sums, int64_t n, float f, float* o);
// Rounds x[0, n) (softmax weights, >= 0) to `type` (kBF16 or kF16), to
// nearest even, into out[0, n), which may overlap x from below (out's first
// byte at or before x's): each value is read before a store can reach it.
// P as a 16-bit P.V operand in P's own scratch, compacted so that the
// narrowed rows of a block are dense (a GEMM operand with lda = keys).
void NarrowRow(const float* x, int64_t n, DType type, uint16_t* out);

// out[j] = x[j] * f rounded to `type` (kBF16 or kF16) as StoreFromF32
// rounds it, bit for bit (NaN and Inf included), for j < n: an output row of
// 16-bit O.
void ScaleNarrowRow(const float* x, int64_t n, float f, DType type, uint16_t* out);

// out[j] = RoundGradOperand(x[j]) (core/fast_compute.h) over [0, n), bit for
// bit: P or dX as FAST's backward multiplies them in bf16.
void RoundGradOperandRow(const float* x, int64_t n, uint16_t* out);

// out[j] = the top half of x[j] (bf16 values widened to f32: exact) over
// [0, n); false when some x[j] is nonzero and below 2^-63 in magnitude
// (a product of two such values could be flushed by bf16 dot instructions).
bool NarrowExactBF16Row(const float* x, int64_t n, uint16_t* out);

// The Highway target these functions dispatch to on this CPU, e.g. "AVX2".
const char* RowOpsTarget();

}  // namespace blas
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_BLAS_ROW_OPS_H_
