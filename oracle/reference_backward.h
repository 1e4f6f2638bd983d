// The fp64 reference of the backward pass: dQ, dK, dV (and dBias) by the
// closed-form formulas, from the stored inputs, in double. Every backend's
// Backward is checked against it (oracle/compare_grad.h); it is itself checked
// against central finite differences of the fp64 forward.
//
// For query row i of head h (kv head g) and its visible keys j, with the
// forward recomputed in double (never the backend's O or lse):
//   x_ij  = scale q_i . k_j
//   s_ij  = softcap tanh(x_ij / softcap) + bias_ij   (x_ij + bias_ij without softcap)
//           (+ the ALiBi term -slope_h |diag_i - j|, a constant)
//   P_ij  = exp(s_ij - lse_i),  O_i = sum_j P_ij v_j
//           (with sinks, lse_i includes exp(sink_h): core/sinks_grad.h)
//   dP_ij = dO_i . v_j,  D_i = dO_i . O_i
//   dS_ij = P_ij (dP_ij - D_i)            dBias_ij = dS_ij (0 where blocked)
//   dX_ij = dS_ij (1 - tanh^2(x_ij / softcap))   (dS_ij without softcap)
//   dQ_i  = scale sum_j dX_ij k_j
//   dK_j  = scale sum_{h in group g} sum_i dX_ij q_i
//   dV_j  = sum_{h in group g} sum_i P_ij dO_i
//   dSink_h = -sum_{b, i} exp(sink_h - lse_i) D_i
// Blocked pairs (structured mask, padding, blocked_mask, a -inf bias)
// contribute nothing; a row with no visible key has dQ_i = 0. int8 K/V are
// not differentiable (Backward refuses them); paged and ragged problems are
// not accepted here. The fp64 core on inputs already in double, shared with
// the finite-difference test, is oracle/reference_f64.h (internal).
#ifndef ATTNKIT_ORACLE_REFERENCE_BACKWARD_H_
#define ATTNKIT_ORACLE_REFERENCE_BACKWARD_H_

#include <vector>

#include "core/backend.h"
#include "core/problem.h"
#include "oracle/reference.h"

namespace attnkit {

// Gradients in canonical (BHTD) order, whatever the problem's layout, and
// for each element the magnitude the error bound of oracle/compare_grad.h
// scales with: the sum of the absolute values of the terms the element is a
// sum of, computed with absolute values throughout (|P| |dP - D| for dS,
// etc.), so a correct fp32 kernel's error is a small multiple of u times it.
// Three refinements make that hold where the plain sums would vanish (the
// derivation is in oracle/compare_grad.cc): D_i's magnitude counts each |O_ic|
// as sum_j P_ij |v_jc| and at least the smallest normal of O's dtype (a
// kernel reads O rounded to that dtype); each weight P_ij counts as at least
// 2^-100 (fp32 kernels may flush weights below 2^-126 to 0); with softcap the
// derivative's magnitude is (1 - tanh^2) + 2^-20 (fp32 evaluates 1 - tanh^2
// to a few u absolute, which matters where tanh saturates).
struct ReferenceGradients {
  std::vector<double> dq, dq_abs;          // [B, H, Tq, d]
  std::vector<double> dk, dk_abs;          // [B, G, Tk, d]
  std::vector<double> dv, dv_abs;          // [B, G, Tk, Ev]
  std::vector<double> dbias, dbias_abs;    // [B, H, Tq, Tk]; empty without additive_bias
  std::vector<double> dsinks, dsinks_abs;  // [H]; empty without sinks
  // Per (b, h, i) row: keys visible (n) and the longest sum any element of
  // the row's gradients has (for the growth factor of the bound).
  std::vector<int64_t> visible;  // [B, H, Tq]
  // Added with the bound: per (b, h, i) row, the forward's error terms
  // (oracle/reference.h; zero for a row that reads a NaN or Inf), which set
  // the score error E of the bound.
  std::vector<RowErrorTerms> terms;  // [B, H, Tq]
};

// Inputs q, k, v (and the optional ones) in host memory; d_o has o's shape.
// a.o and a.lse are not read. Paged, ragged and int8 problems have no
// reference here: the result is then empty (every vector size 0), which
// CompareGradients reports as a failure; backends refuse them in caps.
ReferenceGradients ComputeReferenceBackward(const AttentionProblem& p, const AttentionArgs& a,
                                            const TensorView& d_o);

}  // namespace attnkit

#endif  // ATTNKIT_ORACLE_REFERENCE_BACKWARD_H_
