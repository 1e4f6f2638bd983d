#include "core/compare.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace attnkit {

Tolerance ToleranceFor(const AttentionProblem& p, double v_max) {
  const double e_out = DTypeEpsilon(p.dtype);
  const double e_kv = DTypeEpsilon(p.kv_dtype);
  const double e_acc = DTypeEpsilon(DType::kF32);
  const double reduction = std::sqrt(double(p.head_dim)) + std::sqrt(double(p.kv_len));
  Tolerance t;
  const double v = std::max(v_max, 1e-30);
  t.atol = v * (2 * std::max(e_out, e_kv) + 8 * e_acc * reduction);
  t.rtol = 2 * e_out;
  t.lse_atol = 8 * e_acc * reduction;
  t.lse_rtol = 8 * e_acc * reduction;
  return t;
}

Comparison CompareToReference(const AttentionProblem& p, const AttentionArgs& a,
                              const ReferenceResult& ref) {
  double v_max = 0;
  ForEachOffset(a.v, [&](int64_t off) {
    const double x = std::fabs(double(a.v.LoadF32(off)));
    if (std::isfinite(x)) v_max = std::max(v_max, x);
  });
  Comparison c;
  c.tolerance = ToleranceFor(p, v_max);
  const Tolerance& t = c.tolerance;
  const double rel_floor = std::max(v_max, 1e-30) * DTypeEpsilon(p.dtype);
  const int64_t H = p.num_heads, Tq = p.q_len, d = p.head_dim;
  auto note = [&](const std::string& what) {
    if (c.first_failure.empty()) c.first_failure = what;
  };
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t row = (b * H + h) * Tq + i;
        for (int64_t x = 0; x < d; ++x) {
          const double want = ref.o[row * d + x];
          const double got = a.o.LoadF32(a.o.Offset(b, h, i, x));
          ++c.checked;
          if (!std::isfinite(got)) {
            c.non_finite = true;
            note(absl::StrFormat("o[%d,%d,%d,%d] = %g, reference %.9g", b, h, i, x, got, want));
            continue;
          }
          const double err = std::fabs(got - want);
          c.max_abs_err = std::max(c.max_abs_err, err);
          c.max_rel_err = std::max(c.max_rel_err, err / std::max(std::fabs(want), rel_floor));
          if (err > t.atol + t.rtol * std::fabs(want)) {
            ++c.mismatches;
            note(absl::StrFormat("o[%d,%d,%d,%d] = %.9g, reference %.9g, error %.3g > %.3g", b, h,
                                 i, x, got, want, err, t.atol + t.rtol * std::fabs(want)));
          }
        }
        if (!p.return_lse) continue;
        const double want = ref.lse[row];
        const double got = static_cast<const float*>(a.lse.data)[a.lse.Offset(b, h, i)];
        ++c.checked;
        if (std::isinf(want) && want < 0) {
          if (!(std::isinf(got) && got < 0)) {
            ++c.mismatches;
            note(absl::StrFormat("lse[%d,%d,%d] = %g for a fully blocked row; must be -inf", b, h,
                                 i, got));
          }
          continue;
        }
        if (!std::isfinite(got)) {
          c.non_finite = true;
          note(absl::StrFormat("lse[%d,%d,%d] = %g, reference %.9g", b, h, i, got, want));
          continue;
        }
        const double err = std::fabs(got - want);
        c.max_lse_err = std::max(c.max_lse_err, err);
        if (err > t.lse_atol + t.lse_rtol * std::fabs(want)) {
          ++c.mismatches;
          note(absl::StrFormat("lse[%d,%d,%d] = %.9g, reference %.9g, error %.3g", b, h, i, got,
                               want, err));
        }
      }
    }
  }
  return c;
}

}  // namespace attnkit
