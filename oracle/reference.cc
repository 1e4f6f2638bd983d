#include "oracle/reference.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/alibi.h"
#include "core/fast_compute.h"
#include "core/kv_rows.h"
#include "core/ragged.h"

namespace attnkit {

double ReferenceRow(const AttentionProblem& p, const AttentionArgs& a, int64_t b, int64_t h,
                    int64_t i, std::vector<double>* scores, double* o_row, double* abs_o_row,
                    RowErrorTerms* terms) {
  const int64_t d = p.head_dim, dv = p.value_dim();  // Q.K over E, P.V over Ev
  const int64_t g = p.KvHead(h);
  const int64_t kv_length = p.KvLength(b);
  const KeyRange range = VisibleKeys(p.mask_params(b), i, kv_length);
  const int64_t diag = Diagonal(p.mask_params(b), i, kv_length);  // ALiBi's origin
  const float slope =
      p.alibi ? static_cast<const float*>(a.alibi_slopes.data)[a.alibi_slopes.Offset(h)] : 0.0f;
  // K/V row j of (b, g), dense or paged; int8 rows times their scale.
  const KvRows rows(p, a);
  const bool int8 = IsScaledKv(p.kv_dtype);  // int8 or fp8: times the row's scale
  auto scale_of = [&](const TensorView& sv, int64_t j) {
    return int8 ? double(static_cast<const float*>(sv.data)[rows.ScaleOffset(sv, b, g, j)]) : 1.0;
  };
  const double kNegInf = -std::numeric_limits<double>::infinity();
  std::vector<double>& s = *scores;
  // The q row as the problem multiplies it (FAST may round it: see above).
  std::vector<double> q(static_cast<size_t>(d));
  {
    std::vector<float> qf(static_cast<size_t>(d));
    for (int64_t c = 0; c < d; ++c) qf[c] = a.q.LoadF32(a.q.Offset(b, h, i, c));
    if (FastRoundsQuery(p) && p.kv_dtype == DType::kI8) {
      std::vector<int8_t> qi(static_cast<size_t>(d));
      const double qs = QuantizeQueryRow(qf.data(), d, qi.data());
      for (int64_t c = 0; c < d; ++c) q[c] = double(qi[c]) * qs;  // NaN scale: NaN row
    } else {
      for (int64_t c = 0; c < d; ++c) {
        q[c] = FastRoundsQuery(p) ? RoundQueryValue(qf[c], p.kv_dtype) : qf[c];
      }
    }
  }
  double max_abs_q = 0;
  for (int64_t c = 0; c < d; ++c) max_abs_q = std::max(max_abs_q, std::fabs(q[c]));

  double max_score = kNegInf;
  bool poisoned = false;  // the row reads a NaN or Inf (see reference.h)
  // ALiBi rows: each key's scale sum_c |q_c k_jc| and |bias_j + alibi_j|, to
  // be weighted by p_j below (terms->weighted_*).
  std::vector<double> key_abs_dot, key_abs_add;
  if (p.alibi && terms != nullptr) {
    key_abs_dot.assign(static_cast<size_t>(p.kv_len), 0.0);
    key_abs_add.assign(static_cast<size_t>(p.kv_len), 0.0);
  }
  for (int64_t j = range.begin; j < range.end; ++j) {
    s[j] = kNegInf;
    if (p.blocked_mask &&
        static_cast<const uint8_t*>(a.blocked_mask.data)[a.blocked_mask.Offset(b, h, i, j)] != 0) {
      continue;
    }
    double bias = 0;
    if (p.additive_bias) {
      bias = double(static_cast<const float*>(a.bias.data)[a.bias.Offset(b, h, i, j)]);
      if (bias == kNegInf) continue;  // -inf blocks the pair: k_j, v_j not read
      if (!(bias < std::numeric_limits<double>::infinity())) poisoned = true;  // NaN, +inf
    }
    // ALiBi: exact here; a term that is not finite in f32 (the backends'
    // arithmetic, core/alibi.h) poisons the row like a NaN bias.
    double alibi = 0;
    if (p.alibi) {
      if (!std::isfinite(AlibiTerm(slope, diag, j))) poisoned = true;
      alibi = -double(slope) * double(std::llabs(diag - j));
    }
    double dot = 0, abs_dot = 0, max_abs_k = 0;
    const int64_t k_row = rows.Offset(a.k, b, g, j);
    const double k_scale = scale_of(a.k_scale, j);
    for (int64_t c = 0; c < d; ++c) {
      const double kc = double(a.k.LoadF32(k_row + c * a.k.strides[3])) * k_scale;
      const double qk = q[c] * kc;
      dot += qk;
      abs_dot += std::fabs(qk);
      max_abs_k = std::max(max_abs_k, std::fabs(kc));
    }
    // Products of floats cannot overflow a double: a non-finite dot product
    // means a NaN or Inf in q or k_j.
    if (!std::isfinite(dot)) poisoned = true;
    const int64_t v_row = rows.Offset(a.v, b, g, j);
    const double v_scale = scale_of(a.v_scale, j);
    for (int64_t c = 0; c < dv && !poisoned; ++c) {
      if (!std::isfinite(a.v.LoadF32(v_row + c * a.v.strides[3]) * v_scale)) poisoned = true;
    }
    if (poisoned) continue;
    double score = double(p.scale) * dot;
    if (p.softcap > 0) score = double(p.softcap) * std::tanh(score / double(p.softcap));
    score += bias + alibi;
    s[j] = score;
    if (score > max_score) max_score = score;
    if (terms != nullptr) {
      ++terms->visible;
      terms->max_abs_dot = std::max(terms->max_abs_dot, double(p.scale) * abs_dot);
      terms->max_abs_score = std::max(terms->max_abs_score, std::fabs(score));
      terms->max_abs_bias = std::max(terms->max_abs_bias, std::fabs(bias + alibi));
      terms->max_abs_alibi = std::max(terms->max_abs_alibi, std::fabs(alibi));
      if (!key_abs_dot.empty()) {
        key_abs_dot[j] = double(p.scale) * abs_dot;
        key_abs_add[j] = std::fabs(bias + alibi);
      }
      terms->max_abs_operand = std::max({terms->max_abs_operand, max_abs_q, max_abs_k});
    }
  }

  // The head's sink (config.proto sinks): -inf is none; NaN or +inf poisons.
  double sink = kNegInf;
  if (p.sinks) {
    sink = double(static_cast<const float*>(a.sinks.data)[a.sinks.Offset(h)]);
    if (!(sink < std::numeric_limits<double>::infinity())) poisoned = true;
  }
  if (poisoned) {
    const double kNaN = std::numeric_limits<double>::quiet_NaN();
    for (int64_t c = 0; c < dv; ++c) o_row[c] = kNaN;
    if (abs_o_row != nullptr) {
      for (int64_t c = 0; c < dv; ++c) abs_o_row[c] = 0;
    }
    if (terms != nullptr) *terms = RowErrorTerms{};
    return kNaN;
  }
  for (int64_t c = 0; c < dv; ++c) o_row[c] = 0;
  if (abs_o_row != nullptr) {
    for (int64_t c = 0; c < dv; ++c) abs_o_row[c] = 0;
  }
  if (max_score == kNegInf) {  // fully blocked row: 0, and the sink's lse if any
    if (terms != nullptr && sink > kNegInf) terms->sink_abs_lse = std::fabs(sink);
    return sink;
  }
  double sum = 0, sum_max_abs_v = 0, all_max_abs_v = 0;
  RowErrorTerms weighted;  // ALiBi rows: the weighted_* sums, unnormalised
  // FAST int8 V: each aligned block's largest exp(s_j - max s) |v_scale_j|.
  const bool grid = terms != nullptr && FastQuantizesWeights(p);
  std::vector<double> block_max;
  if (grid) block_max.assign(static_cast<size_t>(p.kv_len / kFastWeightBlock + 1), 0.0);
  for (int64_t j = range.begin; j < range.end; ++j) {
    if (s[j] == kNegInf) continue;  // blocked: v_j is never read
    const double w = std::exp(s[j] - max_score);
    sum += w;
    if (!key_abs_dot.empty()) {
      weighted.weighted_abs_dot += w * key_abs_dot[j];
      weighted.weighted_abs_score += w * std::fabs(s[j]);
      weighted.weighted_abs_bias += w * key_abs_add[j];
      weighted.weighted_abs_alibi += w * double(slope) * double(std::llabs(diag - j));
    }
    const int64_t v_row = rows.Offset(a.v, b, g, j);
    const double v_scale = scale_of(a.v_scale, j);
    if (grid) {
      double& bm = block_max[static_cast<size_t>(j / kFastWeightBlock)];
      bm = std::max(bm, w * std::fabs(v_scale));
    }
    double max_abs_v = 0;
    for (int64_t c = 0; c < dv; ++c) {
      const double v = double(a.v.LoadF32(v_row + c * a.v.strides[3])) * v_scale;
      o_row[c] += w * v;
      if (abs_o_row != nullptr) abs_o_row[c] += w * std::fabs(v);
      max_abs_v = std::max(max_abs_v, std::fabs(v));
    }
    sum_max_abs_v += max_abs_v;
    all_max_abs_v = std::max(all_max_abs_v, max_abs_v);
  }
  if (terms != nullptr) terms->sum_max_abs_v = sum_max_abs_v / sum;
  if (grid) {
    const int64_t blocks = static_cast<int64_t>(block_max.size());
    double total = 0;
    for (int64_t j = range.begin; j < range.end; ++j) {
      if (s[j] == kNegInf) continue;
      const int64_t x = j / kFastWeightBlock;
      double w = block_max[static_cast<size_t>(x)];
      if (x > 0) w = std::max(w, block_max[static_cast<size_t>(x - 1)]);
      if (x + 1 < blocks) w = std::max(w, block_max[static_cast<size_t>(x + 1)]);
      total += w;
    }
    terms->weight_grid = total / sum;
  }
  if (!key_abs_dot.empty()) {
    terms->weighted_abs_dot = weighted.weighted_abs_dot / sum;
    terms->weighted_abs_score = weighted.weighted_abs_score / sum;
    terms->weighted_abs_bias = weighted.weighted_abs_bias / sum;
    terms->weighted_abs_alibi = std::fabs(weighted.weighted_abs_alibi) / sum;
    terms->abs_max_score = std::fabs(max_score);
    terms->max_abs_v_folded = all_max_abs_v;  // times the sink's factor below
  }
  // The sink joins the denominator only: sum_j w_j + exp(sink - max_score),
  // taken from the larger of the two maxima so that nothing overflows.
  const double keys_lse = max_score + std::log(sum);
  double norm = 1 / sum, lse = keys_lse;
  if (sink > kNegInf) {
    const double m = std::max(max_score, sink);
    const double total = sum * std::exp(max_score - m) + std::exp(sink - m);
    norm = std::exp(max_score - m) / total;
    lse = m + std::log(total);
    if (terms != nullptr) {
      terms->sink_shift = lse - keys_lse;
      terms->sink_abs_lse = std::fabs(lse);
    }
  }
  if (!key_abs_dot.empty()) terms->max_abs_v_folded *= norm * sum;  // f = 1 without a sink
  for (int64_t c = 0; c < dv; ++c) o_row[c] *= norm;
  if (abs_o_row != nullptr) {
    for (int64_t c = 0; c < dv; ++c) abs_o_row[c] *= norm;
  }
  return lse;
}

ReferenceResult ComputeReference(const AttentionProblem& p, const AttentionArgs& a) {
  if (p.is_ragged()) {  // the sequences' results, one after the other
    ReferenceResult all;
    for (const SequenceCall& s : RaggedSequences(p, a)) {
      const ReferenceResult r = ComputeReference(s.problem, s.args);
      all.o.insert(all.o.end(), r.o.begin(), r.o.end());
      all.lse.insert(all.lse.end(), r.lse.begin(), r.lse.end());
      all.abs_o.insert(all.abs_o.end(), r.abs_o.begin(), r.abs_o.end());
      all.terms.insert(all.terms.end(), r.terms.begin(), r.terms.end());
    }
    return all;
  }
  const int64_t B = p.batch, H = p.num_heads, Tq = p.q_len, dv = p.value_dim();
  ReferenceResult r;
  r.o.assign(static_cast<size_t>(B * H * Tq * dv), 0.0);
  r.lse.assign(static_cast<size_t>(B * H * Tq), 0.0);
  r.abs_o.assign(r.o.size(), 0.0);
  r.terms.assign(r.lse.size(), RowErrorTerms{});
  std::vector<double> scores(static_cast<size_t>(p.kv_len));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t row = (b * H + h) * Tq + i;
        r.lse[row] =
            ReferenceRow(p, a, b, h, i, &scores, &r.o[row * dv], &r.abs_o[row * dv], &r.terms[row]);
      }
    }
  }
  return r;
}

}  // namespace attnkit
