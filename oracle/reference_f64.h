// The fp64 core of the backward reference (oracle/reference_backward.h), on
// inputs already converted to double. Internal: ComputeReferenceBackward
// loads the stored tensors into an F64Inputs and calls BackwardF64; the
// finite-difference test (oracle/reference_backward_test.cc) builds F64Inputs
// itself, perturbs single elements by 1e-6 (which no 16- or 32-bit storage
// could hold) and differentiates ForwardF64 numerically.
#ifndef ATTNKIT_ORACLE_REFERENCE_F64_H_
#define ATTNKIT_ORACLE_REFERENCE_F64_H_

#include <cstdint>
#include <vector>

#include "core/backend.h"
#include "core/problem.h"
#include "oracle/reference_backward.h"

namespace attnkit {
namespace internal {

// A dense problem's inputs in double, canonical order whatever the layout.
struct F64Inputs {
  std::vector<double> q, d_o;       // [B, H, Tq, E] and [B, H, Tq, Ev]
  std::vector<double> k, v;         // [B, G, Tk, E] and [B, G, Tk, Ev]
  std::vector<uint8_t> blocked;     // [B, H, Tq, Tk], 1 = blocked; empty without blocked_mask
  std::vector<double> bias;         // [B, H, Tq, Tk]; empty without additive_bias
  std::vector<double> sinks;        // [H]; empty without sinks
  std::vector<float> alibi_slopes;  // [H]; empty without alibi
};

// Reads q, k, v, d_o (and the mask and bias, broadcasts expanded) of a dense
// float problem from their stored precision. `p` must not be paged, ragged or
// int8 (ComputeReferenceBackward returns empty gradients for those).
F64Inputs LoadF64Inputs(const AttentionProblem& p, const AttentionArgs& a, const TensorView& d_o);

// The forward pass in double: o [B, H, Tq, Ev] and lse [B, H, Tq], with the
// rules of oracle/reference.h (a fully blocked row gives o = 0, lse = -inf; a
// row that reads a NaN or Inf gives NaN).
void ForwardF64(const AttentionProblem& p, const F64Inputs& in, std::vector<double>* o,
                std::vector<double>* lse);

// The gradients of oracle/reference_backward.h from double inputs.
ReferenceGradients BackwardF64(const AttentionProblem& p, const F64Inputs& in);

}  // namespace internal
}  // namespace attnkit

#endif  // ATTNKIT_ORACLE_REFERENCE_F64_H_
