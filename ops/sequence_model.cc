#include "ops/sequence_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "core/tensor.h"
#include "ops/rms_norm.h"

namespace attnkit {
namespace {

constexpr float kNormEps = 1e-5f;

}  // namespace

absl::StatusOr<std::unique_ptr<SequenceModel>> SequenceModel::Create(
    const SequenceModelConfig& config, const BackendRegistry& registry) {
  const struct {
    const char* field;
    int64_t value, min;
  } mins[] = {{"vocab", config.vocab, 2},       {"max_len", config.max_len, 1},
              {"dim", config.dim, 1},           {"heads", config.heads, 1},
              {"kv_heads", config.kv_heads, 1}, {"layers", config.layers, 1}};
  for (const auto& m : mins) {
    if (m.value < m.min) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s (%d) must be >= %d", m.field, m.value, m.min));
    }
  }
  if (config.dim % config.heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dim (%d) must be a multiple of heads (%d)", config.dim, config.heads));
  }
  if (config.heads % config.kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "heads (%d) must be a multiple of kv_heads (%d)", config.heads, config.kv_heads));
  }
  std::unique_ptr<SequenceModel> model(new SequenceModel());
  model->config_ = config;
  AttentionConfig ac;
  ac.set_num_heads(config.heads);
  ac.set_num_kv_heads(config.kv_heads);
  ac.set_head_dim(config.dim / config.heads);
  ac.set_model_dim(config.dim);
  ac.mutable_mask()->set_kind(MaskSpec::CAUSAL);
  ac.set_backend(config.backend);
  for (int64_t l = 0; l < config.layers; ++l) {
    BlockOptions bo;
    bo.attention.seed = config.seed * 1000 + static_cast<uint64_t>(l);
    bo.attention.threads = config.threads;
    bo.mlp_hidden = config.mlp_hidden;
    bo.norm_eps = kNormEps;
    ATTNKIT_ASSIGN_OR_RETURN(std::unique_ptr<TransformerBlock> block,
                             TransformerBlock::Create(ac, bo, registry));
    model->blocks_.push_back(std::move(block));
  }
  const int64_t V = config.vocab, D = config.dim;
  model->embed_.resize(V * D);
  model->pos_.resize(config.max_len * D);
  model->wout_.resize(V * D);
  model->gf_.assign(D, 1.0f);
  const uint64_t s = config.seed * 1000 + 999;
  FillUniform(ContiguousView(model->embed_.data(), DType::kF32, {V, D}), s, -1.0f, 1.0f);
  FillUniform(ContiguousView(model->pos_.data(), DType::kF32, {config.max_len, D}), s + 1, -1.0f,
              1.0f);
  const float bound = 1.0f / std::sqrt(float(D));
  FillUniform(ContiguousView(model->wout_.data(), DType::kF32, {V, D}), s + 2, -bound, bound);
  model->d_embed_.assign(V * D, 0.0f);
  model->d_pos_.assign(config.max_len * D, 0.0f);
  model->d_wout_.assign(V * D, 0.0f);
  model->d_gf_.assign(D, 0.0f);
  return model;
}

int64_t SequenceModel::NumParameters() const {
  int64_t n = static_cast<int64_t>(embed_.size() + pos_.size() + gf_.size() + wout_.size());
  for (const auto& b : blocks_) n += b->NumParameters();
  return n;
}

absl::StatusOr<LossResult> SequenceModel::ForwardTrain(const TaskBatch& batch) {
  ready_ = false;
  const int64_t B = batch.batch, T = batch.length, M = B * T, D = config_.dim, V = config_.vocab;
  if (B < 1 || T < 1 || T > config_.max_len || static_cast<int64_t>(batch.tokens.size()) != M ||
      static_cast<int64_t>(batch.targets.size()) != M) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "batch [%d, %d] with %d tokens and %d targets: needs B, T >= 1, T <= max_len (%d) and "
        "B * T of each",
        B, T, batch.tokens.size(), batch.targets.size(), config_.max_len));
  }
  int64_t scored = 0;
  for (int64_t r = 0; r < M; ++r) {
    const int32_t tok = batch.tokens[r], tgt = batch.targets[r];
    if (tok < 0 || tok >= V || tgt < kNotScored || tgt >= V) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "token %d / target %d at row %d is outside the vocabulary [0, %d)", tok, tgt, r, V));
    }
    scored += tgt != kNotScored;
  }
  if (scored == 0) return absl::InvalidArgumentError("the batch scores no target");
  tokens_ = batch.tokens;
  targets_ = batch.targets;
  batch_ = B;
  length_ = T;
  scored_ = scored;
  const int64_t L = config_.layers;
  stream_.resize(L + 1);
  for (auto& s : stream_) s.resize(M * D);
  for (int64_t r = 0; r < M; ++r) {
    const float* e = embed_.data() + tokens_[r] * D;
    const float* p = pos_.data() + (r % T) * D;
    float* h = stream_[0].data() + r * D;
    for (int64_t i = 0; i < D; ++i) h[i] = e[i] + p[i];
  }
  for (int64_t l = 0; l < L; ++l) {
    ATTNKIT_RETURN_IF_ERROR(
        blocks_[l]->ForwardTrain(ContiguousView(stream_[l].data(), DType::kF32, {B, T, D}),
                                 ContiguousView(stream_[l + 1].data(), DType::kF32, {B, T, D})));
  }
  hf_.resize(M * D);
  inv_.resize(M);
  probs_.resize(M * V);
  RmsNormForward(stream_[L].data(), gf_.data(), M, D, kNormEps, hf_.data(), inv_.data());
  const MatmulProvider& mm = blocks_[0]->attention().matmul();
  mm.Linear(hf_.data(), D, wout_.data(), nullptr, M, V, D, probs_.data(), V);
  double loss = 0;
  int64_t correct = 0;
  for (int64_t r = 0; r < M; ++r) {
    float* row = probs_.data() + r * V;
    const int64_t best = std::max_element(row, row + V) - row;
    const float mx = row[best];
    double sum = 0;
    for (int64_t c = 0; c < V; ++c) sum += std::exp(double(row[c] - mx));
    const int32_t tgt = targets_[r];
    if (tgt != kNotScored) {
      loss += std::log(sum) - double(row[tgt] - mx);  // -log softmax[target]
      correct += best == tgt;
    }
    for (int64_t c = 0; c < V; ++c)
      row[c] = static_cast<float>(std::exp(double(row[c] - mx)) / sum);
  }
  ready_ = true;
  LossResult result;
  result.loss = loss / scored;
  result.accuracy = double(correct) / scored;
  result.scored = scored;
  return result;
}

absl::Status SequenceModel::Backward() {
  if (!ready_) {
    return absl::FailedPreconditionError(
        "Backward needs the activations of a successful ForwardTrain; call ForwardTrain first");
  }
  const int64_t B = batch_, T = length_, M = B * T, D = config_.dim, V = config_.vocab,
                L = config_.layers;
  const MatmulProvider& mm = blocks_[0]->attention().matmul();
  // d(mean CE)/d logits = (softmax - onehot) / scored on scored rows, else 0.
  dlogits_.assign(M * V, 0.0f);
  const float inv_n = 1.0f / static_cast<float>(scored_);
  for (int64_t r = 0; r < M; ++r) {
    if (targets_[r] == kNotScored) continue;
    for (int64_t c = 0; c < V; ++c) dlogits_[r * V + c] = probs_[r * V + c] * inv_n;
    dlogits_[r * V + targets_[r]] -= inv_n;
  }
  mm.LinearGradWeight(dlogits_.data(), V, hf_.data(), D, M, V, D, d_wout_.data(), nullptr);
  dh_.resize(M * D);
  mm.LinearGradInput(dlogits_.data(), V, wout_.data(), M, V, D, dh_.data(), D, false);
  dstream_.assign(M * D, 0.0f);
  RmsNormBackward(dh_.data(), stream_[L].data(), inv_.data(), gf_.data(), M, D, dstream_.data(),
                  d_gf_.data());
  const TensorView g = ContiguousView(dstream_.data(), DType::kF32, {B, T, D});
  for (int64_t l = L - 1; l >= 0; --l) ATTNKIT_RETURN_IF_ERROR(blocks_[l]->Backward(g, g));
  for (int64_t r = 0; r < M; ++r) {
    float* de = d_embed_.data() + tokens_[r] * D;
    float* dp = d_pos_.data() + (r % T) * D;
    const float* gr = dstream_.data() + r * D;
    for (int64_t i = 0; i < D; ++i) {
      de[i] += gr[i];
      dp[i] += gr[i];
    }
  }
  return absl::OkStatus();
}

absl::Status SequenceModel::ZeroGradients() {
  for (auto& b : blocks_) ATTNKIT_RETURN_IF_ERROR(b->ZeroGradients());
  for (std::vector<float>* v : {&d_embed_, &d_pos_, &d_gf_, &d_wout_}) {
    std::fill(v->begin(), v->end(), 0.0f);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ParamRef>> SequenceModel::Parameters() {
  std::vector<ParamRef> out;
  const auto add = [&out](const char* name, std::vector<float>& v, std::vector<float>& g,
                          bool decay) {
    ParamRef p;
    p.name = name;
    p.value = v.data();
    p.grad = g.data();
    p.size = static_cast<int64_t>(v.size());
    p.decay = decay;
    out.push_back(std::move(p));
  };
  add("embed", embed_, d_embed_, true);
  add("pos", pos_, d_pos_, true);
  for (size_t l = 0; l < blocks_.size(); ++l) {
    ATTNKIT_ASSIGN_OR_RETURN(std::vector<ParamRef> b,
                             blocks_[l]->Parameters(absl::StrCat("block", l, ".")));
    for (ParamRef& p : b) out.push_back(std::move(p));
  }
  add("norm.g", gf_, d_gf_, false);
  add("out", wout_, d_wout_, true);
  return out;
}

}  // namespace attnkit
