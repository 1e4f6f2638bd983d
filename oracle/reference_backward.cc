#include "oracle/reference_backward.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/alibi.h"
#include "core/fast_compute.h"
#include "core/mask.h"
#include "oracle/compare.h"
#include "oracle/reference_f64.h"

namespace attnkit {
namespace internal {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// The least magnitude of a weight P_ij: fp32 kernels flush or round weights
// below 2^-126 (exp of a very negative score), an absolute error the bound's
// factor (at least 2^-22) times this floor covers (oracle/compare_grad.cc).
constexpr double kWeightMagnitudeFloor = 0x1p-100;
// Under FastRoundsGradOperands the backward may flush a P or dX below
// kFastGradFlush (2^-63) to 0 before its product: the magnitudes of the
// weights in dV and of dX in dQ and dK count as at least 2^-55, which the
// bound's rounding term (2^-8) turns into 2^-63 (oracle/compare_grad.cc).
constexpr double kFastOperandMagnitudeFloor = 0x1p-55;
// Added to the magnitude of softcap's derivative 1 - tanh^2: fp32 evaluates
// it to an absolute error of a few u = 2^-24 (oracle/compare_grad.cc).
constexpr double kSoftcapDerivativeFloor = 0x1p-20;

size_t RowIndex(const AttentionProblem& p, int64_t b, int64_t h, int64_t i) {
  return static_cast<size_t>((b * p.num_heads + h) * p.q_len + i);
}
size_t KeyIndex(const AttentionProblem& p, int64_t b, int64_t g, int64_t j) {
  return static_cast<size_t>((b * p.num_kv_heads + g) * p.kv_len + j);
}

// Row (b, h, i) of the forward in double, over keys [0, Tk) (only entries in
// `range` mean anything): which pairs are allowed (not blocked by any rule),
// x_j = scale q.k_j, t_j = tanh(x_j / softcap), P_j, and the row's lse.
struct RowForward {
  explicit RowForward(const AttentionProblem& p)
      : allowed(static_cast<size_t>(p.kv_len)),
        x(allowed.size()),
        t(allowed.size()),
        prob(allowed.size()) {}

  void Compute(const AttentionProblem& p, const F64Inputs& in, int64_t b, int64_t h, int64_t i);

  KeyRange range{0, 0};
  std::vector<uint8_t> allowed;
  std::vector<double> x, t, prob;
  int64_t visible = 0;
  bool poisoned = false;  // reads a NaN or Inf (oracle/reference.h): every P_j is NaN
  double lse = -kInf;
  RowErrorTerms terms;
};

void RowForward::Compute(const AttentionProblem& p, const F64Inputs& in, int64_t b, int64_t h,
                         int64_t i) {
  const int64_t d = p.head_dim, dv = p.value_dim(), Tk = p.kv_len;
  const int64_t g = p.KvHead(h);
  const size_t row = RowIndex(p, b, h, i);
  const double* q = &in.q[row * d];
  const double scale = p.scale, softcap = p.softcap;
  range = VisibleKeys(p.mask_params(b), i, p.KvLength(b));
  const int64_t diag = Diagonal(p.mask_params(b), i, p.KvLength(b));
  visible = 0;
  poisoned = false;
  terms = RowErrorTerms{};
  double max_score = -kInf, sum_max_abs_v = 0;
  for (int64_t j = range.begin; j < range.end; ++j) {
    const size_t pair = row * Tk + j;
    allowed[j] = 0;
    if (!in.blocked.empty() && in.blocked[pair] != 0) continue;
    const double bias = in.bias.empty() ? 0.0 : in.bias[pair];
    if (bias == -kInf) continue;  // -inf blocks the pair: k_j, v_j not read
    allowed[j] = 1;
    ++visible;
    if (!(bias < kInf)) poisoned = true;  // NaN or +inf
    const double* k = &in.k[KeyIndex(p, b, g, j) * d];
    const double* v = &in.v[KeyIndex(p, b, g, j) * dv];
    double dot = 0, abs_dot = 0;
    for (int64_t c = 0; c < d; ++c) {
      dot += q[c] * k[c];
      abs_dot += std::fabs(q[c] * k[c]);
    }
    double max_abs_v = 0;
    for (int64_t c = 0; c < dv; ++c) {
      if (!std::isfinite(v[c])) poisoned = true;
      max_abs_v = std::max(max_abs_v, std::fabs(v[c]));
    }
    sum_max_abs_v += max_abs_v;
    if (!std::isfinite(dot)) poisoned = true;
    x[j] = scale * dot;
    double s = x[j];
    if (softcap > 0) {
      t[j] = std::tanh(x[j] / softcap);
      s = softcap * t[j];
    }
    double alibi = 0;  // exact; a term not finite in f32 poisons (reference.h)
    if (!in.alibi_slopes.empty()) {
      const float slope = in.alibi_slopes[static_cast<size_t>(h)];
      if (!std::isfinite(AlibiTerm(slope, diag, j))) poisoned = true;
      alibi = -double(slope) * double(std::llabs(diag - j));
    }
    s += bias + alibi;
    prob[j] = s;  // the score, until the exponentials below
    if (s > max_score) max_score = s;
    terms.visible = visible;
    terms.max_abs_dot = std::max(terms.max_abs_dot, scale * abs_dot);
    terms.max_abs_score = std::max(terms.max_abs_score, std::fabs(s));
    terms.max_abs_bias = std::max(terms.max_abs_bias, std::fabs(bias + alibi));
    terms.max_abs_alibi = std::max(terms.max_abs_alibi, std::fabs(alibi));
  }
  // The head's sink (oracle/reference.h's rule): -inf is none; NaN or +inf
  // poisons the row.
  const double sink = in.sinks.empty() ? -kInf : in.sinks[static_cast<size_t>(h)];
  if (!(sink < kInf)) poisoned = true;
  if (poisoned) {
    lse = kNaN;
    terms = RowErrorTerms{};
    for (int64_t j = range.begin; j < range.end; ++j) prob[j] = kNaN;
    return;
  }
  if (visible == 0) {
    lse = sink;  // -inf without a sink
    return;
  }
  const double m = std::max(max_score, sink);
  double keys = 0;      // the keys' share of the sum, without the sink
  double unscaled = 0;  // sum_j exp(s_j - max s), as oracle/reference.cc
  for (int64_t j = range.begin; j < range.end; ++j) {
    if (!allowed[j]) continue;
    keys += std::exp(prob[j] - m);
    unscaled += std::exp(prob[j] - max_score);
  }
  lse = m + std::log(keys + (sink > -kInf ? std::exp(sink - m) : 0.0));
  // As oracle/reference.cc: over the keys' weights relative to their max.
  terms.sum_max_abs_v = sum_max_abs_v / unscaled;
  if (sink > -kInf) {  // the forward bound's fold terms (oracle/compare.h)
    terms.sink_shift = lse - (m + std::log(keys));
    terms.sink_abs_lse = std::fabs(lse);
  }
  for (int64_t j = range.begin; j < range.end; ++j) {
    if (allowed[j]) prob[j] = std::exp(prob[j] - lse);
  }
}

// The smallest positive normal of a float storage type: rounding to it errs
// by at most half an ulp of max(|x|, this).
double SmallestNormal(DType t) {
  return t == DType::kF16 ? std::ldexp(1.0, -14) : std::ldexp(1.0, -126);
}

}  // namespace

F64Inputs LoadF64Inputs(const AttentionProblem& p, const AttentionArgs& a, const TensorView& d_o) {
  const int64_t B = p.batch, H = p.num_heads, G = p.num_kv_heads, Tq = p.q_len, Tk = p.kv_len;
  F64Inputs in;
  // [B, heads, T, d] view -> canonical double array.
  auto load = [](const TensorView& t, int64_t batch, int64_t heads, int64_t tokens,
                 std::vector<double>* out) {
    const int64_t d = t.shape[3];
    out->resize(static_cast<size_t>(batch * heads * tokens * d));
    size_t x = 0;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < tokens; ++i)
          for (int64_t c = 0; c < d; ++c) (*out)[x++] = double(t.LoadF32(t.Offset(b, h, i, c)));
  };
  load(a.q, B, H, Tq, &in.q);
  load(d_o, B, H, Tq, &in.d_o);
  load(a.k, B, G, Tk, &in.k);
  load(a.v, B, G, Tk, &in.v);
  const size_t pairs = static_cast<size_t>(B * H * Tq * Tk);
  if (p.blocked_mask) {
    in.blocked.resize(pairs);
    const auto* m = static_cast<const uint8_t*>(a.blocked_mask.data);
    size_t x = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Tq; ++i)
          for (int64_t j = 0; j < Tk; ++j) in.blocked[x++] = m[a.blocked_mask.Offset(b, h, i, j)];
  }
  if (p.additive_bias) {
    in.bias.resize(pairs);
    const auto* bias = static_cast<const float*>(a.bias.data);
    size_t x = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Tq; ++i)
          for (int64_t j = 0; j < Tk; ++j) in.bias[x++] = double(bias[a.bias.Offset(b, h, i, j)]);
  }
  if (p.alibi) {
    const auto* slopes = static_cast<const float*>(a.alibi_slopes.data);
    for (int64_t h = 0; h < H; ++h) in.alibi_slopes.push_back(slopes[a.alibi_slopes.Offset(h)]);
  }
  if (p.sinks) {
    const auto* sinks = static_cast<const float*>(a.sinks.data);
    for (int64_t h = 0; h < H; ++h) in.sinks.push_back(double(sinks[a.sinks.Offset(h)]));
  }
  return in;
}

void ForwardF64(const AttentionProblem& p, const F64Inputs& in, std::vector<double>* o,
                std::vector<double>* lse) {
  const int64_t d = p.value_dim();  // O's head dim
  o->assign(static_cast<size_t>(p.batch * p.num_heads * p.q_len * d), 0.0);
  lse->assign(static_cast<size_t>(p.batch * p.num_heads * p.q_len), 0.0);
  RowForward f(p);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.num_heads; ++h) {
      const int64_t g = p.KvHead(h);
      for (int64_t i = 0; i < p.q_len; ++i) {
        const size_t row = RowIndex(p, b, h, i);
        f.Compute(p, in, b, h, i);
        (*lse)[row] = f.lse;
        double* out = &(*o)[row * d];
        if (f.poisoned) {
          std::fill(out, out + d, kNaN);
          continue;
        }
        for (int64_t j = f.range.begin; j < f.range.end; ++j) {
          if (!f.allowed[j]) continue;
          const double* v = &in.v[KeyIndex(p, b, g, j) * d];
          for (int64_t c = 0; c < d; ++c) out[c] += f.prob[j] * v[c];
        }
      }
    }
  }
}

ReferenceGradients BackwardF64(const AttentionProblem& p, const F64Inputs& in) {
  const int64_t B = p.batch, H = p.num_heads, G = p.num_kv_heads, Tq = p.q_len, Tk = p.kv_len,
                d = p.head_dim, dv = p.value_dim();  // Q, K, dQ, dK: E; V, dO, dV: Ev
  const double scale = p.scale, softcap = p.softcap;
  const double o_floor = SmallestNormal(p.dtype);
  const double fast_weights = FastWeightRoundoff(p);
  const double operand_floor = FastRoundsGradOperands(p) ? kFastOperandMagnitudeFloor : 0.0;
  ReferenceGradients r;
  r.dq.assign(static_cast<size_t>(B * H * Tq * d), 0.0);
  r.dq_abs.assign(r.dq.size(), 0.0);
  r.dk.assign(static_cast<size_t>(B * G * Tk * d), 0.0);
  r.dk_abs.assign(r.dk.size(), 0.0);
  r.dv.assign(static_cast<size_t>(B * G * Tk * dv), 0.0);
  r.dv_abs.assign(r.dv.size(), 0.0);
  if (p.additive_bias) {
    r.dbias.assign(static_cast<size_t>(B * H * Tq * Tk), 0.0);
    r.dbias_abs.assign(r.dbias.size(), 0.0);
  }
  if (!in.sinks.empty()) {
    r.dsinks.assign(static_cast<size_t>(H), 0.0);
    r.dsinks_abs.assign(r.dsinks.size(), 0.0);
  }
  r.visible.assign(static_cast<size_t>(B * H * Tq), 0);
  r.terms.assign(r.visible.size(), RowErrorTerms{});

  RowForward f(p);
  std::vector<double> o(static_cast<size_t>(dv)), abs_o(o.size());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = p.KvHead(h);
      for (int64_t i = 0; i < Tq; ++i) {
        const size_t row = RowIndex(p, b, h, i);
        f.Compute(p, in, b, h, i);
        r.visible[row] = f.visible;
        r.terms[row] = f.terms;
        // A NaN row of a head with a sink (a NaN or +inf sink poisons every
        // row, even one that sees no key) makes dsinks NaN, as D and P_sink.
        if (!in.sinks.empty() && !(in.sinks[h] == -kInf) && f.poisoned) r.dsinks[h] = kNaN;
        if (f.visible == 0) continue;  // contributes nothing; dq row stays 0
        const double* q = &in.q[row * d];
        const double* d_o = &in.d_o[row * dv];
        // O_i and A_c = sum_j P_j |v_jc|, then D_i = dO_i . O_i and its magnitude.
        std::fill(o.begin(), o.end(), 0.0);
        std::fill(abs_o.begin(), abs_o.end(), 0.0);
        for (int64_t j = f.range.begin; j < f.range.end; ++j) {
          if (!f.allowed[j]) continue;
          const double* v = &in.v[KeyIndex(p, b, g, j) * dv];
          for (int64_t c = 0; c < dv; ++c) {
            o[c] += f.prob[j] * v[c];
            abs_o[c] += f.prob[j] * std::fabs(v[c]);
          }
        }
        // Under FAST the forward's O also errs by its weights' rounding:
        // relative to A_c, and absolutely (weights below the normal range;
        // BoundForRow's weight_floor), which the magnitude of each |O_c|
        // carries as a floor of that absolute error over the relative one
        // (oracle/compare_grad.cc).
        double row_o_floor = o_floor;
        if (fast_weights > 0) {
          row_o_floor = std::max(o_floor, BoundForRow(p, f.terms).weight_floor / fast_weights);
        }
        double D = 0, D_abs = 0;
        for (int64_t c = 0; c < dv; ++c) {
          D += d_o[c] * o[c];
          D_abs += std::fabs(d_o[c]) * std::max(abs_o[c], row_o_floor);
        }
        if (!in.sinks.empty() && !(in.sinks[h] == -kInf)) {  // dSink_h = -sum P_sink D
          const double p_sink = std::exp(in.sinks[h] - f.lse);
          r.dsinks[h] -= p_sink * D;
          r.dsinks_abs[h] += std::max(p_sink, kWeightMagnitudeFloor) * D_abs;
        }
        double* dq = &r.dq[row * d];
        double* dq_abs = &r.dq_abs[row * d];
        for (int64_t j = f.range.begin; j < f.range.end; ++j) {
          if (!f.allowed[j]) continue;
          const size_t key = KeyIndex(p, b, g, j);
          const double* k = &in.k[key * d];
          const double* v = &in.v[key * dv];
          const double P = f.prob[j];
          double dP = 0, dP_abs = 0;
          for (int64_t c = 0; c < dv; ++c) {
            dP += d_o[c] * v[c];
            dP_abs += std::fabs(d_o[c] * v[c]);
          }
          const double dS = P * (dP - D);
          const double P_abs = std::max(P, kWeightMagnitudeFloor);
          const double dS_abs = P_abs * (dP_abs + D_abs);
          if (p.additive_bias) {
            r.dbias[row * Tk + j] = dS;
            r.dbias_abs[row * Tk + j] = dS_abs;
          }
          double deriv = 1, deriv_abs = 1;  // ds/dx
          if (softcap > 0) {
            deriv = 1 - f.t[j] * f.t[j];
            deriv_abs = deriv + kSoftcapDerivativeFloor;
          }
          const double dX = dS * deriv, dX_abs = std::max(dS_abs * deriv_abs, operand_floor);
          const double P_dv_abs = std::max(P_abs, operand_floor);
          double* dk = &r.dk[key * d];
          double* dk_abs = &r.dk_abs[key * d];
          double* dv_row = &r.dv[key * dv];
          double* dv_abs = &r.dv_abs[key * dv];
          for (int64_t c = 0; c < d; ++c) {
            dq[c] += scale * dX * k[c];
            dq_abs[c] += scale * dX_abs * std::fabs(k[c]);
            dk[c] += scale * dX * q[c];
            dk_abs[c] += scale * dX_abs * std::fabs(q[c]);
          }
          for (int64_t c = 0; c < dv; ++c) {
            dv_row[c] += P * d_o[c];
            dv_abs[c] += P_dv_abs * std::fabs(d_o[c]);
          }
        }
      }
    }
  }
  return r;
}

}  // namespace internal

ReferenceGradients ComputeReferenceBackward(const AttentionProblem& p, const AttentionArgs& a,
                                            const TensorView& d_o) {
  if (p.is_paged() || p.is_ragged() || !IsFloatStorage(p.dtype) || !IsFloatStorage(p.kv_dtype)) {
    return ReferenceGradients{};  // no backward reference (reference_backward.h)
  }
  return internal::BackwardF64(p, internal::LoadF64Inputs(p, a, d_o));
}

}  // namespace attnkit
