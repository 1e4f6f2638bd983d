// The gradient oracle (oracle/compare_grad.h) proven by planted bugs, as
// tests/oracle_test.cc proves the forward's. Each mutant is the fp64
// backward written out again with one bug planted in one formula term; on
// this grid every mutant moves some gradient element far beyond its proven
// bound, so the oracle must report every mutant on every grid problem (no
// "invisible" cells), while every backend with a backward (the reference
// backend, called through the registry and so the plugin C ABI, and the
// others registered) passes the same grid from its own stored forward O and
// lse. The test prints the catch matrix and each backend's largest error /
// bound; two more problems hold the backends to long sums and to weights
// that underflow fp32.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/builtin.h"
#include "core/fast_compute.h"
#include "gtest/gtest.h"
#include "harness/execute.h"
#include "harness/grad_data.h"
#include "harness/problem_data.h"
#include "oracle/compare_grad.h"
#include "oracle/reference_backward.h"
#include "oracle/reference_f64.h"
#include "tests/oracle_grid.h"

namespace attnkit {
namespace {

// Runs p's forward and then its backward on `backend` (host memory), the
// gradients landing in `grads`.
absl::Status ForwardBackward(Backend* backend, const AttentionProblem& p, const ProblemData& data,
                             const GradData& grads, RunInfo* info) {
  PoisonOutputs(data);
  absl::Status s = RunOnBackend(backend, p, data, info);
  if (!s.ok()) return s;
  return backend->Backward(p, data.args(), grads.args(), info);
}

// The reference backend, called through the registry, on problems covering
// the layouts, dtypes, masks and optional inputs, against its own fp64
// reference: the basic proof that the Backward route works end to end.
TEST(GradOracleTest, ReferenceBackendThroughRegistryPasses) {
  absl::StatusOr<Backend*> backend = GlobalRegistry().Find("reference");
  ASSERT_TRUE(backend.ok()) << backend.status();
  int runs = 0;
  for (Layout layout : {Layout::kBHTD, Layout::kBTHD}) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      AttentionProblem p = BasicProblem(2, 4, 2, 5, 11, 8);
      p.layout = layout;
      p.dtype = p.kv_dtype = dtype;
      p.mask = MaskKind::kCausal;
      p.alignment = Alignment::kBottomRight;
      p.kv_lengths = {11, 0};
      p.additive_bias = true;
      p.blocked_mask = true;
      p.softcap = 3.0f;
      p.return_lse = true;
      ASSERT_TRUE(ValidateProblem(p).ok()) << ValidateProblem(p);
      absl::StatusOr<ProblemData> data = ProblemData::Random(p, 7);
      ASSERT_TRUE(data.ok()) << data.status();
      absl::StatusOr<GradData> grads = GradData::Random(p, 7, /*with_dbias=*/true);
      ASSERT_TRUE(grads.ok()) << grads.status();
      ASSERT_TRUE((*backend)->SupportsBackward(p).ok()) << (*backend)->SupportsBackward(p);
      RunInfo info;
      const absl::Status run = ForwardBackward(*backend, p, *data, *grads, &info);
      ASSERT_TRUE(run.ok()) << run;
      EXPECT_EQ(info.kernel, "scalar-fp64");
      const ReferenceGradients ref = ComputeReferenceBackward(p, data->args(), grads->d_o.view());
      const Comparison c = CompareGradients(p, grads->args(), ref);
      EXPECT_TRUE(c.ok()) << p.Id() << ": " << c.first_failure;
      EXPECT_GT(c.checked, 0);
      ++runs;
    }
  }
  EXPECT_EQ(runs, 6);
}

// Paged and int8 problems have no backward: the reference backend refuses
// them before running, naming the property.
TEST(GradOracleTest, ReferenceBackendRefusesWhatHasNoBackward) {
  absl::StatusOr<Backend*> backend = GlobalRegistry().Find("reference");
  ASSERT_TRUE(backend.ok()) << backend.status();
  AttentionProblem p = BasicProblem(1, 2, 2, 3, 5, 8);
  p.return_lse = true;
  p.kv_dtype = DType::kI8;
  const absl::Status s = (*backend)->SupportsBackward(p);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("i8"), std::string::npos) << s;
  // CompareGradients fails loudly on the empty reference of such a problem.
  absl::StatusOr<ProblemData> data = ProblemData::Random(p, 1);
  ASSERT_TRUE(data.ok()) << data.status();
  const ReferenceGradients ref = ComputeReferenceBackward(p, data->args(), data->o.view());
  EXPECT_TRUE(ref.dq.empty());
  GradArgs none;
  const Comparison c = CompareGradients(p, none, ref);
  EXPECT_FALSE(c.ok());
  EXPECT_NE(c.first_failure.find("no reference gradients"), std::string::npos) << c.first_failure;
}

// One grid problem (tests/oracle_grid.h) with Tq = 16 < Tk, dBias asked,
// and a dense mask with one fully blocked row (head 1, row 3) beside its
// random blocked pairs, so that every planted bug has something to change.
constexpr int64_t kTq = 16;
constexpr int64_t kBlockedHead = 1, kBlockedRow = 3;

AttentionProblem GridProblem(DType q_dtype, DType kv_dtype, int64_t d, int64_t tk) {
  AttentionProblem p = OracleGridProblem(q_dtype, kv_dtype, d, tk, kTq);
  p.blocked_mask = true;
  return p;
}

absl::StatusOr<ProblemData> GridData(const AttentionProblem& p) {
  absl::StatusOr<ProblemData> data = OracleGridData(p, 4321 + p.head_dim + p.kv_len);
  if (!data.ok()) return data.status();
  const TensorView m = data->blocked_mask.view();
  for (int64_t j = 0; j < p.kv_len; ++j) {
    static_cast<uint8_t*>(m.data)[m.Offset(0, kBlockedHead, kBlockedRow, j)] = 1;
  }
  return data;
}

// The planted bugs, each in one term of reference_backward.h's formulas.
enum class Bug {
  kNone,
  kNoD,              // dS = P dP: D_i omitted
  kWrongRowD,        // D_{i+1} used in row i
  kUnnormalisedP,    // P = exp(s - max): the softmax sum forgotten
  kNoScaleDq,        // dQ without scale
  kNoScaleDk,        // dK without scale
  kNoSoftcapDeriv,   // dX = dS: softcap's 1 - tanh^2 omitted
  kDkFirstHeadOnly,  // dK summed over only the first head of each group
  kDvFirstHeadOnly,  // dV likewise
  kDkDvSwapped,      // dK and dV written to each other's tensors
  kDropLastKey,      // each row's last visible key contributes nothing
  kDbiasSign,        // dBias = -dS
  kBlockedRowDq,     // the dense mask ignored on a fully blocked row
  kDbiasOnBlocked,   // dBias of masked pairs from the unmasked dS
  // FAST only (FastBugs): the backward's rounding of its computed operands
  // coarser than bf16's 8 significant bits. dQ's and dK's bound also
  // carries D's errors (O's bf16 rounding and FAST's P rounding in the
  // forward) relative to sums of |dX k| whose terms cancel, so a rounding of
  // dX to 2 to 4 bits can hide in it; 1 bit cannot.
  kCoarseP,   // P to 3 bits before dV
  kCoarseDx,  // dX to 1 bit (a power of two) before dQ and dK
};

struct BugInfo {
  Bug bug;
  const char* name;
};

const std::vector<BugInfo>& Bugs() {
  static const auto* bugs = new std::vector<BugInfo>{
      {Bug::kNoD, "D_i omitted"},
      {Bug::kWrongRowD, "D_i from the next row"},
      {Bug::kUnnormalisedP, "P = exp(s - max) unnormalised"},
      {Bug::kNoScaleDq, "scale missing in dQ"},
      {Bug::kNoScaleDk, "scale missing in dK"},
      {Bug::kNoSoftcapDeriv, "softcap derivative omitted"},
      {Bug::kDkFirstHeadOnly, "dK over first head of group"},
      {Bug::kDvFirstHeadOnly, "dV over first head of group"},
      {Bug::kDkDvSwapped, "dK and dV swapped"},
      {Bug::kDropLastKey, "last visible key dropped"},
      {Bug::kDbiasSign, "dBias sign flipped"},
      {Bug::kBlockedRowDq, "mask ignored, blocked row dQ"},
      {Bug::kDbiasOnBlocked, "dBias nonzero when masked"},
  };
  return *bugs;
}

// The bugs of FAST's backward roundings (FastRoundsGradOperands).
const std::vector<BugInfo>& FastBugs() {
  static const auto* bugs = new std::vector<BugInfo>{
      {Bug::kCoarseP, "P rounded to 3 bits for dV"},
      {Bug::kCoarseDx, "dX rounded to 1 bit for dQ, dK"},
  };
  return *bugs;
}

// FAST's rounding of P and dX (core/fast_compute.h RoundGradOperand) in fp64.
double Bf16GradOperand(double x) { return F32FromBF16(RoundGradOperand(static_cast<float>(x))); }

// x to `bits` significant bits, to nearest.
double RoundToBits(double x, int bits) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e = 0;
  std::frexp(x, &e);
  const double step = std::ldexp(1.0, e - bits);
  return std::nearbyint(x / step) * step;
}
double ThreeBits(double x) { return RoundToBits(x, 3); }
double OneBit(double x) { return RoundToBits(x, 1); }

struct Grads {
  std::vector<double> dq, dk, dv, dbias;  // canonical order, as ReferenceGradients
};

// The backward written out once more, plainly, with `bug` planted. With
// Bug::kNone it must equal the reference (checked below), so each mutant
// differs from the truth by its bug alone. Under FastRoundsGradOperands P
// (before dV) and dX (before dQ, dK) are rounded as FAST permits: the clean
// mutant is then a model of a correct FAST kernel, which must pass.
Grads MutantBackward(const AttentionProblem& p, const internal::F64Inputs& in, Bug bug) {
  const bool fast = FastRoundsGradOperands(p);
  auto round_p = [&](double x) {
    return bug == Bug::kCoarseP ? ThreeBits(x) : fast ? Bf16GradOperand(x) : x;
  };
  auto round_dx = [&](double x) {
    return bug == Bug::kCoarseDx ? OneBit(x) : fast ? Bf16GradOperand(x) : x;
  };
  const int64_t H = p.num_heads, G = p.num_kv_heads, Tq = p.q_len, Tk = p.kv_len, d = p.head_dim;
  const double scale = p.scale, cap = p.softcap;
  const double kNegInf = -std::numeric_limits<double>::infinity();
  std::vector<double> o, lse;
  internal::ForwardF64(p, in, &o, &lse);
  std::vector<double> D(lse.size(), 0.0);
  for (size_t row = 0; row < D.size(); ++row) {
    for (int64_t c = 0; c < d; ++c) D[row] += in.d_o[row * d + c] * o[row * d + c];
  }
  Grads r;
  r.dq.assign(o.size(), 0.0);
  r.dk.assign(static_cast<size_t>(G * Tk * d), 0.0);
  r.dv.assign(r.dk.size(), 0.0);
  r.dbias.assign(static_cast<size_t>(H * Tq * Tk), 0.0);
  std::vector<double> x(static_cast<size_t>(Tk)), s(x.size());
  std::vector<uint8_t> masked(x.size());  // blocked by the dense mask only
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = p.KvHead(h);
    const bool first_of_group = h % p.group_size() == 0;
    for (int64_t i = 0; i < Tq; ++i) {
      const size_t row = static_cast<size_t>(h * Tq + i);
      const KeyRange range = VisibleKeys(p.mask_params(0), i, p.KvLength(0));
      double max_s = kNegInf;
      int64_t last = -1;
      for (int64_t j = range.begin; j < range.end; ++j) {
        const size_t pair = row * Tk + j;
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += in.q[row * d + c] * in.k[(g * Tk + j) * d + c];
        x[j] = scale * dot;
        s[j] = (cap > 0 ? cap * std::tanh(x[j] / cap) : x[j]) + in.bias[pair];
        masked[j] = in.blocked[pair];
        if (!masked[j]) {
          max_s = std::max(max_s, s[j]);
          last = j;
        }
      }
      const bool row_blocked = last < 0;
      if (row_blocked && bug != Bug::kBlockedRowDq) continue;
      // The row's lse, or (kBlockedRowDq) the unmasked row's.
      double row_lse = lse[row], sum_unmasked = 0, max_all = kNegInf;
      if (row_blocked) {
        for (int64_t j = range.begin; j < range.end; ++j) max_all = std::max(max_all, s[j]);
        for (int64_t j = range.begin; j < range.end; ++j) sum_unmasked += std::exp(s[j] - max_all);
        row_lse = max_all + std::log(sum_unmasked);
      }
      const double Di = bug == Bug::kWrongRowD ? D[h * Tq + (i + 1) % Tq] : D[row];
      for (int64_t j = range.begin; j < range.end; ++j) {
        const double* k = &in.k[(g * Tk + j) * d];
        const double* v = &in.v[(g * Tk + j) * d];
        const double* d_o = &in.d_o[row * d];
        double dP = 0;
        for (int64_t c = 0; c < d; ++c) dP += d_o[c] * v[c];
        if (masked[j] && !row_blocked) {
          if (bug == Bug::kDbiasOnBlocked) {
            r.dbias[row * Tk + j] = std::exp(s[j] - lse[row]) * (dP - D[row]);
          }
          continue;
        }
        if (bug == Bug::kDropLastKey && j == last) continue;
        const double P =
            bug == Bug::kUnnormalisedP ? std::exp(s[j] - max_s) : std::exp(s[j] - row_lse);
        const double dS = P * (bug == Bug::kNoD ? dP : dP - (row_blocked ? 0.0 : Di));
        r.dbias[row * Tk + j] = row_blocked ? 0.0 : (bug == Bug::kDbiasSign ? -dS : dS);
        const double t = cap > 0 ? std::tanh(x[j] / cap) : 0.0;
        const double dX = round_dx(bug == Bug::kNoSoftcapDeriv ? dS : dS * (1 - t * t));
        const double P_v = round_p(P);
        const double q_scale = bug == Bug::kNoScaleDq ? 1.0 : scale;
        const double k_scale = bug == Bug::kNoScaleDk ? 1.0 : scale;
        for (int64_t c = 0; c < d; ++c) {
          r.dq[row * d + c] += q_scale * dX * k[c];
          if (row_blocked) continue;  // the bug reaches dq alone
          if (bug != Bug::kDkFirstHeadOnly || first_of_group) {
            r.dk[(g * Tk + j) * d + c] += k_scale * dX * in.q[row * d + c];
          }
          if (bug != Bug::kDvFirstHeadOnly || first_of_group) {
            r.dv[(g * Tk + j) * d + c] += P_v * d_o[c];
          }
        }
      }
    }
  }
  if (bug == Bug::kDkDvSwapped) std::swap(r.dk, r.dv);
  return r;
}

// Writes canonical gradients into the problem's gradient tensors, rounded to
// their dtypes (batch 1).
void StoreGrads(const AttentionProblem& p, const Grads& g, const GradData& out) {
  const GradArgs a = out.args();
  auto store = [&](const std::vector<double>& from, const TensorView& to, int64_t heads,
                   int64_t tokens) {
    size_t x = 0;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t c = 0; c < p.head_dim; ++c) {
          StoreFromF32(to.data, to.dtype, to.Offset(0, h, t, c), static_cast<float>(from[x++]));
        }
  };
  store(g.dq, a.dq, p.num_heads, p.q_len);
  store(g.dk, a.dk, p.num_kv_heads, p.kv_len);
  store(g.dv, a.dv, p.num_kv_heads, p.kv_len);
  size_t x = 0;
  for (int64_t h = 0; h < p.num_heads; ++h)
    for (int64_t i = 0; i < p.q_len; ++i)
      for (int64_t j = 0; j < p.kv_len; ++j) {
        static_cast<float*>(a.dbias.data)[a.dbias.Offset(0, h, i, j)] =
            static_cast<float>(g.dbias[x++]);
      }
}

double MaxDiff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t x = 0; x < a.size(); ++x) m = std::max(m, std::fabs(a[x] - b[x]));
  return m;
}

struct Cell {
  int caught = 0, missed = 0;
};

// One instance per Q/O x K/V dtype pair, each over head dims and key counts.
// One instance per Q/O x K/V dtype pair (and all-bf16 under FAST, whose
// backward rounds P and dX to bf16), each over head dims and key counts.
class GradOracleGridTest : public ::testing::TestWithParam<std::tuple<DType, DType, ComputeMode>> {
};

TEST_P(GradOracleGridTest, CatchesEveryPlantedBugAndPassesEveryBackend) {
  const auto [qd, kd, compute] = GetParam();
  std::vector<BugInfo> bugs = Bugs();
  if (compute == ComputeMode::kFast) {
    bugs.insert(bugs.end(), FastBugs().begin(), FastBugs().end());
  }
  std::map<std::string, Cell> matrix;  // bug -> counts
  std::map<std::string, double> backend_fraction;
  std::map<std::string, std::string> backend_status;
  double reference_fraction = 0;
  for (int64_t d : {16, 64, 128}) {
    for (int64_t tk : {17, 257, 1024}) {
      AttentionProblem p = GridProblem(qd, kd, d, tk);
      p.compute = compute;
      ASSERT_TRUE(ValidateProblem(p).ok()) << ValidateProblem(p);
      absl::StatusOr<ProblemData> data = GridData(p);
      ASSERT_TRUE(data.ok()) << data.status();
      absl::StatusOr<GradData> grads = GradData::Random(p, 99 + d + tk, /*with_dbias=*/true);
      ASSERT_TRUE(grads.ok()) << grads.status();
      const ReferenceGradients ref = ComputeReferenceBackward(p, data->args(), grads->d_o.view());
      const internal::F64Inputs in = internal::LoadF64Inputs(p, data->args(), grads->d_o.view());

      // The harness itself: with no bug planted (and no FAST rounding),
      // MutantBackward is the reference.
      AttentionProblem exact = p;
      exact.compute = ComputeMode::kExact;
      const Grads clean = MutantBackward(exact, in, Bug::kNone);
      ASSERT_LE(MaxDiff(clean.dq, ref.dq), 1e-12) << p.name;
      ASSERT_LE(MaxDiff(clean.dk, ref.dk), 1e-12) << p.name;
      ASSERT_LE(MaxDiff(clean.dv, ref.dv), 1e-12) << p.name;
      ASSERT_LE(MaxDiff(clean.dbias, ref.dbias), 1e-12) << p.name;
      // The reference rounded to its dtypes (under FAST, after FAST's own
      // roundings of P and dX) must pass.
      StoreGrads(p, MutantBackward(p, in, Bug::kNone), *grads);
      const Comparison rounded = CompareGradients(p, grads->args(), ref);
      EXPECT_TRUE(rounded.ok()) << p.Id() << ": the reference rounded to its dtypes fails: "
                                << rounded.first_failure;
      reference_fraction = std::max(reference_fraction, rounded.max_bound_fraction);

      for (const BugInfo& bug : bugs) {
        StoreGrads(p, MutantBackward(p, in, bug.bug), *grads);
        const Comparison c = CompareGradients(p, grads->args(), ref);
        Cell& cell = matrix[bug.name];
        if (c.ok()) {
          ++cell.missed;
          ADD_FAILURE() << "the gradient oracle missed '" << bug.name << "' on " << p.name
                        << " (largest error/bound " << c.max_bound_fraction << ")";
        } else {
          ++cell.caught;
        }
      }

      for (const std::string& name : GlobalRegistry().Names()) {
        Backend* b = *GlobalRegistry().Find(name);
        const absl::Status supported = b->SupportsBackward(p);
        if (!supported.ok()) {
          backend_status[name] = absl::StrCat("some cases unsupported: ", supported.message());
          continue;
        }
        RunInfo info;
        const absl::Status run = ForwardBackward(b, p, *data, *grads, &info);
        ASSERT_TRUE(run.ok()) << name << " on " << p.name << ": " << run;
        const Comparison c = CompareGradients(p, grads->args(), ref);
        EXPECT_TRUE(c.ok()) << name << " [" << info.kernel << "] fails the gradient oracle on "
                            << p.name << ": " << c.first_failure;
        backend_fraction[name] = std::max(backend_fraction[name], c.max_bound_fraction);
      }
    }
  }
  std::printf(
      "\n=== gradient catch matrix, Q/O %s, K/V %s, %s: d {16,64,128} x Tk {17,257,1024} ===\n",
      std::string(DTypeName(qd)).c_str(), std::string(DTypeName(kd)).c_str(),
      std::string(ComputeModeName(compute)).c_str());
  std::printf("%-32s %7s %7s\n", "planted bug", "caught", "missed");
  for (const BugInfo& bug : bugs) {
    const Cell& cell = matrix[bug.name];
    std::printf("%-32s %7d %7d\n", bug.name, cell.caught, cell.missed);
  }
  std::printf("=== largest error / bound: the reference rounded %.3f; backends:\n",
              reference_fraction);
  for (const auto& [name, fraction] : backend_fraction) {
    std::printf("%-20s %.3f%s\n", name.c_str(), fraction,
                backend_status.count(name) ? ("  (" + backend_status[name] + ")").c_str() : "");
  }
}

// Every registered backend with a backward for p, from its own forward,
// against the fp64 reference; prints each one's largest error / bound (how
// tight the bound is for real kernels).
void ExpectEveryBackwardPasses(const AttentionProblem& p, const ProblemData& data,
                               const GradData& grads) {
  const ReferenceGradients ref = ComputeReferenceBackward(p, data.args(), grads.d_o.view());
  for (const std::string& name : GlobalRegistry().Names()) {
    Backend* b = *GlobalRegistry().Find(name);
    if (!b->SupportsBackward(p).ok()) continue;
    RunInfo info;
    const absl::Status run = ForwardBackward(b, p, data, grads, &info);
    ASSERT_TRUE(run.ok()) << name << " on " << p.Id() << ": " << run;
    const Comparison c = CompareGradients(p, grads.args(), ref);
    EXPECT_TRUE(c.ok()) << name << " [" << info.kernel << "] on " << p.Id() << ": "
                        << c.first_failure;
    std::printf("%-20s %-40s largest error / bound %.3f\n", name.c_str(), p.Id().c_str(),
                c.max_bound_fraction);
  }
}

// Long sums, which the grid's 16 queries lack: dK and dV over 4 x 512 rows,
// dQ over up to 512 keys. Every backend with a backward must pass; the
// largest error / bound is printed (how tight the bound is for real kernels).
TEST(GradOracleTest, EveryBackendPassesLongSequences) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    AttentionProblem p = BasicProblem(1, 8, 2, 512, 512, 64);
    p.dtype = p.kv_dtype = dtype;
    p.mask = MaskKind::kCausal;
    p.return_lse = true;
    absl::StatusOr<ProblemData> data = ProblemData::Random(p, 5);
    ASSERT_TRUE(data.ok()) << data.status();
    absl::StatusOr<GradData> grads = GradData::Random(p, 5, /*with_dbias=*/false);
    ASSERT_TRUE(grads.ok()) << grads.status();
    ExpectEveryBackwardPasses(p, *data, *grads);
  }
}

// Scores spread over hundreds: most P_ij underflow fp32 (flushed to zero or
// subnormal), keys seen only with such weights get gradients near 1e-40.
// The reference's P magnitude floor (reference_backward.h) must cover that.
TEST(GradOracleTest, EveryBackendPassesUnderflowingWeights) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    AttentionProblem p = BasicProblem(1, 4, 2, 64, 128, 32);
    p.dtype = p.kv_dtype = dtype;
    p.additive_bias = true;
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kBottomRight;
    p.return_lse = true;
    absl::StatusOr<ProblemData> data = ProblemData::Random(p, 8);
    ASSERT_TRUE(data.ok()) << data.status();
    for (Tensor* t : {&data->q, &data->bias}) {
      const TensorView v = t->view();
      const float gain = t == &data->q ? 30.0f : 60.0f;
      ForEachOffset(
          v, [&](int64_t off) { StoreFromF32(v.data, v.dtype, off, gain * v.LoadF32(off)); });
    }
    absl::StatusOr<GradData> grads = GradData::Random(p, 8, /*with_dbias=*/true);
    ASSERT_TRUE(grads.ok()) << grads.status();
    ExpectEveryBackwardPasses(p, *data, *grads);
  }
}

// Sinks: every backend's gradients pass (ExpectEveryBackwardPasses), and the
// oracle catches each sink gradient bug: dsinks left 0, its sign flipped,
// taken from the next head's sum; and dQ, dK, dV from weights whose lse
// leaves the sink out.
TEST(GradOracleSinksTest, CatchesSinkGradientBugsAndPassesEveryBackend) {
  Backend* reference = *GlobalRegistry().Find("reference");
  for (DType t : {DType::kF32, DType::kBF16}) {
    for (int64_t tk : {17, 257}) {
      AttentionProblem p = GridProblem(t, t, 64, tk);
      p.sinks = true;
      p.name += "_sinks";
      absl::StatusOr<ProblemData> data = GridData(p);
      ASSERT_TRUE(data.ok()) << data.status();
      absl::StatusOr<GradData> grads = GradData::Random(p, 31 + tk, /*with_dbias=*/true);
      ASSERT_TRUE(grads.ok()) << grads.status();
      ExpectEveryBackwardPasses(p, *data, *grads);
      const ReferenceGradients ref = ComputeReferenceBackward(p, data->args(), grads->d_o.view());
      ASSERT_TRUE(RunOnBackend(reference, p, *data, nullptr).ok());
      ASSERT_TRUE(RunBackwardOnBackend(reference, p, *data, *grads, nullptr).ok());
      ASSERT_TRUE(CompareGradients(p, grads->args(), ref).ok()) << p.name;
      auto* dsinks = static_cast<float*>(grads->dsinks.data());
      const std::vector<float> good(dsinks, dsinks + p.num_heads);
      auto expect_caught = [&](const std::string& bug) {
        EXPECT_FALSE(CompareGradients(p, grads->args(), ref).ok())
            << "the gradient oracle missed '" << bug << "' on " << p.name;
        std::copy(good.begin(), good.end(), dsinks);
      };
      std::fill(dsinks, dsinks + p.num_heads, 0.0f);
      expect_caught("dsinks left 0");
      for (int64_t h = 0; h < p.num_heads; ++h) dsinks[h] = -good[h];
      expect_caught("dsinks sign flipped");
      for (int64_t h = 0; h < p.num_heads; ++h) dsinks[h] = good[(h + 1) % p.num_heads];
      expect_caught("dsinks of the next head");
      // dQ, dK, dV of a kernel that leaves the sink out of P (the same
      // inputs without sinks: weights with the keys' lse alone).
      AttentionProblem mp = p;
      mp.sinks = false;
      mp.name += "_plain";
      absl::StatusOr<ProblemData> plain = GridData(mp);
      ASSERT_TRUE(plain.ok()) << plain.status();
      ASSERT_TRUE(RunOnBackend(reference, mp, *plain, nullptr).ok());
      absl::StatusOr<GradData> plain_grads = GradData::Random(mp, 31 + tk, /*with_dbias=*/true);
      ASSERT_TRUE(plain_grads.ok()) << plain_grads.status();
      ASSERT_TRUE(RunBackwardOnBackend(reference, mp, *plain, *plain_grads, nullptr).ok());
      GradArgs mixed = plain_grads->args();
      mixed.dsinks = grads->dsinks.view();
      EXPECT_FALSE(CompareGradients(p, mixed, ref).ok())
          << "the gradient oracle missed 'P without the sink' on " << p.name;
    }
  }
}

std::vector<std::tuple<DType, DType, ComputeMode>> DTypePairs() {
  std::vector<std::tuple<DType, DType, ComputeMode>> pairs;
  for (DType q : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType kv : {DType::kF32, DType::kF16, DType::kBF16}) {
      pairs.emplace_back(q, kv, ComputeMode::kExact);
    }
  }
  pairs.emplace_back(DType::kBF16, DType::kBF16, ComputeMode::kFast);
  return pairs;
}

INSTANTIATE_TEST_SUITE_P(
    AllDTypes, GradOracleGridTest, ::testing::ValuesIn(DTypePairs()),
    [](const ::testing::TestParamInfo<std::tuple<DType, DType, ComputeMode>>& info) {
      const bool fast = std::get<2>(info.param) == ComputeMode::kFast;
      return absl::StrCat("q", DTypeName(std::get<0>(info.param)), "_kv",
                          DTypeName(std::get<1>(info.param)), fast ? "_fast" : "");
    });

}  // namespace
}  // namespace attnkit
