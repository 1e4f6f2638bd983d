// A pre-norm Transformer block, trainable:
//   h1 = RMSNorm(x; g1)           a = MultiHeadAttention(h1)     x2 = x + a
//   h2 = RMSNorm(x2; g2)          u = h2 W1^T + b1   [M, F]
//   m  = SiLU(u) W2^T + b2        y = x2 + m
// on x, y [B, T, D] (M = B*T rows). SiLU(u) = u * sigmoid(u) (the MLP is
// the plain two-layer one, not gated). W1 [F, D], W2 [D, F] in nn.Linear's
// [out, in] order, F = mlp_hidden (default 4 D); initialised like nn.Linear
// (U(-1/sqrt(in), 1/sqrt(in)), biases too), gains g1, g2 [D] at 1.
// The attention's matmul provider (that of its backend) runs the MLP too.
#ifndef ATTNKIT_OPS_TRANSFORMER_BLOCK_H_
#define ATTNKIT_OPS_TRANSFORMER_BLOCK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/config.pb.h"
#include "core/tensor.h"
#include "ops/multi_head_attention.h"
#include "ops/parameter.h"
#include "plugin/registry.h"

namespace attnkit {

struct BlockOptions {
  LayerOptions attention;  // its seed also seeds the MLP's weights
  int64_t mlp_hidden = 0;  // F; 0 = 4 * model_dim
  float norm_eps = 1e-5f;  // RMSNorm's eps
};

class TransformerBlock {
 public:
  // The attention layer from `config` (MultiHeadAttention::Create's rules,
  // mask included), then the norms and the MLP.
  static absl::StatusOr<std::unique_ptr<TransformerBlock>> Create(const AttentionConfig& config,
                                                                  const BlockOptions& options,
                                                                  const BackendRegistry& registry);

  // y = block(x); x, y: contiguous f32 [B, T, D]; y may be x.
  absl::Status Forward(const TensorView& x, const TensorView& y);
  // Forward that keeps the activations Backward needs (x, h1, x2, h2, u and
  // the norms' 1/rms per row; the attention keeps its own).
  absl::Status ForwardTrain(const TensorView& x, const TensorView& y);
  // For the last ForwardTrain and dy [B, T, D]: writes dx (overwritten; may
  // be dy) and adds every parameter's gradient to its gradient buffer.
  absl::Status Backward(const TensorView& dy, const TensorView& dx);
  absl::Status ZeroGradients();
  // attn.* (MultiHeadAttention::Parameters), norm1.g, norm2.g, mlp.w1,
  // mlp.b1, mlp.w2, mlp.b2, each name prefixed with `prefix`.
  absl::StatusOr<std::vector<ParamRef>> Parameters(const std::string& prefix = "");
  int64_t NumParameters() const;

  MultiHeadAttention& attention() { return *attn_; }
  const MultiHeadAttention& attention() const { return *attn_; }
  int64_t model_dim() const { return d_; }
  int64_t mlp_hidden() const { return f_; }

 private:
  TransformerBlock() = default;
  absl::Status Run(const TensorView& x, const TensorView& y, bool train);

  std::unique_ptr<MultiHeadAttention> attn_;
  int64_t d_ = 0, f_ = 0;
  float eps_ = 1e-5f;
  // Parameters and their gradients: g1, g2 [D], w1 [F, D], b1 [F],
  // w2 [D, F], b2 [D].
  std::vector<float> g1_, g2_, w1_, b1_, w2_, b2_;
  std::vector<float> dg1_, dg2_, dw1_, db1_, dw2_, db2_;
  // Activations of the last call, [M, D] or [M, F], and 1/rms [M].
  int64_t rows_ = 0;
  bool trained_forward_ = false;
  std::vector<float> x_, h1_, a_, x2_, h2_, u_, s_, inv1_, inv2_;
  std::vector<float> dx2_, dh_, du_;  // Backward's scratch
};

}  // namespace attnkit

#endif  // ATTNKIT_OPS_TRANSFORMER_BLOCK_H_
