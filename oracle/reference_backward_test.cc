// The backward reference checked against calculus: for L = sum(dO * O) with
// O the fp64 forward, dL/dx by central finite differences (h = 1e-6, in
// double) for every element x of Q, K, V and the bias must match the closed
// form of oracle/reference_backward.h. Small problems cover every mask rule,
// padding, the dense mask, bias, softcap, custom scale, GQA and MQA.
#include "oracle/reference_backward.h"

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "harness/problem_data.h"
#include "oracle/reference_f64.h"

namespace attnkit {
namespace {

using internal::F64Inputs;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Random double inputs (not representable in any storage type: the check
// is of the formulas, not of rounding). Q is scaled so scores spread over a
// few units and softcap bends them; about one pair in five is blocked by the
// dense mask, and with bias about one in ten by a -inf bias.
F64Inputs RandomInputs(const AttentionProblem& p, uint64_t seed, double q_gain = 2.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  F64Inputs in;
  const size_t q = static_cast<size_t>(p.batch * p.num_heads * p.q_len * p.head_dim);
  const size_t kv = static_cast<size_t>(p.batch * p.num_kv_heads * p.kv_len * p.head_dim);
  const size_t pairs = static_cast<size_t>(p.batch * p.num_heads * p.q_len * p.kv_len);
  for (size_t x = 0; x < q; ++x) in.q.push_back(q_gain * u(rng));
  for (size_t x = 0; x < q; ++x) in.d_o.push_back(u(rng));
  for (size_t x = 0; x < kv; ++x) in.k.push_back(u(rng));
  for (size_t x = 0; x < kv; ++x) in.v.push_back(u(rng));
  if (p.blocked_mask) {
    for (size_t x = 0; x < pairs; ++x) in.blocked.push_back(u(rng) < -0.6 ? 1 : 0);
  }
  if (p.additive_bias) {
    for (size_t x = 0; x < pairs; ++x) in.bias.push_back(u(rng) < -0.8 ? -kInf : 1.5 * u(rng));
  }
  if (p.alibi) {  // BLOOM's range of slopes
    for (int64_t h = 0; h < p.num_heads; ++h) {
      in.alibi_slopes.push_back(static_cast<float>(0.25 + 0.2 * u(rng)));
    }
  }
  if (p.sinks) {  // about as heavy as the keys: a real share of each row
    for (int64_t h = 0; h < p.num_heads; ++h) in.sinks.push_back(1.0 + 1.5 * u(rng));
  }
  return in;
}

double Loss(const AttentionProblem& p, const F64Inputs& in) {
  std::vector<double> o, lse;
  internal::ForwardF64(p, in, &o, &lse);
  double loss = 0;
  for (size_t x = 0; x < o.size(); ++x) loss += in.d_o[x] * o[x];
  return loss;
}

struct FdStats {
  int64_t checked = 0;
  int64_t nonzero = 0;  // closed-form values above 1e-9: the check is not vacuous
  double max_rel = 0;   // |fd - closed| / (magnitude + 1e-6)
};

// Compares every element of `field` (a member of F64Inputs) with the closed
// form `want`, whose magnitudes `abs` must bound it.
void CheckField(const AttentionProblem& p, F64Inputs in, std::vector<double> F64Inputs::*field,
                const std::vector<double>& want, const std::vector<double>& abs,
                const std::string& name, FdStats* stats) {
  constexpr double kH = 1e-6;
  std::vector<double>& x = in.*field;
  ASSERT_EQ(x.size(), want.size()) << name;
  ASSERT_EQ(abs.size(), want.size()) << name;
  for (size_t e = 0; e < x.size(); ++e) {
    const double saved = x[e];
    if (std::isinf(saved)) {  // a -inf bias: the pair is blocked, its gradient 0
      EXPECT_EQ(want[e], 0.0) << name << "[" << e << "] of a -inf bias";
      continue;
    }
    x[e] = saved + kH;
    const double up = Loss(p, in);
    x[e] = saved - kH;
    const double down = Loss(p, in);
    x[e] = saved;
    const double fd = (up - down) / (2 * kH);
    const double err = std::fabs(fd - want[e]);
    ++stats->checked;
    if (std::fabs(want[e]) > 1e-9) ++stats->nonzero;
    stats->max_rel = std::max(stats->max_rel, err / (abs[e] + 1e-6));
    EXPECT_LE(err, 1e-6 * (abs[e] + 1e-6))
        << p.Id() << ": " << name << "[" << e << "] finite difference " << fd << ", closed form "
        << want[e] << ", magnitude " << abs[e];
    EXPECT_GE(abs[e] * (1 + 1e-12), std::fabs(want[e])) << name << "[" << e << "] magnitude";
  }
}

struct Case {
  std::string name;
  AttentionProblem p;
};

AttentionProblem Small(int64_t B, int64_t H, int64_t G, int64_t tq, int64_t tk, int64_t d) {
  AttentionProblem p = BasicProblem(B, H, G, tq, tk, d);
  p.return_lse = true;
  return p;
}

std::vector<Case> Cases() {
  std::vector<Case> c;
  c.push_back({"no_mask", Small(1, 2, 2, 4, 6, 4)});
  {
    AttentionProblem p = Small(1, 2, 1, 5, 7, 4);
    p.mask = MaskKind::kCausal;
    c.push_back({"causal_top_left", p});
    p.alignment = Alignment::kBottomRight;
    c.push_back({"causal_bottom_right", p});
  }
  {
    AttentionProblem p = Small(1, 2, 2, 7, 9, 3);
    p.mask = MaskKind::kSlidingWindow;
    p.window_left = 2;
    p.window_right = 1;
    p.alignment = Alignment::kBottomRight;
    c.push_back({"sliding_window", p});
  }
  {
    AttentionProblem p = Small(2, 2, 1, 4, 7, 4);
    p.kv_lengths = {0, 5};  // an empty sequence, and padding in the other
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kBottomRight;
    c.push_back({"kv_lengths_zero_and_padding", p});
  }
  {
    AttentionProblem p = Small(1, 2, 2, 5, 4, 4);
    p.blocked_mask = true;  // RandomInputs blocks one row fully (below)
    c.push_back({"blocked_mask", p});
  }
  {
    AttentionProblem p = Small(1, 2, 1, 4, 6, 4);
    p.additive_bias = true;
    c.push_back({"bias", p});
  }
  {
    AttentionProblem p = Small(1, 2, 2, 4, 6, 8);
    p.softcap = 1.5f;
    c.push_back({"softcap", p});
    p.additive_bias = true;
    p.mask = MaskKind::kCausal;
    c.push_back({"softcap_bias_causal", p});
  }
  {
    AttentionProblem p = Small(1, 2, 2, 3, 5, 4);
    p.scale = 0.8f;
    c.push_back({"custom_scale", p});
  }
  {
    AttentionProblem p = Small(2, 4, 2, 4, 5, 4);
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kBottomRight;
    c.push_back({"gqa_4_2", p});
  }
  {
    AttentionProblem p = Small(1, 3, 1, 3, 6, 5);
    p.additive_bias = true;
    p.softcap = 2.0f;
    c.push_back({"mqa_3_1", p});
  }
  {  // sinks, with an empty sequence (its rows see only the sink)
    AttentionProblem p = Small(2, 4, 2, 4, 6, 4);
    p.kv_lengths = {6, 0};
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kBottomRight;
    p.sinks = true;
    c.push_back({"sinks_gqa", p});
  }
  {  // ALiBi on both sides of the diagonal, with softcap and a bias
    AttentionProblem p = Small(1, 2, 1, 5, 8, 4);
    p.mask = MaskKind::kSlidingWindow;
    p.window_left = 4;
    p.window_right = 2;
    p.alignment = Alignment::kBottomRight;
    p.softcap = 2.0f;
    p.additive_bias = true;
    p.alibi = true;
    c.push_back({"alibi_window", p});
  }
  return c;
}

class FiniteDifferenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(FiniteDifferenceTest, ClosedFormMatchesFiniteDifferences) {
  const AttentionProblem& p = GetParam().p;
  ASSERT_TRUE(ValidateProblem(p).ok()) << ValidateProblem(p);
  F64Inputs in = RandomInputs(p, 42 + p.head_dim);
  if (p.blocked_mask) {  // block row 1 of head 0 entirely
    for (int64_t j = 0; j < p.kv_len; ++j) in.blocked[static_cast<size_t>(p.kv_len + j)] = 1;
  }
  const ReferenceGradients r = internal::BackwardF64(p, in);
  FdStats stats;
  CheckField(p, in, &F64Inputs::q, r.dq, r.dq_abs, "dq", &stats);
  CheckField(p, in, &F64Inputs::k, r.dk, r.dk_abs, "dk", &stats);
  CheckField(p, in, &F64Inputs::v, r.dv, r.dv_abs, "dv", &stats);
  if (p.additive_bias) CheckField(p, in, &F64Inputs::bias, r.dbias, r.dbias_abs, "dbias", &stats);
  if (p.sinks) CheckField(p, in, &F64Inputs::sinks, r.dsinks, r.dsinks_abs, "dsinks", &stats);
  // (kv_lengths_zero_and_padding has a whole sequence of zeros by design.)
  EXPECT_GT(stats.nonzero, stats.checked / 3) << "mostly zero gradients: a vacuous check";
  std::printf("%-28s %4d elements, largest |fd - closed| / magnitude %.2e\n",
              GetParam().name.c_str(), static_cast<int>(stats.checked), stats.max_rel);
}

INSTANTIATE_TEST_SUITE_P(Problems, FiniteDifferenceTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

// Stored tensors of `p` from a seed, and dO.
struct Stored {
  ProblemData data;
  Tensor d_o;
};

Stored MakeStored(const AttentionProblem& p, uint64_t seed) {
  Stored s{*ProblemData::Random(p, seed),
           *Tensor::Attention(p.dtype, p.layout, p.batch, p.num_heads, p.q_len, p.head_dim)};
  FillUniform(s.d_o.view(), seed + 1, -1.0f, 1.0f);
  return s;
}

// Rows with no visible key (an empty sequence, a fully masked row, a row of
// -inf biases) give exact zeros and add nothing to dK, dV or dBias: never a
// NaN from their lse of -inf.
TEST(ReferenceBackwardTest, FullyBlockedRowsGiveExactZeros) {
  AttentionProblem p = BasicProblem(2, 2, 1, 4, 6, 8);
  p.return_lse = true;
  p.kv_lengths = {6, 0};  // batch 1: every row blocked
  p.blocked_mask = true;
  p.additive_bias = true;
  ASSERT_TRUE(ValidateProblem(p).ok()) << ValidateProblem(p);
  Stored s = MakeStored(p, 3);
  const AttentionArgs a = s.data.args();
  auto* mask = static_cast<uint8_t*>(a.blocked_mask.data);
  auto* bias = static_cast<float*>(a.bias.data);
  for (int64_t j = 0; j < p.kv_len; ++j) {
    mask[a.blocked_mask.Offset(0, 0, 1, j)] = 1;  // (0, 0, 1): masked
    mask[a.blocked_mask.Offset(0, 1, 2, j)] = 0;  // (0, 1, 2): -inf bias
    bias[a.bias.Offset(0, 1, 2, j)] = -std::numeric_limits<float>::infinity();
  }
  const ReferenceGradients r = ComputeReferenceBackward(p, a, s.d_o.view());
  const int64_t d = p.head_dim;
  auto row_of = [&](int64_t b, int64_t h, int64_t i) { return ((b * 2 + h) * 4 + i); };
  std::vector<int64_t> blocked_rows = {row_of(0, 0, 1), row_of(0, 1, 2)};
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 4; ++i) blocked_rows.push_back(row_of(1, h, i));
  for (int64_t row : blocked_rows) {
    EXPECT_EQ(r.visible[row], 0) << row;
    for (int64_t c = 0; c < d; ++c) {
      EXPECT_EQ(r.dq[row * d + c], 0.0) << "row " << row;
      EXPECT_EQ(r.dq_abs[row * d + c], 0.0) << "row " << row;
    }
    for (int64_t j = 0; j < p.kv_len; ++j) EXPECT_EQ(r.dbias[row * p.kv_len + j], 0.0);
  }
  // Batch 1 has no keys at all: dK and dV are zero there, finite everywhere.
  for (size_t x = 0; x < r.dk.size(); ++x) {
    ASSERT_TRUE(std::isfinite(r.dk[x]) && std::isfinite(r.dv[x])) << x;
    if (x >= r.dk.size() / 2) {
      EXPECT_EQ(r.dk[x], 0.0);
      EXPECT_EQ(r.dv[x], 0.0);
    }
  }
  for (double g : r.dq) ASSERT_TRUE(std::isfinite(g));
  // The other rows do get gradients.
  EXPECT_NE(r.dq[row_of(0, 0, 0) * d], 0.0);
  EXPECT_GT(r.visible[row_of(0, 0, 0)], 0);
}

// The layout is memory order only: BTHD tensors holding the same logical
// values give the same canonical gradients, bit for bit.
TEST(ReferenceBackwardTest, TokenMajorLayoutGivesTheSameGradients) {
  AttentionProblem p = BasicProblem(2, 4, 2, 5, 7, 8);
  p.return_lse = true;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.softcap = 3.0f;
  p.additive_bias = true;
  p.dtype = DType::kBF16;
  p.kv_dtype = DType::kF16;
  Stored bhtd = MakeStored(p, 11);
  AttentionProblem t = p;
  t.layout = Layout::kBTHD;
  Stored bthd = MakeStored(t, 11);
  // Copy the logical values into the token-major tensors.
  auto copy = [](const TensorView& from, const TensorView& to) {
    for (int64_t b = 0; b < from.shape[0]; ++b)
      for (int64_t h = 0; h < from.shape[1]; ++h)
        for (int64_t i = 0; i < from.shape[2]; ++i)
          for (int64_t c = 0; c < from.shape[3]; ++c) {
            StoreFromF32(to.data, to.dtype, to.Offset(b, h, i, c),
                         from.LoadF32(from.Offset(b, h, i, c)));
          }
  };
  const AttentionArgs a = bhtd.data.args(), b = bthd.data.args();
  ASSERT_NE(a.q.strides[1], b.q.strides[1]);
  copy(a.q, b.q);
  copy(a.k, b.k);
  copy(a.v, b.v);
  copy(a.bias, b.bias);  // bias is [B, H, Tq, Tk] in both
  copy(bhtd.d_o.view(), bthd.d_o.view());
  const ReferenceGradients x = ComputeReferenceBackward(p, a, bhtd.d_o.view());
  const ReferenceGradients y = ComputeReferenceBackward(t, b, bthd.d_o.view());
  EXPECT_EQ(x.dq, y.dq);
  EXPECT_EQ(x.dk, y.dk);
  EXPECT_EQ(x.dv, y.dv);
  EXPECT_EQ(x.dbias, y.dbias);
  EXPECT_EQ(x.dk_abs, y.dk_abs);
}

// 16-bit inputs are read at their stored precision: the result equals the
// fp64 core on the exactly widened values, and differs from it on values
// rounded differently (so the check can fail).
TEST(ReferenceBackwardTest, ReadsInputsInTheirStoredPrecision) {
  AttentionProblem p = BasicProblem(1, 2, 1, 3, 5, 4);
  p.return_lse = true;
  p.dtype = DType::kF16;
  p.kv_dtype = DType::kBF16;
  Stored s = MakeStored(p, 5);
  const AttentionArgs a = s.data.args();
  const internal::F64Inputs in = internal::LoadF64Inputs(p, a, s.d_o.view());
  EXPECT_EQ(in.q[1], double(a.q.LoadF32(a.q.Offset(0, 0, 0, 1))));
  EXPECT_EQ(in.k[6], double(a.k.LoadF32(a.k.Offset(0, 0, 1, 2))));
  const ReferenceGradients r = ComputeReferenceBackward(p, a, s.d_o.view());
  const ReferenceGradients core = internal::BackwardF64(p, in);
  EXPECT_EQ(r.dq, core.dq);
  EXPECT_EQ(r.dk, core.dk);
  internal::F64Inputs nudged = in;
  nudged.k[0] += 1e-3;
  EXPECT_NE(internal::BackwardF64(p, nudged).dq, r.dq);
}

// A NaN input reaches exactly what reads it (oracle/reference.h's rule): the
// rows that see the poisoned key, and through their dS every dK and dV of
// their group; the other KV group stays finite.
TEST(ReferenceBackwardTest, NanInputPoisonsTheRowsThatReadIt) {
  AttentionProblem p = BasicProblem(1, 4, 2, 3, 5, 4);
  p.return_lse = true;
  Stored s = MakeStored(p, 9);
  const AttentionArgs a = s.data.args();
  StoreFromF32(a.k.data, a.k.dtype, a.k.Offset(0, 0, 2, 1), std::nanf(""));
  const ReferenceGradients r = ComputeReferenceBackward(p, a, s.d_o.view());
  const size_t half_q = r.dq.size() / 2, half_k = r.dk.size() / 2;
  for (size_t x = 0; x < r.dq.size(); ++x) EXPECT_EQ(std::isnan(r.dq[x]), x < half_q) << x;
  for (size_t x = 0; x < r.dk.size(); ++x) {
    EXPECT_EQ(std::isnan(r.dk[x]), x < half_k) << x;
    EXPECT_EQ(std::isnan(r.dv[x]), x < half_k) << x;
  }
}

// Paged, ragged and int8 problems have no reference: empty, not a crash.
TEST(ReferenceBackwardTest, UnsupportedProblemsGiveEmptyResults) {
  AttentionProblem p = BasicProblem(1, 2, 1, 3, 5, 4);
  p.return_lse = true;
  p.kv_dtype = DType::kI8;
  Stored s = MakeStored(p, 5);
  EXPECT_TRUE(ComputeReferenceBackward(p, s.data.args(), s.d_o.view()).dq.empty());
}

}  // namespace
}  // namespace attnkit
