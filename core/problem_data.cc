#include "core/problem_data.h"

#include <random>

#include "core/poison_blocked.h"
#include "core/status_macros.h"

namespace attnkit {
void FillUniform(const TensorView& t, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  ForEachOffset(t, [&](int64_t off) { StoreFromF32(t.data, t.dtype, off, dist(rng)); });
}

absl::StatusOr<ProblemData> ProblemData::Allocate(const AttentionProblem& p) {
  ATTNKIT_RETURN_IF_ERROR(ValidateProblem(p));
  ATTNKIT_RETURN_IF_ERROR(CheckMemoryBudget(p));  // before any allocation
  const int64_t B = p.batch, H = p.num_heads, G = p.num_kv_heads;
  ProblemData data;
  ATTNKIT_ASSIGN_OR_RETURN(data.q, Tensor::Attention(p.dtype, p.layout, B, H, p.q_len, p.head_dim));
  ATTNKIT_ASSIGN_OR_RETURN(data.k,
                           Tensor::Attention(p.kv_dtype, p.layout, B, G, p.kv_len, p.head_dim));
  ATTNKIT_ASSIGN_OR_RETURN(data.v,
                           Tensor::Attention(p.kv_dtype, p.layout, B, G, p.kv_len, p.head_dim));
  ATTNKIT_ASSIGN_OR_RETURN(data.o, Tensor::Attention(p.dtype, p.layout, B, H, p.q_len, p.head_dim));
  if (p.return_lse) {
    ATTNKIT_ASSIGN_OR_RETURN(data.lse, Tensor::Contiguous(DType::kF32, {B, H, p.q_len}));
  }
  if (p.has_kv_lengths()) {
    ATTNKIT_ASSIGN_OR_RETURN(data.kv_lengths, Tensor::Contiguous(DType::kI32, {B}));
    for (int64_t b = 0; b < B; ++b) {
      static_cast<int32_t*>(data.kv_lengths.data())[b] = static_cast<int32_t>(p.kv_lengths[b]);
    }
  }
  if (p.blocked_mask) {
    ATTNKIT_ASSIGN_OR_RETURN(data.blocked_mask,
                             Tensor::Contiguous(DType::kU8, {B, H, p.q_len, p.kv_len}));
  }
  if (p.additive_bias) {
    ATTNKIT_ASSIGN_OR_RETURN(data.bias, Tensor::Contiguous(DType::kF32, {B, H, p.q_len, p.kv_len}));
  }
  return data;
}

absl::StatusOr<ProblemData> ProblemData::Random(const AttentionProblem& p, uint64_t seed) {
  ATTNKIT_ASSIGN_OR_RETURN(ProblemData data, Allocate(p));
  FillUniform(data.q.view(), seed * 4 + 1, -1.0f, 1.0f);
  FillUniform(data.k.view(), seed * 4 + 2, -1.0f, 1.0f);
  FillUniform(data.v.view(), seed * 4 + 3, -1.0f, 1.0f);
  if (p.additive_bias) FillUniform(data.bias.view(), seed * 4 + 4, -1.0f, 1.0f);
  if (p.blocked_mask) {
    std::mt19937_64 rng(seed * 4 + 5);
    auto* m = static_cast<uint8_t*>(data.blocked_mask.data());
    const int64_t n = data.blocked_mask.view().NumElements();
    for (int64_t i = 0; i < n; ++i) m[i] = (rng() % 5 == 0) ? 1 : 0;
  }
  if (p.poison_blocked) PoisonBlockedInputs(p, data.args(), seed * 4 + 6);
  if (p.nonfinite_inputs > 0) PoisonRandomInputs(p, data.args(), p.nonfinite_inputs, seed * 4 + 7);
  return data;
}

AttentionArgs ProblemData::args() const {
  AttentionArgs a;
  a.q = q.view();
  a.k = k.view();
  a.v = v.view();
  a.o = o.view();
  a.lse = lse.view();
  a.kv_lengths = kv_lengths.view();
  a.blocked_mask = blocked_mask.view();
  a.bias = bias.view();
  return a;
}

}  // namespace attnkit
