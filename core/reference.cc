#include "core/reference.h"

#include <cmath>
#include <limits>

namespace attnkit {

double ReferenceRow(const AttentionProblem& p, const AttentionArgs& a, int64_t b, int64_t h,
                    int64_t i, std::vector<double>* scores, double* o_row) {
  const int64_t d = p.head_dim;
  const int64_t g = p.KvHead(h);
  const int64_t kv_length = p.KvLength(b);
  const KeyRange range = VisibleKeys(p.mask_params(), i, kv_length);
  const double kNegInf = -std::numeric_limits<double>::infinity();
  std::vector<double>& s = *scores;

  double max_score = kNegInf;
  for (int64_t j = range.begin; j < range.end; ++j) {
    s[j] = kNegInf;
    if (p.blocked_mask &&
        static_cast<const uint8_t*>(a.blocked_mask.data)[a.blocked_mask.Offset(b, h, i, j)] != 0) {
      continue;
    }
    double dot = 0;
    for (int64_t c = 0; c < d; ++c) {
      dot +=
          double(a.q.LoadF32(a.q.Offset(b, h, i, c))) * double(a.k.LoadF32(a.k.Offset(b, g, j, c)));
    }
    double score = double(p.scale) * dot;
    if (p.softcap > 0) score = double(p.softcap) * std::tanh(score / double(p.softcap));
    if (p.additive_bias) {
      score += double(static_cast<const float*>(a.bias.data)[a.bias.Offset(b, h, i, j)]);
    }
    s[j] = score;
    if (score > max_score) max_score = score;
  }

  for (int64_t c = 0; c < d; ++c) o_row[c] = 0;
  if (max_score == kNegInf) return kNegInf;  // fully blocked row
  double sum = 0;
  for (int64_t j = range.begin; j < range.end; ++j) {
    if (s[j] == kNegInf) continue;  // blocked: v_j is never read
    const double w = std::exp(s[j] - max_score);
    sum += w;
    for (int64_t c = 0; c < d; ++c) o_row[c] += w * double(a.v.LoadF32(a.v.Offset(b, g, j, c)));
  }
  for (int64_t c = 0; c < d; ++c) o_row[c] /= sum;
  return max_score + std::log(sum);
}

ReferenceResult ComputeReference(const AttentionProblem& p, const AttentionArgs& a) {
  const int64_t B = p.batch, H = p.num_heads, Tq = p.q_len, d = p.head_dim;
  ReferenceResult r;
  r.o.assign(static_cast<size_t>(B * H * Tq * d), 0.0);
  r.lse.assign(static_cast<size_t>(B * H * Tq), 0.0);
  std::vector<double> scores(static_cast<size_t>(p.kv_len));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t row = (b * H + h) * Tq + i;
        r.lse[row] = ReferenceRow(p, a, b, h, i, &scores, &r.o[row * d]);
      }
    }
  }
  return r;
}

}  // namespace attnkit
