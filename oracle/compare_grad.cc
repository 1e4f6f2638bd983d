#include "oracle/compare_grad.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/fast_compute.h"

namespace attnkit {
namespace {

// The bound. The reference (oracle/reference_backward.h) computes in fp64 from
// the exact stored inputs, so a correct backend errs only through fp32
// arithmetic, through the forward's O and lse it reads (themselves within
// oracle/compare.h's bound, O rounded to its dtype), and through rounding the
// gradients into their dtypes. The model is a FlashAttention-2 style fp32
// kernel: D_i = dO_i . O_i from the stored O, P_ij = exp(s_ij - lse_i) from
// recomputed fp32 scores and the stored lse, dP_ij = dO_i . v_j, dS_ij =
// P_ij (dP_ij - D_i), then the three products. With u = 2^-24, g(m) =
// min(m, 4 sqrt(m)) (compare.h), for row i with n visible keys and the
// forward's score error E (BoundForRow: u (g(d) max scale|q.k| + 8 max|s| +
// 2 max|b|)); d is E, Q's and K's head dim, and dv is Ev, V's, O's and dO's
// (config.proto value_head_dim; d when unset); every quantity's error is written relative to its
// magnitude in ReferenceGradients (sums of absolute values of terms, "abs" below):
//
//   lse : stored f32 with error  L = E + (g(n) + 12) u + u |lse|,
//         |lse| <= max_j |s_j| + log n
//   P   : exp(s - lse) with s off by E, lse by L, exp 8 ulp, subtraction 2u:
//         dP_rel = E + L + 10 u
//   O   : forward bound 1.01 (2E + (3 g(n) + 20) u) A_c, A_c = sum_j P_j |v_jc|,
//         then rounded to O's dtype: half an ulp, u_o = eps(dtype) / 2 relative
//         to max(A_c, smallest normal) (the floor the reference builds into
//         D's magnitude, so a bf16 O costs 2^-8 D_abs here, not u)
//   D   : the dv-term fp32 dot product adds (g(dv) + 2) u:
//         eps_D = 1.01 (2E + (3 g(n) + 20) u) + u_o + (g(dv) + 2) u
//         (a kernel that sums P_ij dP_ij instead stays inside this too)
//   dP  : (g(dv) + 1) u relative to dP_abs = sum_c |dO_c v_jc|
//   dS  = P (dP - D): relative to P (dP_abs + D_abs),
//         eps_S = dP_rel + eps_D + (g(dv) + 3) u   (subtract, multiply)
//   dX  = dS (1 - t^2) with softcap: t = tanh(x / c) moves by (1 - t^2) dx / c
//         with dx <= E, so 1 - t^2 errs by (2E / c + 3u) relative plus a few u
//         absolute (where tanh saturates); the reference's magnitude of the
//         factor is (1 - t^2) + 2^-20 to carry the latter:
//         eps_X = eps_S + 2E / c + 4 u   (eps_S without softcap)
//   dQ_i  = scale sum_j dX_ij k_j (n terms):  1.01 (eps_X + (g(n) + 2) u) dq_abs
//   dK_j  = scale sum_{h,i} dX_ij q_i over the group's rows, m <= (H / G) Tq
//           terms: 1.01 (max_rows eps_X + (g(m) + 2) u) dk_abs
//   dV_j  = sum_{h,i} P_ij dO_i: 1.01 (max_rows dP_rel + (g(m) + 2) u) dv_abs
//   dBias = dS (f32): 1.01 eps_S dbias_abs
// Sinks: the lse and O carry the fold's terms of the forward bound
// (compare.h: L gains (12 + |lse|) u, O's factor L + (shift + 20) u), and
//   dSink_h = -sum_{b,i} P_sink D_i with P_sink = exp(sink - lse_i) erring
//         like any weight (dP_rel) and D by eps_D, over m = B Tq rows:
//         1.01 (max_rows (dP_rel + eps_D) + (g(m) + 2) u) dsinks_abs,
//         dsinks_abs = sum P_sink D_abs.
// Underflow: a weight P_ij below fp32's normal range (a score hundreds below
// the row's lse) may come out as a subnormal or, with flush-to-zero, as 0:
// an absolute error up to 2^-126 per weight, not relative to P. The
// reference counts each weight's magnitude as at least 2^-100, so every eps
// above (each at least 3u > 2^-22) times that floor exceeds 2^-126 in the
// same products. (Subnormal products of normal weights, which need dO or V
// near 1e-38, are not covered.)
// FAST (core/fast_compute.h). The forward's O read here carries its own
// FAST rounding of P (compare.h): at most w (A_c + |O_c|) + W_c with
// w = 1.01 FastWeightRoundoff and W_c its absolute floor (BoundForRow's
// weight_floor). |O_c| <= A_c, and the reference counts each |O_c| in
// D's magnitude as at least F = W_c / w (reference_backward.cc), so the
// error is at most 3 w max(A_c, F):
//   eps_D += 3 w.
// With FastRoundsGradOperands the backward rounds P (before dV) and dX
// (before dQ and dK) to bf16: a relative error of u16 = 2^-8 each, or, for
// a value flushed below 2^-63, an absolute one under 2^-63, which u16 times
// the reference's magnitude floor for those operands (2^-55) covers:
//   dV: eps_v += 1.01 u16;  dQ, dK: eps_X += u16 (then the usual 1.01).
// Q, K and dO are bf16 as stored; the products and sums stay f32.
// (max_rows: over the rows of the batch entry and KV group; every row's
// terms are a sum of non-negative parts, so the largest row's eps bounds
// each row's share of the sum.) Each element then adds half an ulp of its
// dtype at |ref| + that f32 error, and half the dtype's smallest subnormal
// (the floor near zero). A row with no visible key must give dq = 0
// exactly; a key no row sees has dk = dv = 0 within that floor, a blocked
// pair dbias = 0 within it.
constexpr double kU = 1.0 / (1 << 24);

double Growth(int64_t m) { return std::min(double(m), 4 * std::sqrt(double(m))); }

// u16 = 2^-8 where FAST rounds P and dX to bf16 in the backward, else 0.
double GradOperandRoundoff(const AttentionProblem& p) {
  return FastRoundsGradOperands(p) ? DTypeEpsilon(DType::kBF16) / 2 : 0.0;
}

// Relative error factors of one row (see above).
struct RowEps {
  double p = 0;   // dP_rel
  double s = 0;   // eps_S
  double x = 0;   // eps_X
  double dq = 0;  // dQ's final factor
  double d = 0;   // eps_D
};

RowEps EpsForRow(const AttentionProblem& p, const RowErrorTerms& t) {
  const int64_t n = std::max<int64_t>(t.visible, 1);
  // Scores sum over E (head_dim); D = dO.O and dP = dO.v over Ev.
  const double gd = Growth(p.head_dim), gdv = Growth(p.value_dim()), gn = Growth(n);
  // ALiBi: 3 u |alibi| more (compare.h), from the maxima: the backward's
  // bound has no weighted form.
  const double e =
      kU * (gd * t.max_abs_dot + 8 * t.max_abs_score + 2 * t.max_abs_bias + 3 * t.max_abs_alibi);
  double lse = e + (gn + 12) * kU + kU * (t.max_abs_score + std::log(double(n)));
  double o_f32 = 2 * e + (3 * gn + 20) * kU;
  if (p.sinks) {  // the fold (compare.h)
    o_f32 += lse + (t.sink_shift + 20) * kU;
    lse += (12 + t.sink_abs_lse) * kU;
  }
  const double u_o = DTypeEpsilon(p.dtype) / 2;
  RowEps r;
  r.p = e + lse + 10 * kU;
  const double eps_d = 1.01 * o_f32 + u_o + (gdv + 2) * kU + 3 * 1.01 * FastWeightRoundoff(p);
  r.d = eps_d;
  r.s = r.p + eps_d + (gdv + 3) * kU;
  r.x = r.s + (p.softcap > 0 ? 2 * e / double(p.softcap) + 4 * kU : 0.0) + GradOperandRoundoff(p);
  r.dq = 1.01 * (r.x + (gn + 2) * kU);
  return r;
}

class Checker {
 public:
  explicit Checker(Comparison* c) : c_(c) {}

  // One element: `eps` times `magnitude` is its f32 error; `exact_zero`
  // demands exactly 0 (a fully blocked row's dq).
  template <typename Name>
  void Check(Name name, double got, double want, double magnitude, double eps, DType dtype,
             bool exact_zero) {
    ++c_->checked;
    if (!std::isfinite(want)) {  // a NaN or Inf input reached it: so must the backend's
      if (std::isfinite(got)) {
        ++c_->mismatches;
        Note(
            absl::StrFormat("%s = %.9g, must be NaN or Inf: the reference is %g (the element "
                            "reads a NaN or Inf input)",
                            name(), got, want));
      }
      return;
    }
    if (!std::isfinite(got)) {
      c_->non_finite = true;
      Note(absl::StrFormat("%s = %g, reference %.9g", name(), got, want));
      return;
    }
    const double err = std::fabs(got - want);
    double allowed = 0;
    if (!exact_zero) {
      const double f32 = eps * magnitude;
      allowed = f32 + 0.5 * DTypeUlp(dtype, std::fabs(want) + f32) + 0.5 * DTypeUlp(dtype, 0);
    }
    c_->max_abs_err = std::max(c_->max_abs_err, err);
    if (want != 0) c_->max_rel_err = std::max(c_->max_rel_err, err / std::fabs(want));
    c_->max_bound = std::max(c_->max_bound, allowed);
    if (allowed > 0) c_->max_bound_fraction = std::max(c_->max_bound_fraction, err / allowed);
    if (err > allowed) {
      ++c_->mismatches;
      Note(absl::StrFormat("%s = %.9g, reference %.9g, error %.3g > bound %.3g%s", name(), got,
                           want, err, allowed,
                           exact_zero ? " (a row with no visible key must give exactly 0)" : ""));
    }
  }

  void Note(const std::string& what) {
    if (c_->first_failure.empty()) c_->first_failure = what;
  }

 private:
  Comparison* c_;
};

}  // namespace

Comparison CompareGradients(const AttentionProblem& p, const GradArgs& grads,
                            const ReferenceGradients& ref) {
  Comparison c;
  Checker check(&c);
  const int64_t B = p.batch, H = p.num_heads, G = p.num_kv_heads, Tq = p.q_len, Tk = p.kv_len,
                d = p.head_dim, dv = p.value_dim();
  const size_t rows = static_cast<size_t>(B * H * Tq);
  if (ref.dq.size() != rows * d || ref.dk.size() != static_cast<size_t>(B * G * Tk * d) ||
      ref.dv.size() != static_cast<size_t>(B * G * Tk * dv) || ref.terms.size() != rows ||
      ref.visible.size() != rows) {
    ++c.mismatches;
    check.Note(absl::StrFormat(
        "%s: no reference gradients (paged, ragged and int8 problems have no backward "
        "reference)",
        p.Id()));
    return c;
  }
  if (grads.dq.empty() || grads.dk.empty() || grads.dv.empty()) {
    ++c.mismatches;
    check.Note(absl::StrFormat("%s: dq, dk and dv must all be given", p.Id()));
    return c;
  }
  const bool with_dbias = !grads.dbias.empty();
  const bool with_dsinks = !grads.dsinks.empty();
  if (with_dsinks && ref.dsinks.size() != static_cast<size_t>(H)) {
    ++c.mismatches;
    check.Note(absl::StrFormat("%s: dsinks given but the reference has none (sinks off)", p.Id()));
    return c;
  }
  std::vector<double> head_eps(static_cast<size_t>(H), 0.0);  // dsinks: max_rows (dP_rel + eps_D)
  if (with_dbias && ref.dbias.size() != rows * Tk) {
    ++c.mismatches;
    check.Note(
        absl::StrFormat("%s: dbias given but the reference has none (additive_bias off)", p.Id()));
    return c;
  }

  // dq and dbias, row by row; the largest eps of each (b, g) for dk and dv.
  std::vector<double> group_x(static_cast<size_t>(B * G), 0.0), group_p(group_x.size(), 0.0);
  const auto* dbias = static_cast<const float*>(grads.dbias.data);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const size_t group = static_cast<size_t>(b * G + p.KvHead(h));
      for (int64_t i = 0; i < Tq; ++i) {
        const size_t row = static_cast<size_t>((b * H + h) * Tq + i);
        const RowEps eps = EpsForRow(p, ref.terms[row]);
        const bool blocked = ref.visible[row] == 0;
        if (!blocked) {
          group_x[group] = std::max(group_x[group], eps.x);
          group_p[group] = std::max(group_p[group], eps.p);
          head_eps[h] = std::max(head_eps[h], eps.p + eps.d);
        }
        for (int64_t x = 0; x < d; ++x) {
          const size_t at = row * d + x;
          check.Check([&] { return absl::StrFormat("dq[%d,%d,%d,%d]", b, h, i, x); },
                      grads.dq.LoadF32(grads.dq.Offset(b, h, i, x)), ref.dq[at], ref.dq_abs[at],
                      eps.dq, p.dtype, blocked);
        }
        if (!with_dbias) continue;
        for (int64_t j = 0; j < Tk; ++j) {
          const size_t at = row * Tk + j;
          check.Check([&] { return absl::StrFormat("dbias[%d,%d,%d,%d]", b, h, i, j); },
                      double(dbias[grads.dbias.Offset(b, h, i, j)]), ref.dbias[at],
                      ref.dbias_abs[at], 1.01 * eps.s, DType::kF32, false);
        }
      }
    }
  }
  if (with_dsinks) {
    const double grow = Growth(B * Tq);
    for (int64_t h = 0; h < H; ++h) {
      check.Check([&] { return absl::StrFormat("dsinks[%d]", h); },
                  double(static_cast<const float*>(grads.dsinks.data)[grads.dsinks.Offset(h)]),
                  ref.dsinks[h], ref.dsinks_abs[h], 1.01 * (head_eps[h] + (grow + 2) * kU),
                  DType::kF32, false);
    }
  }
  const double gm = Growth(p.group_size() * Tq);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t g = 0; g < G; ++g) {
      const size_t group = static_cast<size_t>(b * G + g);
      const double eps_k = 1.01 * (group_x[group] + (gm + 2) * kU);
      const double eps_v = 1.01 * (group_p[group] + (gm + 2) * kU + GradOperandRoundoff(p));
      for (int64_t j = 0; j < Tk; ++j) {
        for (int64_t x = 0; x < d; ++x) {
          const size_t at = (group * Tk + j) * d + x;
          check.Check([&] { return absl::StrFormat("dk[%d,%d,%d,%d]", b, g, j, x); },
                      grads.dk.LoadF32(grads.dk.Offset(b, g, j, x)), ref.dk[at], ref.dk_abs[at],
                      eps_k, p.kv_dtype, false);
        }
        for (int64_t x = 0; x < dv; ++x) {
          const size_t at = (group * Tk + j) * dv + x;
          check.Check([&] { return absl::StrFormat("dv[%d,%d,%d,%d]", b, g, j, x); },
                      grads.dv.LoadF32(grads.dv.Offset(b, g, j, x)), ref.dv[at], ref.dv_abs[at],
                      eps_v, p.kv_dtype, false);
        }
      }
    }
  }
  return c;
}

}  // namespace attnkit
