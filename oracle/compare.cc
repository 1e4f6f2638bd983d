#include "oracle/compare.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/fast_compute.h"
#include "core/ragged.h"

namespace attnkit {
namespace {

constexpr double kU = 1.0 / (1 << 24);  // fp32 unit roundoff

double SumGrowth(int64_t n) { return std::min(double(n), 4 * std::sqrt(double(n))); }

// A row that reads a NaN or Inf (reference.h): every element of o and its
// lse must be NaN. Inf is not accepted: the rule is one value, not "some
// non-finite value".
void CheckPoisonedRow(const AttentionProblem& p, const AttentionArgs& a, int64_t b, int64_t h,
                      int64_t i, Comparison* c) {
  ++c->poisoned_rows;
  auto fail = [&](const std::string& what, double got) {
    ++c->mismatches;
    if (c->first_failure.empty()) {
      c->first_failure = absl::StrFormat(
          "%s = %g, must be NaN: row [%d,%d,%d] reads a NaN or Inf input", what, got, b, h, i);
    }
  };
  for (int64_t x = 0; x < p.value_dim(); ++x) {
    const double got = a.o.LoadF32(a.o.Offset(b, h, i, x));
    ++c->checked;
    if (!std::isnan(got)) fail(absl::StrFormat("o[%d,%d,%d,%d]", b, h, i, x), got);
  }
  if (!p.return_lse) return;
  const double got = static_cast<const float*>(a.lse.data)[a.lse.Offset(b, h, i)];
  ++c->checked;
  if (!std::isnan(got)) fail(absl::StrFormat("lse[%d,%d,%d]", b, h, i), got);
}

// Checks output row (b, h, i) against want_o[Ev] and want_lse, updating c.
void CheckRow(const AttentionProblem& p, const AttentionArgs& a, int64_t b, int64_t h, int64_t i,
              const double* want_o, const double* abs_o, double want_lse, const RowErrorTerms& t,
              Comparison* c) {
  const RowBound bound = BoundForRow(p, t);
  auto note = [&](const std::string& what) {
    if (c->first_failure.empty()) c->first_failure = what;
  };
  if (std::isnan(want_lse)) {  // the row reads a NaN or Inf: all of it must be NaN
    CheckPoisonedRow(p, a, b, h, i, c);
    return;
  }
  const bool blocked = std::isinf(want_lse) && want_lse < 0;
  for (int64_t x = 0; x < p.value_dim(); ++x) {
    const double want = want_o[x];
    const double got = a.o.LoadF32(a.o.Offset(b, h, i, x));
    ++c->checked;
    if (!std::isfinite(got)) {
      c->non_finite = true;
      note(absl::StrFormat("o[%d,%d,%d,%d] = %g, reference %.9g", b, h, i, x, got, want));
      continue;
    }
    const double err = std::fabs(got - want);
    const double allowed = blocked ? 0.0 : ElementBound(p.dtype, bound, want, abs_o[x]);
    c->max_abs_err = std::max(c->max_abs_err, err);
    if (want != 0) c->max_rel_err = std::max(c->max_rel_err, err / std::fabs(want));
    c->max_bound = std::max(c->max_bound, allowed);
    if (allowed > 0) c->max_bound_fraction = std::max(c->max_bound_fraction, err / allowed);
    if (err > allowed) {
      ++c->mismatches;
      note(absl::StrFormat("o[%d,%d,%d,%d] = %.9g, reference %.9g, error %.3g > bound %.3g%s", b, h,
                           i, x, got, want, err, allowed,
                           blocked ? " (fully blocked row must be 0)" : ""));
    }
  }
  if (!p.return_lse) return;
  const double got = static_cast<const float*>(a.lse.data)[a.lse.Offset(b, h, i)];
  ++c->checked;
  if (blocked) {
    if (!(std::isinf(got) && got < 0)) {
      ++c->mismatches;
      note(absl::StrFormat("lse[%d,%d,%d] = %g for a fully blocked row; must be -inf", b, h, i,
                           got));
    }
    return;
  }
  if (!std::isfinite(got)) {
    c->non_finite = true;
    note(absl::StrFormat("lse[%d,%d,%d] = %g, reference %.9g", b, h, i, got, want_lse));
    return;
  }
  const double err = std::fabs(got - want_lse);
  c->max_lse_err = std::max(c->max_lse_err, err);
  c->max_bound_fraction = std::max(c->max_bound_fraction, err / bound.lse);
  if (err > bound.lse) {
    ++c->mismatches;
    note(absl::StrFormat("lse[%d,%d,%d] = %.9g, reference %.9g, error %.3g > bound %.3g", b, h, i,
                         got, want_lse, err, bound.lse));
  }
}

}  // namespace

RowBound BoundForRow(const AttentionProblem& p, const RowErrorTerms& t) {
  const bool int8_q = FastRoundsQuery(p) && p.kv_dtype == DType::kI8;
  const double score_ops = int8_q ? 10 : 8;
  double e = p.alibi ? kU * (SumGrowth(p.head_dim) * t.weighted_abs_dot +
                             score_ops * t.weighted_abs_score + 2 * t.weighted_abs_bias +
                             3 * t.weighted_abs_alibi + t.abs_max_score)
                     : kU * (SumGrowth(p.head_dim) * t.max_abs_dot + score_ops * t.max_abs_score +
                             2 * t.max_abs_bias);
  if (MayFlushBF16Products(p)) {
    constexpr double kMinNormal = 1.1754943508222875e-38;  // 2^-126
    // fp8 codes meet Q before K's row scale (compare.h), so a flush costs
    // 2^-126 times the scale: at most 2^16 max |k| (a nonzero code is at
    // least 2^-16; a row of zero codes has no product to flush).
    const double code_units = IsFp8(p.kv_dtype) ? 0x1p16 : 1.0;
    e += double(p.scale) * 2 * double(p.head_dim) * kMinNormal * code_units *
         (1 + t.max_abs_operand);
  }
  const double growth = SumGrowth(std::max<int64_t>(t.visible, 1));
  RowBound r;
  // Score errors: 2 E A_c from maxima; from the weighted E (ALiBi),
  // E (A_c + max |v| f) (oracle/compare.h).
  r.f32_scale = 1.01 * ((p.alibi ? 1 : 2) * e + (3 * growth + 20) * kU);
  if (p.alibi) r.score_abs = 1.01 * e * t.max_abs_v_folded;
  r.lse = 1.01 * (e + (growth + 12) * kU);
  if (p.sinks) {
    // The sink's fold (core/sinks.h) rescales the finished row by
    // f = exp(L) / (exp(L) + exp(sink)), computed in f32 from the keys' lse
    // L (error at most r.lse, moving f by that relative amount or less), two
    // exps of differences (u |L - L'| + 8 u, the sink's term weighted by its
    // share: under u), a sum and a divide: relative error r.lse + (|L' - L| +
    // 20) u, which times A_c (the weights with the sink) adds to f32_c. The
    // lse L' = max + log(total) gains the sum and exps inside the log
    // (9 u), the log itself (2 u) and the final add (u |L'|).
    r.f32_scale += 1.01 * (r.lse + (t.sink_shift + 20) * kU);
    r.lse += 1.01 * (12 + t.sink_abs_lse) * kU;
  }
  r.weight_roundoff = 1.01 * FastWeightRoundoff(p);
  if (FastQuantizesWeights(p)) {
    // Each key's weight times its V scale errs by at most W_j / 510 (half a
    // step of its block's u8 grid), times |v8_jc| <= 128.
    r.weight_floor = 1.01 * 128.0 / (2.0 * kFastWeightSteps) * t.weight_grid;
  } else if (r.weight_roundoff > 0 && IsFp8(p.kv_dtype)) {
    // fp8 V under FAST: each weight times V's row scale rounded to bf16 and
    // multiplied with V's codes (bf16 holds them exactly) in vdpbf16ps. A
    // weight flushed below 2^-126 errs by that times |code| <= 57344 (E5M2's
    // largest; E4M3's is 448), whatever the scale; flushed products and
    // partial sums by 2^-126 per key and per key pair (compare.h).
    constexpr double kMinNormal = 1.1754943508222875e-38;  // 2^-126
    const double n = double(t.visible);
    r.weight_floor = 1.01 * kMinNormal * (57344.0 * n + n + 1 + (n + 1) / 2);
  } else if (r.weight_roundoff > 0) {
    // The absolute error of a weight below the type's normal range: half
    // f16's smallest subnormal, or a whole bf16 normal (conversions that
    // flush subnormals, as vcvtne2ps2bf16 does).
    constexpr double kMinNormal = 1.1754943508222875e-38;  // 2^-126
    const double floor = p.kv_dtype == DType::kF16 ? DTypeUlp(DType::kF16, 0) / 2 : kMinNormal;
    r.weight_floor = 1.01 * floor * t.sum_max_abs_v;
    if (p.kv_dtype == DType::kBF16) {
      // bf16 dot products also flush subnormal V values (at most 2^-126 per
      // unit of weight, the weights summing to 1) and each partial sum
      // (one per key pair, weights <= 1 over a row sum >= 1).
      r.weight_floor += 1.01 * kMinNormal * (1 + (t.visible + 1) / 2);
    }
  }
  return r;
}

double ElementBound(DType out, const RowBound& row, double want, double abs_weighted_v) {
  const double f32 = row.f32_scale * abs_weighted_v +
                     row.weight_roundoff * (abs_weighted_v + std::fabs(want)) + row.weight_floor +
                     row.score_abs;
  // The last term is the floor: half the dtype's smallest subnormal.
  return f32 + 0.5 * DTypeUlp(out, std::fabs(want) + f32) + 0.5 * DTypeUlp(out, 0);
}

namespace {

// Rows [first_row, ...) of `ref` against a dense (or one sequence's) problem.
void CompareRows(const AttentionProblem& p, const AttentionArgs& a, const ReferenceResult& ref,
                 int64_t first_row, Comparison* c) {
  const int64_t H = p.num_heads, Tq = p.q_len, dv = p.value_dim();
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t row = first_row + (b * H + h) * Tq + i;
        CheckRow(p, a, b, h, i, &ref.o[row * dv], &ref.abs_o[row * dv], ref.lse[row],
                 ref.terms[row], c);
      }
    }
  }
}

void CompareSampled(const AttentionProblem& p, const AttentionArgs& a, int64_t max_rows,
                    Comparison* out) {
  Comparison& c = *out;
  const int64_t rows = p.batch * p.num_heads * p.q_len;
  const int64_t n = std::min(rows, std::max<int64_t>(max_rows, 1));
  std::vector<double> scores(static_cast<size_t>(p.kv_len)),
      want(static_cast<size_t>(p.value_dim())), abs_o(static_cast<size_t>(p.value_dim()));
  for (int64_t k = 0; k < n; ++k) {
    // Evenly spread, always including the first and the last row.
    const int64_t row = n == 1 ? rows - 1 : k * (rows - 1) / (n - 1);
    const int64_t i = row % p.q_len, h = (row / p.q_len) % p.num_heads;
    const int64_t b = row / (p.q_len * p.num_heads);
    RowErrorTerms terms;
    const double lse = ReferenceRow(p, a, b, h, i, &scores, want.data(), abs_o.data(), &terms);
    CheckRow(p, a, b, h, i, want.data(), abs_o.data(), lse, terms, &c);
  }
}

}  // namespace

Comparison CompareToReference(const AttentionProblem& p, const AttentionArgs& a,
                              const ReferenceResult& ref) {
  Comparison c;
  if (!p.is_ragged()) {
    CompareRows(p, a, ref, 0, &c);
    return c;
  }
  int64_t first_row = 0;  // ComputeReference's order: sequence after sequence
  for (const SequenceCall& s : RaggedSequences(p, a)) {
    CompareRows(s.problem, s.args, ref, first_row, &c);
    first_row += s.problem.num_heads * s.problem.q_len;
  }
  return c;
}

Comparison CompareSampledRows(const AttentionProblem& p, const AttentionArgs& a, int64_t max_rows) {
  Comparison c;
  if (!p.is_ragged()) {
    CompareSampled(p, a, max_rows, &c);
    return c;
  }
  // Each sequence gets its share of the rows (at least one).
  const int64_t total = std::max<int64_t>(1, p.TotalQ());
  for (const SequenceCall& s : RaggedSequences(p, a)) {
    CompareSampled(s.problem, s.args, std::max<int64_t>(1, max_rows * s.problem.q_len / total), &c);
  }
  return c;
}

}  // namespace attnkit
