#include "ops/transformer_block.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "core/tensor.h"
#include "ops/rms_norm.h"

namespace attnkit {
namespace {

absl::Status CheckContiguous(const char* name, const TensorView& t, int64_t d) {
  ATTNKIT_RETURN_IF_ERROR(CheckActivations(name, t, d));
  if (!t.IsContiguous()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s (%s) must be contiguous for the block", name, t.DebugString()));
  }
  return absl::OkStatus();
}

float Sigmoid(float u) { return 1.0f / (1.0f + std::exp(-u)); }

}  // namespace

absl::StatusOr<std::unique_ptr<TransformerBlock>> TransformerBlock::Create(
    const AttentionConfig& config, const BlockOptions& options, const BackendRegistry& registry) {
  std::unique_ptr<TransformerBlock> block(new TransformerBlock());
  ATTNKIT_ASSIGN_OR_RETURN(block->attn_,
                           MultiHeadAttention::Create(config, options.attention, registry));
  const int64_t D = block->attn_->problem().model_dim;
  if (options.mlp_hidden < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("mlp_hidden (%d) must be >= 0 (0 = 4 * model_dim)", options.mlp_hidden));
  }
  if (!(options.norm_eps > 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("norm_eps (%g) must be > 0", options.norm_eps));
  }
  const int64_t F = options.mlp_hidden == 0 ? 4 * D : options.mlp_hidden;
  block->d_ = D;
  block->f_ = F;
  block->eps_ = options.norm_eps;
  block->g1_.assign(D, 1.0f);
  block->g2_.assign(D, 1.0f);
  block->w1_.resize(F * D);
  block->b1_.resize(F);
  block->w2_.resize(D * F);
  block->b2_.resize(D);
  // nn.Linear's default, seeded after the attention's eight tensors.
  const uint64_t s = options.attention.seed * 16;
  const float in1 = 1.0f / std::sqrt(float(D)), in2 = 1.0f / std::sqrt(float(F));
  FillUniform(ContiguousView(block->w1_.data(), DType::kF32, {F, D}), s + 9, -in1, in1);
  FillUniform(ContiguousView(block->b1_.data(), DType::kF32, {F}), s + 10, -in1, in1);
  FillUniform(ContiguousView(block->w2_.data(), DType::kF32, {D, F}), s + 11, -in2, in2);
  FillUniform(ContiguousView(block->b2_.data(), DType::kF32, {D}), s + 12, -in2, in2);
  block->dg1_.assign(D, 0.0f);
  block->dg2_.assign(D, 0.0f);
  block->dw1_.assign(F * D, 0.0f);
  block->db1_.assign(F, 0.0f);
  block->dw2_.assign(D * F, 0.0f);
  block->db2_.assign(D, 0.0f);
  return block;
}

int64_t TransformerBlock::NumParameters() const {
  return attn_->NumParameters() + 2 * d_ + 2 * f_ * d_ + f_ + d_;
}

absl::Status TransformerBlock::Forward(const TensorView& x, const TensorView& y) {
  return Run(x, y, false);
}

absl::Status TransformerBlock::ForwardTrain(const TensorView& x, const TensorView& y) {
  return Run(x, y, true);
}

absl::Status TransformerBlock::Run(const TensorView& x, const TensorView& y, bool train) {
  trained_forward_ = false;
  ATTNKIT_RETURN_IF_ERROR(CheckContiguous("x", x, d_));
  ATTNKIT_RETURN_IF_ERROR(CheckContiguous("y", y, d_));
  const int64_t B = x.shape[0], T = x.shape[1], M = B * T, D = d_, F = f_;
  if (y.shape[0] != B || y.shape[1] != T) {
    return absl::InvalidArgumentError(
        absl::StrFormat("y %s must have x's shape %s", y.DebugString(), x.DebugString()));
  }
  for (std::vector<float>* v : {&x_, &h1_, &a_, &x2_, &h2_}) v->resize(M * D);
  for (std::vector<float>* v : {&u_, &s_}) v->resize(M * F);
  inv1_.resize(M);
  inv2_.resize(M);
  const MatmulProvider& mm = attn_->matmul();
  std::memcpy(x_.data(), x.data, static_cast<size_t>(M * D) * sizeof(float));  // y may be x
  RmsNormForward(x_.data(), g1_.data(), M, D, eps_, h1_.data(), inv1_.data());
  const TensorView h1 = ContiguousView(h1_.data(), DType::kF32, {B, T, D});
  const TensorView a = ContiguousView(a_.data(), DType::kF32, {B, T, D});
  ATTNKIT_RETURN_IF_ERROR(train ? attn_->ForwardTrain(h1, a) : attn_->Forward(h1, a));
  for (int64_t i = 0; i < M * D; ++i) x2_[i] = x_[i] + a_[i];
  RmsNormForward(x2_.data(), g2_.data(), M, D, eps_, h2_.data(), inv2_.data());
  mm.Linear(h2_.data(), D, w1_.data(), b1_.data(), M, F, D, u_.data(), F);
  for (int64_t i = 0; i < M * F; ++i) s_[i] = u_[i] * Sigmoid(u_[i]);
  auto* out = static_cast<float*>(y.data);
  mm.Linear(s_.data(), F, w2_.data(), b2_.data(), M, D, F, out, D);
  for (int64_t i = 0; i < M * D; ++i) out[i] += x2_[i];
  rows_ = M;
  trained_forward_ = train;
  return absl::OkStatus();
}

absl::Status TransformerBlock::Backward(const TensorView& dy, const TensorView& dx) {
  if (!trained_forward_) {
    return absl::FailedPreconditionError(
        "Backward needs the activations of a successful ForwardTrain; call ForwardTrain first");
  }
  ATTNKIT_RETURN_IF_ERROR(CheckContiguous("dy", dy, d_));
  ATTNKIT_RETURN_IF_ERROR(CheckContiguous("dx", dx, d_));
  const int64_t B = dy.shape[0], T = dy.shape[1], M = B * T, D = d_, F = f_;
  if (M != rows_ || dx.shape[0] != B || dx.shape[1] != T) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dy %s and dx %s must have the shape of the last ForwardTrain's x (%d rows of %d)",
        dy.DebugString(), dx.DebugString(), rows_, D));
  }
  const MatmulProvider& mm = attn_->matmul();
  const auto* g = static_cast<const float*>(dy.data);
  dx2_.assign(g, g + M * D);  // the residual y = x2 + m
  du_.resize(M * F);
  dh_.resize(M * D);
  // m = SiLU(u) W2^T + b2.
  mm.LinearGradWeight(g, D, s_.data(), F, M, D, F, dw2_.data(), db2_.data());
  mm.LinearGradInput(g, D, w2_.data(), M, D, F, du_.data(), F, /*accumulate=*/false);
  // SiLU'(u) = sig(u) (1 + u (1 - sig(u))).
  for (int64_t i = 0; i < M * F; ++i) {
    const float sg = Sigmoid(u_[i]);
    du_[i] *= sg * (1.0f + u_[i] * (1.0f - sg));
  }
  // u = h2 W1^T + b1, h2 = RMSNorm(x2).
  mm.LinearGradWeight(du_.data(), F, h2_.data(), D, M, F, D, dw1_.data(), db1_.data());
  mm.LinearGradInput(du_.data(), F, w1_.data(), M, F, D, dh_.data(), D, /*accumulate=*/false);
  RmsNormBackward(dh_.data(), x2_.data(), inv2_.data(), g2_.data(), M, D, dx2_.data(), dg2_.data());
  // x2 = x + attention(RMSNorm(x)).
  const TensorView dx2 = ContiguousView(dx2_.data(), DType::kF32, {B, T, D});
  const TensorView dh1 = ContiguousView(dh_.data(), DType::kF32, {B, T, D});
  ATTNKIT_RETURN_IF_ERROR(attn_->Backward(dx2, dh1));
  auto* out = static_cast<float*>(dx.data);  // dy is not read past this point
  std::memcpy(out, dx2_.data(), static_cast<size_t>(M * D) * sizeof(float));
  RmsNormBackward(dh_.data(), x_.data(), inv1_.data(), g1_.data(), M, D, out, dg1_.data());
  return absl::OkStatus();
}

absl::Status TransformerBlock::ZeroGradients() {
  ATTNKIT_RETURN_IF_ERROR(attn_->ZeroGradients());
  for (std::vector<float>* v : {&dg1_, &dg2_, &dw1_, &db1_, &dw2_, &db2_}) {
    std::fill(v->begin(), v->end(), 0.0f);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ParamRef>> TransformerBlock::Parameters(const std::string& prefix) {
  ATTNKIT_ASSIGN_OR_RETURN(std::vector<ParamRef> out, attn_->Parameters(prefix + "attn."));
  const struct {
    const char* name;
    std::vector<float>* value;
    std::vector<float>* grad;
    bool decay;
  } slots[] = {{"norm1.g", &g1_, &dg1_, false}, {"norm2.g", &g2_, &dg2_, false},
               {"mlp.w1", &w1_, &dw1_, true},   {"mlp.b1", &b1_, &db1_, false},
               {"mlp.w2", &w2_, &dw2_, true},   {"mlp.b2", &b2_, &db2_, false}};
  for (const auto& s : slots) {
    ParamRef p;
    p.name = prefix + s.name;
    p.value = s.value->data();
    p.grad = s.grad->data();
    p.size = static_cast<int64_t>(s.value->size());
    p.decay = s.decay;
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace attnkit
