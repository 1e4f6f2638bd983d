#include "harness/grad_data.h"

#include "absl/strings/str_format.h"
#include "core/checked_math.h"
#include "core/status_macros.h"
#include "harness/problem_data.h"

namespace attnkit {
namespace {

// dO's seed stream is apart from the inputs' (ProblemData::Random(p, seed)).
constexpr uint64_t kGradSeedSalt = 0x9e3779b97f4a7c15ull;

}  // namespace

absl::StatusOr<int64_t> GradBytes(const AttentionProblem& p, bool with_dbias) {
  const int64_t q_size = DTypeSize(p.dtype), kv_size = DTypeSize(p.kv_dtype);
  ATTNKIT_ASSIGN_OR_RETURN(const int64_t q_tokens,
                           p.is_ragged() ? absl::StatusOr<int64_t>(p.TotalQ())
                                         : CheckedMul(p.batch, p.q_len, "query tokens"));
  ATTNKIT_ASSIGN_OR_RETURN(const int64_t q_rows, CheckedMul(q_tokens, p.num_heads, "query rows"));
  ATTNKIT_ASSIGN_OR_RETURN(const int64_t kv_tokens,
                           p.is_ragged() ? absl::StatusOr<int64_t>(p.TotalK())
                                         : CheckedMul(p.batch, p.kv_len, "key tokens"));
  ATTNKIT_ASSIGN_OR_RETURN(const int64_t kv_rows,
                           CheckedMul(kv_tokens, p.num_kv_heads, "key rows"));
  // dO (Ev) and dQ (E); dK (E) and dV (Ev).
  const int64_t dims = p.head_dim + p.value_dim();
  ATTNKIT_ASSIGN_OR_RETURN(const int64_t q_bytes,
                           CheckedMul(q_rows, dims * q_size, "dO + dQ bytes"));
  ATTNKIT_ASSIGN_OR_RETURN(const int64_t kv_bytes,
                           CheckedMul(kv_rows, dims * kv_size, "dK + dV bytes"));
  ATTNKIT_ASSIGN_OR_RETURN(int64_t total, CheckedAdd(q_bytes, kv_bytes, "gradient bytes"));
  if (p.sinks) {  // dsinks
    ATTNKIT_ASSIGN_OR_RETURN(total, CheckedAdd(total, 4 * p.num_heads, "gradient bytes"));
  }
  if (with_dbias) {
    ATTNKIT_ASSIGN_OR_RETURN(const int64_t pairs,
                             CheckedMul(p.batch * p.num_heads, p.q_len, "dbias rows"));
    ATTNKIT_ASSIGN_OR_RETURN(const int64_t dbias, CheckedMul(pairs, p.kv_len * 4, "dbias bytes"));
    ATTNKIT_ASSIGN_OR_RETURN(total, CheckedAdd(total, dbias, "gradient bytes"));
  }
  return total;
}

absl::StatusOr<GradData> GradData::Random(const AttentionProblem& p, uint64_t seed,
                                          bool with_dbias) {
  ATTNKIT_RETURN_IF_ERROR(ValidateProblem(p));
  if (p.is_paged()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: a paged problem (page_size %d) has no backward pass", p.Id(), p.page_size));
  }
  if (!p.return_lse) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: return_lse must be true for the backward pass", p.Id()));
  }
  if (with_dbias && !p.additive_bias) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: dbias needs additive_bias", p.Id()));
  }
  ATTNKIT_ASSIGN_OR_RETURN(const int64_t input_bytes, ProblemBytes(p));
  ATTNKIT_ASSIGN_OR_RETURN(const int64_t grad_bytes, GradBytes(p, with_dbias));
  if (grad_bytes > p.memory_budget_bytes - input_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the tensors of %s and its gradients need %d + %d bytes, more than memory_budget_bytes "
        "(%d)",
        p.Id(), input_bytes, grad_bytes, p.memory_budget_bytes));
  }
  const int64_t B = p.batch, H = p.num_heads, G = p.num_kv_heads, d = p.head_dim;
  const int64_t dv = p.value_dim();  // dO and dV
  GradData g;
  if (p.is_ragged()) {
    ATTNKIT_ASSIGN_OR_RETURN(g.d_o, Tensor::Contiguous(p.dtype, {p.TotalQ(), H, dv}));
    ATTNKIT_ASSIGN_OR_RETURN(g.dq, Tensor::Contiguous(p.dtype, {p.TotalQ(), H, d}));
    ATTNKIT_ASSIGN_OR_RETURN(g.dk, Tensor::Contiguous(p.kv_dtype, {p.TotalK(), G, d}));
    ATTNKIT_ASSIGN_OR_RETURN(g.dv, Tensor::Contiguous(p.kv_dtype, {p.TotalK(), G, dv}));
  } else {
    ATTNKIT_ASSIGN_OR_RETURN(g.d_o, Tensor::Attention(p.dtype, p.layout, B, H, p.q_len, dv));
    ATTNKIT_ASSIGN_OR_RETURN(g.dq, Tensor::Attention(p.dtype, p.layout, B, H, p.q_len, d));
    ATTNKIT_ASSIGN_OR_RETURN(g.dk, Tensor::Attention(p.kv_dtype, p.layout, B, G, p.kv_len, d));
    ATTNKIT_ASSIGN_OR_RETURN(g.dv, Tensor::Attention(p.kv_dtype, p.layout, B, G, p.kv_len, dv));
  }
  if (with_dbias) {
    ATTNKIT_ASSIGN_OR_RETURN(g.dbias, Tensor::Contiguous(DType::kF32, {B, H, p.q_len, p.kv_len}));
  }
  if (p.sinks) {
    ATTNKIT_ASSIGN_OR_RETURN(g.dsinks, Tensor::Contiguous(DType::kF32, {H}));
  }
  FillUniform(g.d_o.view(), seed ^ kGradSeedSalt, -1.0f, 1.0f);
  return g;
}

GradArgs GradData::args() const {
  GradArgs a;
  a.d_o = d_o.view();
  a.dq = dq.view();
  a.dk = dk.view();
  a.dv = dv.view();
  a.dbias = dbias.view();
  a.dsinks = dsinks.view();
  return a;
}

}  // namespace attnkit
