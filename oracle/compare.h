// Comparing a backend's output with the fp64 reference: the one oracle of the
// conformance suite, the property tests, `check`, `compare`, `fuzz` and the
// benchmarks. Its error bound is derived from the problem, row by row, never
// from the backend.
#ifndef ATTNKIT_ORACLE_COMPARE_H_
#define ATTNKIT_ORACLE_COMPARE_H_

#include <cstdint>
#include <string>

#include "core/backend.h"
#include "core/problem.h"
#include "oracle/reference.h"

namespace attnkit {

// The error bound. The reference computes in fp64 from the exact stored
// inputs (16-bit Q/K/V included), so a correct backend may err only through
// (a) fp32 arithmetic and (b) rounding O into its dtype. With u = 2^-24, for
// one row with n visible keys, exact scores s_j, weights p_j, output o_c:
//
//   g(m)  = min(m, 4 sqrt(m)): growth of an m-term fp32 sum, worst case for
//           short sums, Higham & Mary's probabilistic bound beyond 16 terms
//           (rounding errors of independent sign; the worst case m would grant
//           64x more at m = 4096 and let dropped keys pass).
//   E     = u (g(d) max_j scale sum_c |q_c k_jc| + 8 max_j |s_j| + 2 max_j |b_j|)
//           bounds every score's error: the d-term dot product, the scale
//           multiply, softcap's divide/tanh/multiply, the bias add and the
//           subtraction of the running max.
//   A_c   = sum_j p_j |v_jc|
//   score errors move o_c by at most 2 E A_c (first order: p_j (1 + ds_j -
//   sum_k p_k ds_k)); the sums of p_j v_jc and of p_j (g(n) each), the
//   rescaling factors of online softmax, each an exp applied to the keys
//   before it (g(n) in all), exp itself (8 ulp, in numerator and
//   denominator) and the final divide add (3 g(n) + 20) u A_c:
//
//   f32_c   = 1.01 (2 E + (3 g(n) + 20) u) A_c
//   bound_c = f32_c + half an ulp of (|o_c| + f32_c) in O's dtype
//             + half the dtype's smallest subnormal (the floor near zero)
//   lse     : E + (g(n) + 12) u + u |lse| (its own f32 rounding), absolute.
//
// d is E, the head dim of Q and K (config.proto head_dim): only the dot
// products run over it. Ev (value_head_dim) is the number of output columns
// c; each column's sum runs over the n keys whatever Ev is, so a value head
// dim of its own changes which columns are checked, not any bound.
//
// The compute modes (config.proto compute, core/fast_compute.h) add:
//
// - bf16 dot products (MayFlushBF16Products: bf16 K with bf16 Q, or FAST):
//   the products of two bf16 values are exact in f32, so only the sums
//   round (the g(d) term above), but the instructions treat subnormal
//   inputs and results as zero. Each of the d products, and each partial
//   sum, may lose at most 2^-126 (1 + max(|q_c|, |k_jc|)), so E gains
//   scale * 2 d 2^-126 (1 + max |operand|): far below any real error,
//   present so that subnormal inputs cannot fail a correct kernel.
// - FAST with int8 K: the reference multiplies the quantized Q row itself
//   (reference.h), so Q's rounding costs nothing; the kernel's integer dot
//   product is exact, then scaled by the Q row's scale and the key's scale:
//   two more f32 multiplies, 2 u max_j |s_j| more in E.
// - FAST with 16-bit V: P may be rounded to V's type before P.V, each
//   weight to p_j (1 + delta_j) with |delta_j| <= u_p (2^-8 bf16, 2^-11
//   f16). With the denominator summed from the unrounded weights,
//   o_c moves by sum_j p_j delta_j v_jc, at most u_p A_c; with it summed
//   from the rounded ones, by sum_j p_j delta_j (v_jc - o_c) / (1 + ...),
//   at most u_p (A_c + |o_c|) <= 2 u_p A_c to first order. So f32_c gains
//   u_p (A_c + |o_c|) (times the 1.01 of the other terms). Weights below
//   the type's normal range (f16: 2^-14, bf16: 2^-126) round to a fixed
//   grid instead, an absolute error of at most half the smallest subnormal
//   (f16: 2^-25) or, where the conversion flushes subnormals to zero (x86's
//   vcvtne2ps2bf16), the smallest normal (bf16: 2^-126), relative to the
//   running maximum's weight 1, so at most that much of the final
//   normalisation: sum_j max_c |v_jc| / sum_j exp(s_j - max_k s_k) of them,
//   that floor times RowErrorTerms::sum_max_abs_v, absolute, per element.
//   bf16 dot products for P.V (vdpbf16ps) also treat subnormal V values and
//   partial sums as zero: 2^-126 per unit of weight (the weights sum to 1)
//   plus 2^-126 per key pair (weights <= 1 over a row sum >= 1), so bf16
//   V adds 2^-126 (1 + ceil(n / 2)) absolute.
// - FAST with fp8 K/V: Q is rounded to bf16 (the reference consumes it),
//   P may be rounded to bf16 (u_p = 2^-8, as above), and the kernels may
//   multiply the codes, widened exactly to bf16, in bf16 dot products. The
//   codes meet Q and the weights (times V's row scale) before K's row scale
//   and with V's codes, so the flushes above count in code units: Q.K's
//   2^-126 per product and partial sum times K's row scale, at most 2^16
//   max |k| (a nonzero code is at least 2^-16); P.V's per weight 2^-126
//   times |code| <= 57344, whatever the scale, and 2^-126 per key and per
//   key pair for the products and partial sums.
// - FAST with int8 V (FastQuantizesWeights): u_j = p_j sv_j (the weight
//   times V's row scale, v_jc = sv_j v8_jc) may be quantized to u8 (255
//   steps) with one scale per row and block of at most 64 consecutive keys,
//   and P.V summed exactly in integers. A kernel quantizes its tile's
//   weights relative to the running maximum m_t (each <= 1 there), and the
//   tile's sum is later rescaled by exp(m_t - m) and divided by l, which
//   maps them to the normalised p_j: so u_j errs by at most half a step,
//   max_{i in block} |u_i| / 510, and o_c by sum_j that times |v8_jc| <=
//   128. With W_j the largest |u_i| over the aligned 64-key blocks at and
//   beside j's (which hold every 64-key block around j), f32_c gains the
//   absolute (128 / 510) sum_j W_j (RowErrorTerms::weight_grid). Spread
//   weights keep W_j near u_j, so the term stays near 2^-9 of sum_j max_c
//   |v_jc| p_j (a row quantized by QuantizeRowI8 has max_c |v_jc| = 127
//   sv_j, and 128 / 127 / 510 < 2^-8.9), the class of bf16's rounding of P;
//   a dominant key raises it only in its own and the next blocks. The f32
//   roundings around the integer sum (the weight times the inverse scale
//   and the sum's multiply by the scale; the sum's conversion is exact, as
//   |sum| <= 512 * 255 * 128 < 2^24; the scale's own rounding only widens
//   the step, within the 1.01) make u_p = 2^-22, a generous 4 u.
// - Whatever FAST rounds of P, the LSE gains nothing: its sum must be of
//   the unrounded f32 weights (as FlashAttention's row sum is), or the
//   bound would grant u_p (bf16: 4e-3) and an LSE 1e-3 off would pass.
//
// ALiBi (config.proto alibi): the reference adds a_j = -slope |diag - j|
// exactly; a backend converts the distance to f32 (a relative error of u
// beyond 2^24), multiplies (u), and adds the term to the bias (u |b_j| with
// b_j = bias_j + a_j): key j's score errs by at most
//   e_j = u (g(d) scale sum_c |q_c k_jc| + 8 |s_j| + 2 |b_j| + 3 |a_j| + |m|),
// where |m| (the row's largest score) completes the subtraction of the
// running max m' (m' >= s_j and m' <= m, so |s_j - m'| <= |s_j| + |m|).
// Terms reach thousands at long range, so the maxima above would grant
// 50x more than the errors that matter: far keys' weights are negligible.
// ALiBi rows therefore weight each key's error by its weight. With
// E = sum_j p_j e_j, o_c moves by sum_j p_j (ds_j - sum_k p_k ds_k) v_jc, at
// most sum_j p_j e_j |v_jc| + E A_c <= E (max_jc |v_jc| + A_c), and the lse
// by at most E. So for ALiBi rows 2 E A_c above becomes E A_c plus the
// absolute E max |v| (times the sink's fold factor f when there is a sink).
//
// Sinks (config.proto sinks) are folded into a finished row (core/sinks.h):
// o times f = exp(L) / (exp(L) + exp(sink)) from the keys' f32 lse L, which
// errs by at most the lse bound above; A_c is then taken over the weights
// with the sink (f times the keys' A_c), so every term above scales with f,
// and f itself errs by lse + (|L' - L| + 20) u relative (BoundForRow gives
// the steps); L' gains (12 + |L'|) u.
//
// A fully blocked row must give exactly 0 and an LSE of -inf (with a sink:
// 0 within the floor, and an LSE of the sink). A row that
// reads a NaN or Inf (the rule in reference.h; the reference gives NaN) must
// give NaN in every element and its LSE. Any NaN or Inf where the reference
// is finite fails at once.
struct RowBound {
  double f32_scale = 0;  // f32_c / A_c
  double lse = 0;
  double weight_roundoff = 0;  // FAST: u_p, times (A_c + |o_c|) per element
  double weight_floor = 0;     // FAST f16 V: the absolute subnormal floor term
  double score_abs = 0;        // ALiBi: the weighted E times max |v| f, absolute
};
RowBound BoundForRow(const AttentionProblem& p, const RowErrorTerms& t);
// bound_c for one element given the reference value and A_c.
double ElementBound(DType out, const RowBound& row, double want, double abs_weighted_v);

struct Comparison {
  int64_t checked = 0;
  int64_t mismatches = 0;     // elements outside their bound
  bool non_finite = false;    // NaN or Inf where the reference is finite
  int64_t poisoned_rows = 0;  // rows the reference gives as NaN (they read a NaN/Inf)
  double max_abs_err = 0;
  double max_rel_err = 0;  // |o - ref| / |ref| over elements with ref != 0
  double max_lse_err = 0;
  double max_bound = 0;           // the largest bound granted to an O element
  double max_bound_fraction = 0;  // max |o - ref| / bound over O and LSE (1 = at the limit)
  std::string first_failure;      // where and what, for the first bad element
  bool ok() const { return mismatches == 0 && !non_finite; }
};

// Compares host outputs args.o (and args.lse when p.return_lse) with `ref`.
Comparison CompareToReference(const AttentionProblem& p, const AttentionArgs& args,
                              const ReferenceResult& ref);

// Like CompareToReference, but computes the reference only for `max_rows`
// query rows spread evenly over the problem (first and last included): a
// check that costs a fraction of the run for large problems.
Comparison CompareSampledRows(const AttentionProblem& p, const AttentionArgs& args,
                              int64_t max_rows);

}  // namespace attnkit

#endif  // ATTNKIT_ORACLE_COMPARE_H_
