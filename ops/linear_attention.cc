#include "ops/linear_attention.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace attnkit {
namespace {

inline double Phi(double x) { return x > 0 ? x + 1.0 : std::exp(x); }
inline float PhiF(float x) { return x > 0 ? x + 1.0f : std::exp(x); }

absl::Status CheckView(const char* name, const TensorView& t, int64_t b, int64_t heads, int64_t len,
                       int64_t d) {
  if (t.empty() || t.dtype != DType::kF32 || t.rank != 4 || t.shape[0] != b ||
      t.shape[1] != heads || t.shape[2] != len || t.shape[3] != d) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s must be f32 [%d, %d, %d, %d]; got %s", name, b, heads, len, d,
                        t.empty() ? std::string("none") : t.DebugString()));
  }
  return absl::OkStatus();
}

// Keys visible to query i: [0, end) with end = i + 1 + (Tk - Tq) when
// causal (bottom-right), else all.
inline int64_t VisibleEnd(const LinearAttentionProblem& p, int64_t i) {
  if (!p.causal) return p.kv_len;
  return std::clamp<int64_t>(i + 1 + p.kv_len - p.q_len, 0, p.kv_len);
}

}  // namespace

std::string LinearAttentionProblem::Id() const {
  std::string id = absl::StrFormat("linear_h%d_g%d_q%d_k%d_d%d", num_heads, num_kv_heads, q_len,
                                   kv_len, head_dim);
  if (batch != 1) absl::StrAppend(&id, "_b", batch);
  absl::StrAppend(&id, causal ? "_causal" : "_full");
  return id;
}

absl::Status ValidateLinearAttention(const LinearAttentionProblem& p) {
  const struct {
    const char* name;
    int64_t value;
  } dims[] = {
      {"batch", p.batch},       {"num_heads", p.num_heads}, {"num_kv_heads", p.num_kv_heads},
      {"head_dim", p.head_dim}, {"q_len", p.q_len},         {"kv_len", p.kv_len}};
  for (const auto& dim : dims) {
    if (dim.value < 1) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s (%d) must be >= 1", dim.name, dim.value));
    }
  }
  if (p.num_heads % p.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "num_heads (%d) must be a multiple of num_kv_heads (%d)", p.num_heads, p.num_kv_heads));
  }
  return absl::OkStatus();
}

absl::Status LinearAttention::Forward(const LinearAttentionProblem& p,
                                      const LinearAttentionArgs& a) {
  ATTNKIT_RETURN_IF_ERROR(ValidateLinearAttention(p));
  const int64_t B = p.batch, H = p.num_heads, G = p.num_kv_heads, d = p.head_dim;
  ATTNKIT_RETURN_IF_ERROR(CheckView("q", a.q, B, H, p.q_len, d));
  ATTNKIT_RETURN_IF_ERROR(CheckView("k", a.k, B, G, p.kv_len, d));
  ATTNKIT_RETURN_IF_ERROR(CheckView("v", a.v, B, G, p.kv_len, d));
  ATTNKIT_RETURN_IF_ERROR(CheckView("o", a.o, B, H, p.q_len, d));
  state_.resize(static_cast<size_t>(d * d + d));
  phi_.resize(static_cast<size_t>(d));
  float* S = state_.data();  // [d, d]: S[r, c] = sum_j phi(k_j)[r] v_j[c]
  float* z = S + d * d;      // [d]
  const auto* q = static_cast<const float*>(a.q.data);
  const auto* k = static_cast<const float*>(a.k.data);
  const auto* v = static_cast<const float*>(a.v.data);
  auto* o = static_cast<float*>(a.o.data);
  const int64_t group = H / G;

  // S += phi(k_j) v_j^T, z += phi(k_j).
  auto add_key = [&](int64_t b, int64_t g, int64_t j) {
    const float* kj = k + a.k.Offset(b, g, j);
    const float* vj = v + a.v.Offset(b, g, j);
    for (int64_t r = 0; r < d; ++r) phi_[r] = PhiF(kj[r * a.k.strides[3]]);
    for (int64_t r = 0; r < d; ++r) {
      z[r] += phi_[r];
      float* row = S + r * d;
      for (int64_t c = 0; c < d; ++c) row[c] += phi_[r] * vj[c * a.v.strides[3]];
    }
  };
  // o_i = phi(q_i)^T S / phi(q_i)^T z for query head h.
  auto emit = [&](int64_t b, int64_t h, int64_t i, bool any_key) {
    float* oi = o + a.o.Offset(b, h, i);
    if (!any_key) {
      for (int64_t c = 0; c < d; ++c) oi[c * a.o.strides[3]] = 0.0f;
      return;
    }
    const float* qi = q + a.q.Offset(b, h, i);
    float den = 0;
    for (int64_t r = 0; r < d; ++r) {
      phi_[r] = PhiF(qi[r * a.q.strides[3]]);
      den += phi_[r] * z[r];
    }
    const float inv = 1.0f / den;
    for (int64_t c = 0; c < d; ++c) {
      float num = 0;
      for (int64_t r = 0; r < d; ++r) num += phi_[r] * S[r * d + c];
      oi[c * a.o.strides[3]] = num * inv;
    }
  };

  for (int64_t b = 0; b < B; ++b) {
    for (int64_t g = 0; g < G; ++g) {
      std::fill(state_.begin(), state_.end(), 0.0f);
      int64_t added = 0;  // keys [0, added) are in S and z
      for (int64_t i = 0; i < p.q_len; ++i) {
        const int64_t end = VisibleEnd(p, i);
        for (; added < end; ++added) add_key(b, g, added);
        for (int64_t h = g * group; h < (g + 1) * group; ++h) emit(b, h, i, end > 0);
      }
    }
  }
  return absl::OkStatus();
}

std::vector<double> LinearAttentionReference(const LinearAttentionProblem& p,
                                             const LinearAttentionArgs& a) {
  const int64_t B = p.batch, H = p.num_heads, d = p.head_dim;
  std::vector<double> out(static_cast<size_t>(B * H * p.q_len * d), 0.0);
  std::vector<double> phi_q(d);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / p.num_kv_heads);
      for (int64_t i = 0; i < p.q_len; ++i) {
        for (int64_t r = 0; r < d; ++r) phi_q[r] = Phi(a.q.LoadF32(a.q.Offset(b, h, i, r)));
        double den = 0;
        double* oi = out.data() + ((b * H + h) * p.q_len + i) * d;
        const int64_t end = VisibleEnd(p, i);
        for (int64_t j = 0; j < end; ++j) {
          double w = 0;
          for (int64_t r = 0; r < d; ++r) w += phi_q[r] * Phi(a.k.LoadF32(a.k.Offset(b, g, j, r)));
          den += w;
          for (int64_t c = 0; c < d; ++c) oi[c] += w * a.v.LoadF32(a.v.Offset(b, g, j, c));
        }
        if (den > 0) {
          for (int64_t c = 0; c < d; ++c) oi[c] /= den;
        }
      }
    }
  }
  return out;
}

}  // namespace attnkit
