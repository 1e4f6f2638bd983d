// The scalar fp64 reference: attention written as the definition, one output
// row at a time, reading inputs in their stored precision and accumulating in
// double. Every backend is checked against it.
#ifndef ATTNKIT_CORE_REFERENCE_H_
#define ATTNKIT_CORE_REFERENCE_H_

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
// A row with no unblocked key (or whose scores are all -inf) gives o = 0 and
// lse = -inf. `scores` is scratch of at least kv_len entries.
// Returns the row's lse and writes head_dim values to o_row.
double ReferenceRow(const AttentionProblem& p, const AttentionArgs& a, int64_t b, int64_t h,
                    int64_t i, std::vector<double>* scores, double* o_row);

struct ReferenceResult {
  std::vector<double> o;    // [B, H, Tq, d], canonical order
  std::vector<double> lse;  // [B, H, Tq]
};

// The whole problem in fp64. Inputs (q, k, v and the optional ones) must be in
// host memory; a.o and a.lse are not used.
ReferenceResult ComputeReference(const AttentionProblem& p, const AttentionArgs& a);

}  // namespace attnkit

#endif  // ATTNKIT_CORE_REFERENCE_H_
