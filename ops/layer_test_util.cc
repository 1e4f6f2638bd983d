#include "ops/layer_test_util.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <tuple>

#include "backends/reference/reference_backend.h"

namespace attnkit {
namespace layer_test {
namespace {

const float* F(const Tensor& t) { return static_cast<const float*>(t.data()); }

// out[t, r] = sum_i in[t, i] * w[row0 + r, i] (+ b[row0 + r]) for r < rows.
std::vector<double> Slice(const float* in, int64_t T, int64_t D, const Tensor& w, const Tensor& b,
                          int64_t row0, int64_t rows) {
  std::vector<double> out(T * rows);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double s = b.view().empty() ? 0.0 : F(b)[row0 + r];
      for (int64_t i = 0; i < D; ++i) s += double(in[t * D + i]) * F(w)[(row0 + r) * D + i];
      out[t * rows + r] = s;
    }
  }
  return out;
}

// Softmax attention of one head: q [Tq, d], k [Tk, d], v [Tk, dv] -> o
// [Tq, dv] (dv: the value head dim).
// One head's attention in double; with the layer's sink (sink > -inf) and
// ALiBi slope (`slope` != 0) of that head.
std::vector<double> Attend(const AttentionProblem& p, int64_t Tq, int64_t Tk,
                           const std::vector<double>& q, const std::vector<double>& k,
                           const std::vector<double>& v,
                           double sink = -std::numeric_limits<double>::infinity(),
                           double slope = 0) {
  const int64_t d = p.head_dim, dv = p.value_dim();
  MaskParams m = p.mask_params();
  m.q_len = Tq;
  std::vector<double> o(Tq * dv, 0.0), s(Tk);
  for (int64_t i = 0; i < Tq; ++i) {
    const KeyRange keys = VisibleKeys(m, i, Tk);
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = keys.begin; j < keys.end; ++j) {
      s[j] = 0;
      for (int64_t c = 0; c < d; ++c) s[j] += q[i * d + c] * k[j * d + c];
      s[j] *= p.scale;
      s[j] -= slope * std::fabs(static_cast<double>(Diagonal(m, i, Tk) - j));
      mx = std::max(mx, s[j]);
    }
    mx = std::max(mx, sink);
    double sum = std::exp(sink - mx);  // 0 without a sink
    for (int64_t j = keys.begin; j < keys.end; ++j) sum += (s[j] = std::exp(s[j] - mx));
    for (int64_t j = keys.begin; j < keys.end; ++j) {
      for (int64_t c = 0; c < dv; ++c) o[i * dv + c] += s[j] / sum * v[j * dv + c];
    }
  }
  return o;
}

}  // namespace

std::vector<float> RandomActivations(int64_t B, int64_t T, int64_t D, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(B * T * D);
  for (float& v : x) v = u(rng);
  return x;
}

TensorView ActivationView(const float* data, int64_t B, int64_t T, int64_t D) {
  return ContiguousView(const_cast<float*>(data), DType::kF32, {B, T, D});
}

TensorView TokenSlice(const float* data, int64_t B, int64_t T, int64_t D, int64_t t0, int64_t n) {
  TensorView v = ActivationView(data + t0 * D, B, n, D);
  v.strides[0] = T * D;
  return v;
}

std::vector<double> SlowLayer(const MultiHeadAttention& layer, const float* x, int64_t B,
                              int64_t Tq, const float* context, int64_t Tk) {
  const AttentionProblem& p = layer.problem();
  const AttentionWeights& w = layer.weights();
  const int64_t D = p.model_dim, H = p.num_heads, d = p.head_dim, dv = p.value_dim();
  const int64_t Hdv = H * dv;
  std::vector<double> y(B * Tq * D, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const float* xb = x + b * Tq * D;
    const float* cb = context + b * Tk * D;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / p.num_kv_heads);
      const std::vector<double> q = Slice(xb, Tq, D, w.wq, w.bq, h * d, d);
      const std::vector<double> k = Slice(cb, Tk, D, w.wk, w.bk, g * d, d);
      const std::vector<double> v = Slice(cb, Tk, D, w.wv, w.bv, g * dv, dv);
      const double sink =
          w.sinks.view().empty() ? -std::numeric_limits<double>::infinity() : F(w.sinks)[h];
      const double slope = w.alibi_slopes.view().empty() ? 0.0 : F(w.alibi_slopes)[h];
      const std::vector<double> o = Attend(p, Tq, Tk, q, k, v, sink, slope);
      for (int64_t t = 0; t < Tq; ++t) {
        for (int64_t r = 0; r < D; ++r) {
          double s = 0;
          for (int64_t c = 0; c < dv; ++c) s += o[t * dv + c] * F(w.wo)[r * Hdv + h * dv + c];
          y[(b * Tq + t) * D + r] += s;
        }
      }
    }
  }
  if (!w.bo.view().empty()) {
    for (int64_t i = 0; i < B * Tq; ++i) {
      for (int64_t r = 0; r < D; ++r) y[i * D + r] += F(w.bo)[r];
    }
  }
  return y;
}

std::vector<double> ReshapeBugLayer(const MultiHeadAttention& layer, const float* x, int64_t B,
                                    int64_t T) {
  const AttentionProblem& p = layer.problem();
  const AttentionWeights& w = layer.weights();
  const int64_t D = p.model_dim, H = p.num_heads, G = p.num_kv_heads, d = p.head_dim;
  // Projections of all B*T rows: [B*T, H*d] and [B*T, G*d].
  std::vector<double> q, k, v;
  for (int64_t b = 0; b < B; ++b) {
    for (auto [out, wt, bt, rows] :
         {std::make_tuple(&q, &w.wq, &w.bq, H * d), std::make_tuple(&k, &w.wk, &w.bk, G * d),
          std::make_tuple(&v, &w.wv, &w.bv, G * d)}) {
      const std::vector<double> part = Slice(x + b * T * D, T, D, *wt, *bt, 0, rows);
      out->insert(out->end(), part.begin(), part.end());
    }
  }
  // The bug: head h of sequence b is the contiguous block [(b*H + h)*T*d, +T*d).
  std::vector<double> o(B * T * H * d);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / G);
      auto block = [&](const std::vector<double>& src, int64_t heads, int64_t head) {
        const auto begin = src.begin() + ((b * heads + head) * T) * d;
        return std::vector<double>(begin, begin + T * d);
      };
      const std::vector<double> oh =
          Attend(p, T, T, block(q, H, h), block(k, G, g), block(v, G, g));
      std::copy(oh.begin(), oh.end(), o.begin() + ((b * H + h) * T) * d);
    }
  }
  std::vector<double> y(B * T * D, 0.0);
  for (int64_t i = 0; i < B * T; ++i) {
    for (int64_t r = 0; r < D; ++r) {
      double s = w.bo.view().empty() ? 0.0 : F(w.bo)[r];
      for (int64_t c = 0; c < H * d; ++c) s += o[i * H * d + c] * F(w.wo)[r * H * d + c];
      y[i * D + r] = s;
    }
  }
  return y;
}

SpyBackend::SpyBackend(bool device_mode)
    : device_(device_mode), reference_(MakeReferenceBackend("spy-inner")) {}

absl::Status SpyBackend::ForwardImpl(const AttentionProblem& p, const AttentionArgs& args,
                                     RunInfo* info) {
  calls_.push_back(args);
  return reference_->Forward(p, args, info);
}

AttentionConfig LayerConfig(int64_t heads, int64_t kv_heads, int64_t head_dim, bool causal,
                            const std::string& backend) {
  AttentionConfig c;
  c.set_num_heads(heads);
  c.set_num_kv_heads(kv_heads);
  c.set_head_dim(head_dim);
  c.set_model_dim(heads * head_dim);
  if (causal) c.mutable_mask()->set_kind(MaskSpec::CAUSAL);
  c.set_backend(backend);
  return c;
}

}  // namespace layer_test
}  // namespace attnkit
