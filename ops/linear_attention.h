// Kernel (linear) attention with the elu(x) + 1 feature map. This is a
// different function from softmax attention, not an approximation switch of
// it: there is no scale and no softmax, and outputs differ.
//   phi(x) = elu(x) + 1 = (x > 0 ? x + 1 : exp(x)), elementwise, always > 0
//   o_i = phi(q_i)^T S_i / (phi(q_i)^T z_i),  S_i = sum_j phi(k_j) v_j^T [d, d],
//                                             z_i = sum_j phi(k_j)        [d]
// Non-causal: j runs over all keys, so S and z are built once per KV head.
// Causal: j <= i + (Tk - Tq) (bottom-right), so S and z are running prefix
// sums: O(T d^2) time and O(d^2) state instead of O(T^2 d). A row with no
// visible key gives zeros. Query head h reads KV head h / (H / G), shared,
// never copied. Arithmetic is fp32.
#ifndef ATTNKIT_OPS_LINEAR_ATTENTION_H_
#define ATTNKIT_OPS_LINEAR_ATTENTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor.h"

namespace attnkit {

struct LinearAttentionProblem {
  int64_t batch = 1;
  int64_t num_heads = 1;     // H
  int64_t num_kv_heads = 1;  // G, divides H
  int64_t head_dim = 1;      // d (queries, keys and values)
  int64_t q_len = 1;         // Tq
  int64_t kv_len = 1;        // Tk
  bool causal = false;

  std::string Id() const;  // "linear_h4_g2_q9_k9_d16_causal"
};

// InvalidArgument naming the field and its value when a dimension is < 1 or
// H % G != 0.
absl::Status ValidateLinearAttention(const LinearAttentionProblem& p);

// Strided f32 views: q, o [B, H, Tq, d]; k, v [B, G, Tk, d] (BHTD or BTHD
// strides, any layout works).
struct LinearAttentionArgs {
  TensorView q, k, v, o;
};

class LinearAttention {
 public:
  // Validates p and the views (shapes, f32), then computes o. The state S, z
  // lives in a workspace reused across calls.
  absl::Status Forward(const LinearAttentionProblem& p, const LinearAttentionArgs& args);

 private:
  std::vector<float> state_;  // S [d, d] then z [d]
  std::vector<float> phi_;    // phi of one row, [d]
};

// The definition in fp64, quadratic in T, row by row:
//   o_i = sum_j (phi(q_i) . phi(k_j)) v_j / sum_j phi(q_i) . phi(k_j)
// Returns o [B, H, Tq, d] in canonical order.
std::vector<double> LinearAttentionReference(const LinearAttentionProblem& p,
                                             const LinearAttentionArgs& args);

}  // namespace attnkit

#endif  // ATTNKIT_OPS_LINEAR_ATTENTION_H_
