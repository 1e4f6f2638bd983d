// The gradient of attention sinks (config.proto sinks), shared by the host
// backends' backward passes. A sink joins each row's softmax denominator with
// weight P_sink = exp(sink_h - lse_i) and carries no value, so with
// D_i = dO_i . O_i (the weights sum to 1 - P_sink over the keys):
//   dL/dsink_h = -sum over (b, i) of P_sink_bhi D_bhi,
// and dQ, dK, dV are the usual ones from P_ij = exp(s_ij - lse_i) with the
// forward's lse (which includes the sink): nothing else changes.
#ifndef ATTNKIT_CORE_SINKS_GRAD_H_
#define ATTNKIT_CORE_SINKS_GRAD_H_

#include "absl/status/status.h"
#include "core/backend.h"

namespace attnkit {

// Writes g.dsinks (f32 [H]) from a.o, a.lse, a.sinks and g.d_o in host
// memory, summed in double; does nothing when g.dsinks is empty. Dense
// problems only (not ragged): Unimplemented otherwise. A row whose lse is
// NaN makes its head's gradient NaN.
absl::Status SinkGradient(const AttentionProblem& p, const AttentionArgs& a, const GradArgs& g);

}  // namespace attnkit

#endif  // ATTNKIT_CORE_SINKS_GRAD_H_
