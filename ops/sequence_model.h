// A tiny decoder-only language model for the synthetic tasks (ops/train_task.h):
//   h0 = E[token] + P[position]             E [vocab, D], P [max_len, D]
//   h  = block_L( .. block_1(h0))           pre-norm blocks, causal attention
//   logits = RMSNorm(h; gf) Wout^T          Wout [vocab, D], no bias
//   loss = mean over scored targets of -log softmax(logits)[target]
// Initialisation: E and P uniform in [-1, 1] (the first norm rescales them),
// Wout U(-1/sqrt(D), 1/sqrt(D)), gf at 1, blocks as TransformerBlock says.
#ifndef ATTNKIT_OPS_SEQUENCE_MODEL_H_
#define ATTNKIT_OPS_SEQUENCE_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ops/parameter.h"
#include "ops/train_task.h"
#include "ops/transformer_block.h"
#include "plugin/registry.h"

namespace attnkit {

struct SequenceModelConfig {
  int64_t vocab = 16;
  int64_t max_len = 16;  // longest input; positions with an embedding
  int64_t dim = 64;      // D
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t layers = 2;
  int64_t mlp_hidden = 0;           // 0 = 4 D
  std::string backend = "highway";  // the attention backend (forward and backward)
  int threads = 0;                  // the backend's tuning record (as LayerOptions)
  uint64_t seed = 1;
};

struct LossResult {
  double loss = 0;      // mean cross-entropy (nats) over the scored targets
  double accuracy = 0;  // fraction of scored targets whose argmax is right
  int64_t scored = 0;
};

class SequenceModel {
 public:
  // InvalidArgument naming the field: vocab >= 2, max_len >= 1, layers >= 1,
  // dim a multiple of heads, heads a multiple of kv_heads; the blocks then
  // apply MultiHeadAttention's rules (the backend must exist).
  static absl::StatusOr<std::unique_ptr<SequenceModel>> Create(const SequenceModelConfig& config,
                                                               const BackendRegistry& registry);

  // The loss and accuracy of `batch`, keeping every activation for Backward.
  // InvalidArgument when its length exceeds max_len, a token is outside the
  // vocabulary or nothing is scored.
  absl::StatusOr<LossResult> ForwardTrain(const TaskBatch& batch);
  // Adds d(loss)/d(parameter) of the last ForwardTrain to every gradient.
  absl::Status Backward();
  absl::Status ZeroGradients();
  // embed, pos, block<i>.*, norm.g, out.
  absl::StatusOr<std::vector<ParamRef>> Parameters();
  int64_t NumParameters() const;

  const SequenceModelConfig& config() const { return config_; }
  const TransformerBlock& block(int64_t i) const { return *blocks_[i]; }

 private:
  SequenceModel() = default;

  SequenceModelConfig config_;
  std::vector<std::unique_ptr<TransformerBlock>> blocks_;
  std::vector<float> embed_, pos_, gf_, wout_;
  std::vector<float> d_embed_, d_pos_, d_gf_, d_wout_;
  // The last ForwardTrain: tokens, targets, the residual stream before each
  // block and after the last ([L + 1][M, D]), the final norm, probabilities.
  bool ready_ = false;
  int64_t batch_ = 0, length_ = 0, scored_ = 0;
  std::vector<int32_t> tokens_, targets_;
  std::vector<std::vector<float>> stream_;
  std::vector<float> hf_, inv_, probs_;
  std::vector<float> dlogits_, dh_, dstream_;  // Backward's scratch
};

}  // namespace attnkit

#endif  // ATTNKIT_OPS_SEQUENCE_MODEL_H_
