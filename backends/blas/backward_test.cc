// The blas backend's backward pass (backward.h) against the fp64 reference
// (oracle/reference_backward.h, bound of oracle/compare_grad.h) over MHA, GQA,
// MQA, every mask and alignment, padding (kv_lengths 0 included), a dense
// mask with a fully blocked row, bias with dBias, softcap, both layouts,
// f32/bf16/f16, odd sizes; the fused, partitioned (fewer (b, g) pairs than
// threads) and split (a small memory budget) work lists, OpenBLAS's
// threads; two calls bitwise equal; blocked inputs poisoned with NaN/Inf
// must not leak.
#include "backends/blas/backward.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/blas/blas_backend.h"
#include "backends/blas/openblas_engine.h"
#include "backends/blas/scalar_engine.h"
#include "gtest/gtest.h"
#include "harness/grad_data.h"
#include "harness/poison_blocked.h"
#include "harness/problem_data.h"
#include "oracle/compare_grad.h"
#include "oracle/reference_backward.h"

namespace attnkit {
namespace {

struct Case {
  std::string name;
  AttentionProblem p;
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

// f32 problem with return_lse, every option at its default.
AttentionProblem Problem(int64_t b, int64_t h, int64_t g, int64_t tq, int64_t tk, int64_t d) {
  AttentionProblem p = BasicProblem(b, h, g, tq, tk, d);
  p.return_lse = true;
  return p;
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  auto add = [&cases](std::string name, AttentionProblem p) {
    p.name = name;
    cases.push_back({std::move(name), std::move(p)});
  };
  add("mha_plain", Problem(2, 3, 3, 37, 101, 80));
  {
    AttentionProblem p = Problem(1, 8, 2, 37, 101, 64);
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kBottomRight;
    add("gqa_causal_br", p);
  }
  {
    AttentionProblem p = Problem(2, 4, 1, 101, 37, 32);
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kTopLeft;
    add("mqa_causal_tl_long_q", p);
  }
  {
    AttentionProblem p = Problem(1, 4, 2, 64, 80, 16);
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kBottomRight;  // Tq < Tk: every row sees a key
    add("gqa_causal_br_short_q", p);
  }
  {
    AttentionProblem p = Problem(1, 2, 2, 300, 300, 48);  // blocks of 128 rows, 256-key chunks
    p.mask = MaskKind::kSlidingWindow;
    p.window_left = 9;
    p.window_right = 3;
    add("mha_window", p);
  }
  {
    AttentionProblem p = Problem(1, 4, 2, 101, 37, 32);
    p.mask = MaskKind::kSlidingWindow;
    p.window_left = 4;  // rows past key 41 see nothing: their range starts past Tk
    p.window_right = 2;
    p.dtype = DType::kBF16;
    add("gqa_window_past_the_keys_bf16", p);
  }
  {
    AttentionProblem p = Problem(3, 4, 2, 37, 101, 24);
    p.kv_lengths = {101, 0, 58};
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kBottomRight;
    add("gqa_kv_lengths_with_zero", p);
  }
  {
    AttentionProblem p = Problem(2, 2, 1, 29, 45, 40);
    p.blocked_mask = true;
    add("mqa_blocked_mask", p);
  }
  {
    AttentionProblem p = Problem(1, 4, 2, 33, 51, 32);
    p.additive_bias = true;
    p.mask = MaskKind::kCausal;
    add("gqa_bias", p);
  }
  {
    AttentionProblem p = Problem(1, 2, 2, 31, 47, 64);
    p.softcap = 5.0f;
    p.additive_bias = true;
    add("mha_softcap_bias", p);
  }
  {
    AttentionProblem p = Problem(2, 4, 2, 37, 101, 80);
    p.layout = Layout::kBTHD;
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kBottomRight;
    add("gqa_bthd", p);
  }
  for (DType t : {DType::kBF16, DType::kF16}) {
    AttentionProblem p = Problem(1, 4, 2, 37, 101, 80);
    p.dtype = p.kv_dtype = t;
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kBottomRight;
    add(absl::StrCat("gqa_", DTypeName(t)), p);
  }
  {
    AttentionProblem p = Problem(1, 2, 2, 37, 101, 80);
    p.dtype = DType::kBF16;  // Q/O/dQ 16-bit, K/V/dK/dV f32
    p.layout = Layout::kBTHD;
    add("mha_bf16_q_f32_kv_bthd", p);
  }
  {
    // One pair: partitioned on two threads, split with the 1 MiB budget.
    AttentionProblem p = Problem(1, 2, 1, 150, 700, 64);
    p.mask = MaskKind::kSlidingWindow;
    p.window_left = 300;
    p.window_right = 20;
    p.alignment = Alignment::kBottomRight;
    p.additive_bias = true;
    p.softcap = 6.0f;
    add("mqa_long_keys_window_bias_softcap", p);
  }
  {
    AttentionProblem p = Problem(1, 1, 1, 200, 650, 64);
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kBottomRight;
    add("single_head_long_keys", p);
  }
  return cases;
}

// Backends under test, shared by every case (workspaces are reused).
// kSmallBudget: 1 MiB, which forces key spans (split) on the long case;
// kSmallBlocks: 16-key chunks and 8-row blocks, so rows of one block see
// different chunks.
enum class Mode { kOneThread, kTwoThreads, kSmallBudget, kBlasThreads, kSmallBlocks };

BlasBackend& BackendFor(Mode mode) {
  static BlasBackend* backends[5] = {};
  BlasBackend*& b = backends[static_cast<int>(mode)];
  if (b == nullptr) {
    BlasOptions o;
    o.num_threads = mode == Mode::kOneThread ? 1 : 2;
    if (mode == Mode::kSmallBudget) o.memory_budget_bytes = kMinBlasBudgetBytes;
    if (mode == Mode::kBlasThreads) o.threading = BlasThreading::kBlas;
    if (mode == Mode::kSmallBlocks) {
      o.max_key_chunk = 16;
      o.target_rows = 8;
    }
    b = new BlasBackend(o);
  }
  return *b;
}

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kOneThread:
      return "1thread";
    case Mode::kTwoThreads:
      return "2threads";
    case Mode::kSmallBudget:
      return "budget1MiB";
    case Mode::kSmallBlocks:
      return "blocks8x16";
    default:
      return "blasthreads";
  }
}

// Copies of the gradient tensors' bytes, to compare two calls bit for bit.
std::vector<char> Bytes(const Tensor& t) {
  if (t.data() == nullptr) return {};
  const TensorView& v = t.view();
  const char* p = static_cast<const char*>(t.data());
  return std::vector<char>(p, p + v.SpanElements() * DTypeSize(v.dtype));
}

// Sets every byte of dq, dk, dv (and dbias) to `byte`.
void FillGradients(const GradData& g, int byte) {
  for (const Tensor* t : {&g.dq, &g.dk, &g.dv, &g.dbias}) {
    if (t->data() != nullptr) std::memset(t->data(), byte, Bytes(*t).size());
  }
}

class BlasBackwardTest : public ::testing::TestWithParam<std::tuple<Case, Mode>> {};

TEST_P(BlasBackwardTest, MatchesReferenceAndIsDeterministic) {
  const AttentionProblem& p = std::get<0>(GetParam()).p;
  BlasBackend& backend = BackendFor(std::get<1>(GetParam()));
  ASSERT_TRUE(backend.SupportsBackward(p).ok()) << backend.SupportsBackward(p);
  absl::StatusOr<ProblemData> data = ProblemData::Random(p, 17);
  ASSERT_TRUE(data.ok()) << data.status();
  const AttentionArgs args = data->args();
  ASSERT_TRUE(backend.Forward(p, args).ok());
  absl::StatusOr<GradData> grads = GradData::Random(p, 23, p.additive_bias);
  ASSERT_TRUE(grads.ok()) << grads.status();
  FillGradients(*grads, 0xff);  // NaN: every element must be written
  RunInfo info;
  ASSERT_TRUE(backend.Backward(p, args, grads->args(), &info).ok());
  EXPECT_NE(info.kernel.find("backward sgemm/"), std::string::npos) << info.kernel;

  const ReferenceGradients ref = ComputeReferenceBackward(p, args, grads->d_o.view());
  const Comparison cmp = CompareGradients(p, grads->args(), ref);
  EXPECT_TRUE(cmp.ok()) << info.kernel << ": " << cmp.mismatches << " of " << cmp.checked
                        << " outside the bound; first: " << cmp.first_failure
                        << "; max |err| / bound " << cmp.max_bound_fraction;

  // A second call on the same inputs gives the same bits.
  const std::vector<std::vector<char>> first = {Bytes(grads->dq), Bytes(grads->dk),
                                                Bytes(grads->dv), Bytes(grads->dbias)};
  FillGradients(*grads, 0x7f);
  ASSERT_TRUE(backend.Backward(p, args, grads->args()).ok());
  const std::vector<std::vector<char>> second = {Bytes(grads->dq), Bytes(grads->dk),
                                                 Bytes(grads->dv), Bytes(grads->dbias)};
  EXPECT_TRUE(first == second) << "two calls with the same inputs differ";
}

INSTANTIATE_TEST_SUITE_P(
    Grid, BlasBackwardTest,
    ::testing::Combine(::testing::ValuesIn(Cases()),
                       ::testing::Values(Mode::kOneThread, Mode::kTwoThreads, Mode::kSmallBudget,
                                         Mode::kBlasThreads, Mode::kSmallBlocks)),
    [](const ::testing::TestParamInfo<std::tuple<Case, Mode>>& info) {
      return absl::StrCat(std::get<0>(info.param).name, "_", ModeName(std::get<1>(info.param)));
    });

// Inputs nothing reads hold NaN or Inf (harness/poison_blocked.h) and must not
// leak into any gradient: Q rows that see no key beside rows that do (the
// first bottom-right causal rows when Tq > kv_length, a row the dense mask
// blocks entirely), K/V rows inside a block's key range that the dense mask
// hides from every query, padded keys, and the bias of blocked pairs.
TEST(BlasBackward, PoisonedBlockedInputsDoNotLeak) {
  AttentionProblem p = Problem(2, 4, 2, 45, 61, 32);
  p.kv_lengths = {40, 0};
  p.blocked_mask = true;
  p.additive_bias = true;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;  // rows 0-4 of batch 0 see no key
  p.softcap = 8.0f;
  absl::StatusOr<ProblemData> data = ProblemData::Random(p, 5);
  ASSERT_TRUE(data.ok()) << data.status();
  const AttentionArgs args = data->args();
  auto* blocked = static_cast<uint8_t*>(args.blocked_mask.data);
  for (int64_t h = 0; h < p.num_heads; ++h) {
    for (int64_t i = 0; i < p.q_len; ++i) {
      blocked[args.blocked_mask.Offset(0, h, i, 7)] = 1;  // key 7: no query sees it
      if (h == 1 && i == 30) {                            // a fully blocked row
        for (int64_t j = 0; j < p.kv_len; ++j) blocked[args.blocked_mask.Offset(0, h, i, j)] = 1;
      }
    }
  }
  PoisonBlockedInputs(p, args, 9);
  ASSERT_TRUE(std::isnan(args.k.LoadF32(args.k.Offset(0, 0, 7, 0))) ||
              std::isinf(args.k.LoadF32(args.k.Offset(0, 0, 7, 0))));
  for (Mode mode : {Mode::kOneThread, Mode::kTwoThreads}) {
    BlasBackend& backend = BackendFor(mode);
    ASSERT_TRUE(backend.Forward(p, args).ok());
    absl::StatusOr<GradData> grads = GradData::Random(p, 6, true);
    ASSERT_TRUE(grads.ok()) << grads.status();
    FillGradients(*grads, 0xff);
    RunInfo info;
    ASSERT_TRUE(backend.Backward(p, args, grads->args(), &info).ok());
    const ReferenceGradients ref = ComputeReferenceBackward(p, args, grads->d_o.view());
    const Comparison cmp = CompareGradients(p, grads->args(), ref);
    EXPECT_TRUE(cmp.ok()) << info.kernel << ": " << cmp.first_failure;
    EXPECT_FALSE(cmp.non_finite);
    for (int64_t x = 0; x < p.head_dim; ++x) {  // the fully blocked row
      EXPECT_EQ(grads->dq.view().LoadF32(grads->dq.view().Offset(0, 1, 30, x)), 0.0f);
    }
  }
}

// The work list: fused (b, g) items when there are enough pairs and all keys
// fit, partitioned query blocks when pairs are fewer than workers, key spans
// then query blocks when the budget is small; the scratch stays in budget.
TEST(BlasBackwardPlan, ModesWithinBudget) {
  AttentionProblem p = Problem(1, 16, 16, 2048, 2048, 64);
  blas::BackwardOptions o;
  o.workers = 2;
  absl::StatusOr<blas::BackwardPlan> plan = blas::MakeBackwardPlan(p, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->mode, blas::BackwardMode::kFused);
  EXPECT_EQ(plan->NumItems(p, 0), 16);
  EXPECT_EQ(plan->NumItems(p, 1), 0);
  EXPECT_LE(plan->total_bytes(), o.budget_bytes);

  o.budget_bytes = size_t{1} << 20;  // 512 KiB per worker: 2048 keys do not fit
  plan = blas::MakeBackwardPlan(p, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->mode, blas::BackwardMode::kSplit);
  EXPECT_LT(plan->span, 2048);
  EXPECT_LE(plan->total_bytes(), o.budget_bytes);

  AttentionProblem mqa = Problem(1, 8, 1, 64, 64, 64);  // one pair for three workers
  o.budget_bytes = size_t{64} << 20;
  o.workers = 3;
  plan = blas::MakeBackwardPlan(mqa, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->mode, blas::BackwardMode::kPartitioned);
  EXPECT_EQ(plan->parts, 3);
  EXPECT_EQ(plan->NumItems(mqa, 0), 3);
  EXPECT_EQ(plan->NumItems(mqa, 1), 1);
  EXPECT_LE(plan->total_bytes(), o.budget_bytes);

  AttentionProblem one_block = Problem(1, 8, 1, 4, 64, 64);  // nothing to partition
  plan = blas::MakeBackwardPlan(one_block, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->mode, blas::BackwardMode::kSplit);
  EXPECT_GE(plan->NumItems(one_block, 0), o.workers);

  o.budget_bytes = 4096;
  EXPECT_EQ(blas::MakeBackwardPlan(p, o).status().code(), absl::StatusCode::kResourceExhausted);
}

// S and dP run on 16-bit copies only where Q, dO, K and V are all stored in
// one 16-bit type the engine multiplies; the plan then carves room for the
// copies (each worker's region grows, the budget still holds) and says so.
TEST(BlasBackwardPlan, Gemm16OnlyForAll16BitProblemsAndBudgeted) {
  const std::shared_ptr<blas::GemmEngine> scalar = blas::MakeScalarEngine();
  const std::shared_ptr<blas::GemmEngine> openblas = blas::MakeOpenBlasEngine();
  AttentionProblem p = Problem(1, 8, 2, 300, 300, 64);
  p.dtype = p.kv_dtype = DType::kBF16;
  EXPECT_EQ(blas::Gemm16Type(p, *scalar), DType::kBF16);
  EXPECT_EQ(blas::Gemm16Type(p, *openblas), DType::kF32) << "OpenBLAS 0.3.21 has no sbgemm";
  AttentionProblem mixed = p;
  mixed.kv_dtype = DType::kF32;
  EXPECT_EQ(blas::Gemm16Type(mixed, *scalar), DType::kF32);
  mixed = p;
  mixed.dtype = DType::kF32;
  EXPECT_EQ(blas::Gemm16Type(mixed, *scalar), DType::kF32);
  AttentionProblem f16 = p;
  f16.dtype = f16.kv_dtype = DType::kF16;
  EXPECT_EQ(blas::Gemm16Type(f16, *scalar), DType::kF16);

  blas::BackwardOptions o;
  o.workers = 2;
  absl::StatusOr<blas::BackwardPlan> plain = blas::MakeBackwardPlan(p, o);
  o.gemm16 = DType::kBF16;
  absl::StatusOr<blas::BackwardPlan> with16 = blas::MakeBackwardPlan(p, o);
  ASSERT_TRUE(plain.ok() && with16.ok());
  ASSERT_EQ(with16->mode, plain->mode);
  ASSERT_EQ(with16->span, plain->span);
  // kh [span, E] + vh [span, Ev] + qh [rows, E] + doh [rows, Ev], 2 bytes
  // each, each rounded up to 64 bytes.
  auto halves = [](int64_t n) { return (static_cast<size_t>(n) * 2 + 63) / 64 * 64; };
  EXPECT_EQ(with16->worker_bytes - plain->worker_bytes,
            2 * halves(with16->span * 64) + 2 * halves(with16->rows() * 64));
  EXPECT_NE(blas::DescribeBackwardPlan(*with16).find("s,dp=bf16"), std::string::npos);
  // FAST's rounding adds one [rows, key_chunk] 16-bit block (g16).
  o.round16 = true;
  absl::StatusOr<blas::BackwardPlan> rounded = blas::MakeBackwardPlan(p, o);
  ASSERT_TRUE(rounded.ok());
  EXPECT_TRUE(rounded->round16);
  EXPECT_EQ(rounded->worker_bytes - with16->worker_bytes,
            halves(rounded->rows() * rounded->key_chunk));
  EXPECT_NE(blas::DescribeBackwardPlan(*rounded).find("s,dp,dv,dk,dq=bf16"), std::string::npos);
  o.round16 = false;
  EXPECT_EQ(blas::DescribeBackwardPlan(*plain).find("s,dp="), std::string::npos);
  o.budget_bytes = size_t{1} << 20;  // the split plan keeps to the budget with the copies
  with16 = blas::MakeBackwardPlan(p, o);
  ASSERT_TRUE(with16.ok()) << with16.status();
  EXPECT_LE(with16->total_bytes(), o.budget_bytes);
}

// FAST on all-bf16 problems (FastRoundsGradOperands): P and dX rounded to
// bf16, then dV, dK and dQ in Gemm16 (the scalar engine here, so every CPU
// runs it), in each backward mode (fused, partitioned, split, small blocks
// where rows see different chunks). The gradients pass the FAST oracle and
// differ from EXACT's (the rounding ran); f16 and OpenBLAS stay EXACT.
TEST(BlasBackward, FastRoundsWeightsAndScoreGradientsToBf16) {
  const std::shared_ptr<blas::GemmEngine> scalar = blas::MakeScalarEngine();
  AttentionProblem p = Problem(1, 4, 1, 150, 300, 64);  // one (b, g) pair
  p.dtype = p.kv_dtype = DType::kBF16;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.softcap = 8.0f;
  p.compute = ComputeMode::kFast;
  ASSERT_TRUE(ValidateProblem(p).ok()) << ValidateProblem(p);
  EXPECT_TRUE(blas::RoundsGradOperands(p, *scalar));
  EXPECT_FALSE(blas::RoundsGradOperands(p, *blas::MakeOpenBlasEngine())) << "no bf16 GEMM";
  AttentionProblem exact = p;
  exact.compute = ComputeMode::kExact;
  EXPECT_FALSE(blas::RoundsGradOperands(exact, *scalar));
  AttentionProblem f16 = p;
  f16.dtype = f16.kv_dtype = DType::kF16;
  EXPECT_FALSE(blas::RoundsGradOperands(f16, *scalar)) << "FAST rounds to bf16 only";

  absl::StatusOr<ProblemData> data = ProblemData::Random(p, 31);
  ASSERT_TRUE(data.ok()) << data.status();
  const AttentionArgs args = data->args();
  absl::StatusOr<GradData> grads = GradData::Random(p, 32, false);
  ASSERT_TRUE(grads.ok()) << grads.status();
  const char* const modes[] = {"fused", "partitioned", "split", "partitioned"};
  for (int variant = 0; variant < 4; ++variant) {
    BlasOptions o;
    o.engine = scalar;
    o.num_threads = variant == 0 ? 1 : 2;  // one pair: fused on 1 thread, partitioned on 2
    if (variant == 2) o.memory_budget_bytes = kMinBlasBudgetBytes;  // split
    if (variant == 3) {                                             // blocks 8 x 16
      o.max_key_chunk = 16;
      o.target_rows = 8;
    }
    BlasBackend backend(o);
    std::vector<std::vector<char>> bits[2];
    for (const AttentionProblem* q : {&exact, &p}) {
      ASSERT_TRUE(backend.Forward(*q, args).ok());
      FillGradients(*grads, 0xff);
      RunInfo info;
      ASSERT_TRUE(backend.Backward(*q, args, grads->args(), &info).ok());
      const bool fast = q == &p;
      EXPECT_EQ(info.kernel.find("dv,dk,dq=bf16") != std::string::npos, fast)
          << variant << ": " << info.kernel;
      EXPECT_NE(info.kernel.find(modes[variant]), std::string::npos) << info.kernel;
      const ReferenceGradients ref = ComputeReferenceBackward(*q, args, grads->d_o.view());
      const Comparison cmp = CompareGradients(*q, grads->args(), ref);
      EXPECT_TRUE(cmp.ok()) << variant << " " << info.kernel << ": " << cmp.first_failure
                            << "; max |err| / bound " << cmp.max_bound_fraction;
      bits[fast] = {Bytes(grads->dq), Bytes(grads->dk), Bytes(grads->dv)};
    }
    EXPECT_NE(bits[0][0], bits[1][0]) << variant << ": dq did not change under FAST";
    EXPECT_NE(bits[0][1], bits[1][1]) << variant << ": dk did not change under FAST";
    EXPECT_NE(bits[0][2], bits[1][2]) << variant << ": dv did not change under FAST";
  }
}

TEST(BlasBackward, CapabilitiesRefuseWhatHasNoBackward) {
  BlasBackend& backend = BackendFor(Mode::kOneThread);
  AttentionProblem p = Problem(1, 2, 2, 8, 8, 16);
  p.kv_dtype = DType::kI8;
  EXPECT_EQ(backend.SupportsBackward(p).code(), absl::StatusCode::kUnimplemented);
  p = Problem(1, 2, 2, 8, 8, 16);
  p.q_lengths = {8};
  p.kv_lengths = {8};
  EXPECT_EQ(backend.SupportsBackward(p).code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(backend.SupportsBackward(Problem(1, 2, 2, 8, 8, 16)).ok());
}

}  // namespace
}  // namespace attnkit
