#include "core/sinks_grad.h"

#include <cmath>
#include <limits>
#include <vector>

namespace attnkit {

absl::Status SinkGradient(const AttentionProblem& p, const AttentionArgs& a, const GradArgs& g) {
  if (g.dsinks.empty()) return absl::OkStatus();
  if (p.is_ragged()) {
    return absl::UnimplementedError("dsinks of a ragged batch (q_lengths) is not supported");
  }
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  const auto* sinks = static_cast<const float*>(a.sinks.data);
  const auto* lse = static_cast<const float*>(a.lse.data);
  std::vector<double> grad(static_cast<size_t>(p.num_heads), 0.0);
  for (int64_t h = 0; h < p.num_heads; ++h) {
    const double sink = sinks[a.sinks.Offset(h)];
    if (sink == kNegInf) continue;  // no sink: weight 0 in every row
    for (int64_t b = 0; b < p.batch; ++b) {
      for (int64_t i = 0; i < p.q_len; ++i) {
        double dot = 0;  // D = dO . O
        for (int64_t c = 0; c < p.value_dim(); ++c) {
          dot += double(g.d_o.LoadF32(g.d_o.Offset(b, h, i, c))) *
                 double(a.o.LoadF32(a.o.Offset(b, h, i, c)));
        }
        grad[h] -= std::exp(sink - double(lse[a.lse.Offset(b, h, i)])) * dot;
      }
    }
  }
  auto* out = static_cast<float*>(g.dsinks.data);
  for (int64_t h = 0; h < p.num_heads; ++h) {
    out[g.dsinks.Offset(h)] = static_cast<float>(grad[h]);
  }
  return absl::OkStatus();
}

}  // namespace attnkit
