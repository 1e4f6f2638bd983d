// The scalar fp64 reference: attention written as the definition, one output
// row at a time, reading inputs in their stored precision and accumulating in
// double. Every backend is checked against it.
#ifndef ATTNKIT_ORACLE_REFERENCE_H_
#define ATTNKIT_ORACLE_REFERENCE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/problem.h"

namespace attnkit {

// For query row (b, h, i):
//   s_j = scale * q . k_j           (j over keys of kv head h / (H / G))
//   s_j = softcap * tanh(s_j / softcap)   when softcap > 0
//   s_j += bias[b, h, i, j]                when additive_bias
//   blocked: outside the structured mask, j >= kv_length(b), or blocked_mask
//   o = sum_j softmax(s)_j v_j over unblocked j; lse = log sum_j exp(s_j)
//   blocked also: bias[b, h, i, j] = -inf (the pair is not read at all)
// A row with no unblocked key gives o = 0 and lse = -inf, whatever its q row
// holds. A row that reads a NaN or an Inf gives o = NaN and lse = NaN: a
// non-finite value in its q row (when some key is unblocked), in the k or v
// row of an unblocked key, or a NaN or +inf bias of an unblocked pair. This is
// the rule every backend follows (what PyTorch's math SDPA gives), and no
// other row changes: values in rows no query reads never leak. `scores` is
// scratch of at least kv_len entries.
// K and V may be paged (read through the block table) and int8 (each value
// times its row's scale, exactly, in double). `p` must not be ragged: pass
// the problems of RaggedSequences (core/ragged.h).
// Under FAST (config.proto compute) q is the rounded row the FAST rule gives
// (core/fast_compute.h: K's 16-bit type, or int8 values times their row
// scale, exactly, in double): a function of Q alone, so the reference
// consumes exactly what a FAST kernel multiplies. P is never rounded here;
// its rounding is a term of the bound (oracle/compare.h).
// Returns the row's lse and writes value_dim() (Ev) values to o_row.
// What the error bound of oracle/compare.h needs from one row, in fp64 from the
// same stored inputs; maxima over the row's visible keys j.
struct RowErrorTerms {
  int64_t visible = 0;         // n: keys with a finite score
  double max_abs_dot = 0;      // scale * sum_c |q_c k_jc|
  double max_abs_score = 0;    // |s_j| after softcap and bias
  double max_abs_bias = 0;     // |bias_j + alibi_j|: all that is added to the score
  double max_abs_alibi = 0;    // |alibi_j| (config.proto alibi)
  double max_abs_operand = 0;  // max(|q_c|, |k_jc|): flushed-subnormal products
  // sum_j max_c |v_jc| / sum_j exp(s_j - max s): weights rounded to f16 (FAST)
  // err by an absolute floor each, times their v row.
  double sum_max_abs_v = 0;
  // FAST with int8 V (FastQuantizesWeights): sum_j W_j / sum_j exp(s_j -
  // max s), W_j the largest exp(s_i - max s) |v_scale_i| over the aligned
  // kFastWeightBlock-key blocks at and beside key j's (every block of that
  // many consecutive keys that holds j lies in them).
  double weight_grid = 0;
  // Sinks (config.proto sinks): the row's lse with the sink minus its keys'
  // lse (>= 0; the fold's rescale is exp of minus this), and |lse| with the
  // sink. Both 0 without a sink.
  double sink_shift = 0;
  double sink_abs_lse = 0;
  // ALiBi rows (config.proto alibi) weight each key's score error by its
  // softmax weight p_j (oracle/compare.h): sum_j p_j of scale sum_c |q_c
  // k_jc|, |s_j|, |bias_j + alibi_j| and |alibi_j|; |max_j s_j|; and max_jc
  // |v_jc| times the sink's fold factor (1 without a sink).
  double weighted_abs_dot = 0;
  double weighted_abs_score = 0;
  double weighted_abs_bias = 0;
  double weighted_abs_alibi = 0;
  double abs_max_score = 0;
  double max_abs_v_folded = 0;
};

// When `abs_o_row` is given it receives sum_j p_j |v_jc| (Ev values),
// and `terms` the row's error terms.
double ReferenceRow(const AttentionProblem& p, const AttentionArgs& a, int64_t b, int64_t h,
                    int64_t i, std::vector<double>* scores, double* o_row,
                    double* abs_o_row = nullptr, RowErrorTerms* terms = nullptr);

// A ragged problem's arrays hold its sequences one after the other, each
// [H, q_lengths[b], ...], in batch order (sequences without queries absent).
struct ReferenceResult {
  std::vector<double> o;             // [B, H, Tq, Ev], canonical order
  std::vector<double> lse;           // [B, H, Tq]
  std::vector<double> abs_o;         // [B, H, Tq, Ev]: sum_j p_j |v_jc|
  std::vector<RowErrorTerms> terms;  // [B, H, Tq]
};

// The whole problem in fp64. Inputs (q, k, v and the optional ones) must be in
// host memory; a.o and a.lse are not used.
ReferenceResult ComputeReference(const AttentionProblem& p, const AttentionArgs& a);

}  // namespace attnkit

#endif  // ATTNKIT_ORACLE_REFERENCE_H_
