// The Highway backend on the best target against the fp64 reference, over
// the full problem grid; thread-count invariance; target forcing.
#include "backends/highway/highway_backend.h"

#include <cstring>

#include "backends/highway/flash_test_util.h"
#include "gtest/gtest.h"
#include "harness/problem_data.h"
#include "oracle/compare.h"
#include "oracle/reference.h"

namespace attnkit {
namespace {

class HighwayGridTest : public testing::TestWithParam<AttentionProblem> {};

TEST_P(HighwayGridTest, MatchesReference) {
  static Backend* backend = MakeHighwayBackend({/*num_threads=*/2}).release();
  const AttentionProblem& p = GetParam();
  ASSERT_TRUE(backend->Supports(p).ok()) << backend->Supports(p);
  std::string kernel;
  EXPECT_TRUE(CheckAgainstReference(backend, p, &kernel).ok()) << CheckAgainstReference(backend, p);
  EXPECT_NE(kernel.find("flash/"), std::string::npos) << kernel;
}

INSTANTIATE_TEST_SUITE_P(Grid, HighwayGridTest, testing::ValuesIn(TestGrid(/*small=*/false)),
                         [](const testing::TestParamInfo<AttentionProblem>& info) {
                           return info.param.Id();
                         });

// Work is split by shape only (never by thread count), so 1 and 2 threads
// give the same bits.
TEST(HighwayThreads, OneAndTwoThreadsAreBitwiseEqual) {
  auto one = MakeHighwayBackend({1});
  auto two = MakeHighwayBackend({2});
  for (const AttentionProblem& p : TestGrid(/*small=*/true)) {
    auto a = RunToVector(one.get(), p);
    auto b = RunToVector(two.get(), p);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->size(), b->size());
    EXPECT_EQ(0, std::memcmp(a->data(), b->data(), a->size() * sizeof(float))) << p.Id();
  }
}

TEST(HighwayThreads, SetNumThreadsChangesThePool) {
  auto backend = MakeHighwayBackend({1});
  EXPECT_EQ(backend->NumThreads(), 1);
  ASSERT_TRUE(backend->SetNumThreads(2).ok());
  EXPECT_EQ(backend->NumThreads(), 2);
  EXPECT_FALSE(backend->SetNumThreads(0).ok());
  std::string kernel;
  ASSERT_TRUE(
      CheckAgainstReference(backend.get(), MakeTestProblem(1, 4, 2, 9, 30, 16), &kernel).ok());
  EXPECT_NE(kernel.find("threads=2"), std::string::npos) << kernel;
}

TEST(HighwayThreads, RepeatedCallsReuseWorkspaceAndAgree) {
  auto backend = MakeHighwayBackend({2});
  AttentionProblem p = MakeTestProblem(1, 8, 2, 1, 300, 64);
  auto a = RunToVector(backend.get(), p);
  auto b = RunToVector(backend.get(), p);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

// Serving problems: paged and int8 K/V and ragged batches, against the fp64
// oracle, on 1 and 2 threads with the same bits.
std::vector<AttentionProblem> ServingProblems() {
  std::vector<AttentionProblem> out;
  AttentionProblem paged = MakeTestProblem(3, 8, 2, 1, 700, 128);
  paged.page_size = 16;
  paged.num_pages = 90;  // fewer than 3 * 44: sequences share pages
  paged.kv_lengths = {700, 1, 333};
  paged.mask = MaskKind::kCausal;
  paged.alignment = Alignment::kBottomRight;
  paged.return_lse = true;
  out.push_back(paged);
  AttentionProblem int8 = MakeTestProblem(2, 8, 2, 5, 300, 64);
  int8.kv_dtype = DType::kI8;
  int8.dtype = DType::kBF16;
  int8.return_lse = true;
  out.push_back(int8);
  AttentionProblem int8_paged = paged;
  int8_paged.kv_dtype = DType::kI8;
  int8_paged.page_size = 32;
  int8_paged.num_pages = 3 * int8_paged.max_pages();
  out.push_back(int8_paged);
  // One long prefill chunk beside short decodes, one sequence without
  // queries and one without keys.
  AttentionProblem ragged = MakeTestProblem(5, 8, 2, 100, 1200, 64);
  ragged.layout = Layout::kBTHD;
  ragged.q_lengths = {100, 1, 1, 0, 1};
  ragged.kv_lengths = {300, 1200, 5, 7, 0};
  ragged.mask = MaskKind::kCausal;
  ragged.alignment = Alignment::kBottomRight;
  ragged.return_lse = true;
  out.push_back(ragged);
  AttentionProblem ragged_paged = ragged;
  ragged_paged.page_size = 64;
  ragged_paged.num_pages = 5 * ragged_paged.max_pages();
  ragged_paged.kv_dtype = DType::kI8;
  out.push_back(ragged_paged);
  return out;
}

TEST(HighwayServing, PagedInt8AndRaggedMatchTheOracleOnOneAndTwoThreads) {
  auto one = MakeHighwayBackend({1});
  auto two = MakeHighwayBackend({2});
  for (const AttentionProblem& p : ServingProblems()) {
    ASSERT_TRUE(ValidateProblem(p).ok()) << ValidateProblem(p);
    ASSERT_TRUE(two->Supports(p).ok()) << two->Supports(p);
    absl::StatusOr<ProblemData> data = ProblemData::Random(p, 7);
    ASSERT_TRUE(data.ok()) << data.status();
    RunInfo info;
    ASSERT_TRUE(two->Forward(p, data->args(), &info).ok());
    const Comparison c = CompareToReference(p, data->args(), ComputeReference(p, data->args()));
    EXPECT_TRUE(c.ok()) << p.Id() << ": " << c.first_failure << " kernel " << info.kernel;
    if (p.is_ragged()) {
      EXPECT_NE(info.kernel.find("ragged seqs=4"), std::string::npos) << info.kernel;
    }
    auto a = RunToVector(one.get(), p);
    auto b = RunToVector(two.get(), p);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->size(), b->size());
    EXPECT_EQ(0, std::memcmp(a->data(), b->data(), a->size() * sizeof(float))) << p.Id();
  }
}

// The bf16 dot-product tiles (x86_dot.h) read K and V storage as is: a V
// (or K) whose columns are not contiguous, as a strided NumPy view gives,
// must be read by its strides (the prepared V once ignored them), in both
// compute modes. On a CPU without AVX512_BF16 the f32 kernels run instead.
TEST(HighwayStrides, Bf16PrefillWithColumnStridedKOrVMatchesTheOracle) {
  auto backend = MakeHighwayBackend({2});
  for (ComputeMode mode : {ComputeMode::kExact, ComputeMode::kFast}) {
    for (const char* strided : {"v", "k"}) {
      AttentionProblem p = MakeTestProblem(1, 8, 2, 64, 200, 64);
      p.dtype = p.kv_dtype = DType::kBF16;
      p.mask = MaskKind::kCausal;
      p.alignment = Alignment::kBottomRight;
      p.compute = mode;
      absl::StatusOr<ProblemData> data = ProblemData::Random(p, 11);
      ASSERT_TRUE(data.ok()) << data.status();
      Tensor& t = std::string(strided) == "v" ? data->v : data->k;
      const TensorView src = t.view();
      absl::StatusOr<Tensor> wide =
          Tensor::Attention(DType::kBF16, p.layout, p.batch, p.num_kv_heads, p.kv_len, 2 * 64);
      ASSERT_TRUE(wide.ok());
      TensorView view = wide->view();
      for (int64_t g = 0; g < p.num_kv_heads; ++g) {
        for (int64_t j = 0; j < p.kv_len; ++j) {
          for (int64_t c = 0; c < 2 * 64; ++c) {  // odd columns hold NaN: never read
            StoreFromF32(wide->data(), DType::kBF16, view.Offset(0, g, j, c),
                         c % 2 == 0 ? src.LoadF32(src.Offset(0, g, j, c / 2)) : NAN);
          }
        }
      }
      view.shape[3] = 64;
      view.strides[3] = 2;
      ASSERT_TRUE(wide->SetView(view).ok());
      t = std::move(*wide);
      RunInfo info;
      ASSERT_TRUE(backend->Forward(p, data->args(), &info).ok());
      const Comparison c = CompareToReference(p, data->args(), ComputeReference(p, data->args()));
      EXPECT_TRUE(c.ok()) << p.Id() << " with " << strided
                          << " column stride 2: " << c.first_failure << " kernel " << info.kernel;
    }
  }
}

// Outputs of at least 8 MiB (f32, and bf16 with d a multiple of 32) are
// written with non-temporal stores of whole vectors (StreamsOutput): every
// row written, each as the cached stores would write it, on the best target
// and on AVX2 and SSE4 where the CPU has them (their vectors join other
// halves). O starts as NaN, so a row left unwritten fails; the reference is
// fp64.
TEST(HighwayOutputs, LargeOutputsAreStreamedWholeAndMatchTheOracle) {
  struct Case {
    DType dtype;
    ComputeMode mode;
  };
  for (const Case& c :
       {Case{DType::kBF16, ComputeMode::kExact}, Case{DType::kBF16, ComputeMode::kFast},
        Case{DType::kF32, ComputeMode::kExact}}) {
    // O [1, 32, 1280, 128]: 10 MiB in bf16, 20 MiB in f32, over the 8 MiB
    // threshold; few keys keep the fp64 reference quick.
    AttentionProblem p = MakeTestProblem(1, 32, 8, 1280, 48, 128);
    p.dtype = p.kv_dtype = c.dtype;
    p.compute = c.mode;
    p.return_lse = true;
    absl::StatusOr<ProblemData> data = ProblemData::Random(p, 5);
    ASSERT_TRUE(data.ok()) << data.status();
    const ReferenceResult want = ComputeReference(p, data->args());
    for (const char* target : {"", "AVX2", "SSE4"}) {
      HighwayOptions o;
      o.num_threads = 2;
      o.target = target;
      auto backend = MakeHighwayBackend(o);
      if (!backend->Available().ok()) continue;  // a target this CPU lacks
      const TensorView out = data->o.view();
      ForEachOffset(out, [&out](int64_t at) { StoreFromF32(out.data, out.dtype, at, NAN); });
      RunInfo info;
      ASSERT_TRUE(backend->Forward(p, data->args(), &info).ok());
      const Comparison cmp = CompareToReference(p, data->args(), want);
      EXPECT_TRUE(cmp.ok()) << p.Id() << " kernel " << info.kernel << ": " << cmp.first_failure;
    }
  }
}

TEST(HighwayTarget, ForcedScalarTargetRunsAndIsReported) {
  HighwayOptions o;
  o.target = "emu128";
  auto emu = MakeHighwayBackend(o);
  if (!emu->Available().ok()) {
    o.target = "scalar";
    emu = MakeHighwayBackend(o);
  }
  ASSERT_TRUE(emu->Available().ok()) << emu->Available();
  std::string kernel;
  AttentionProblem p = MakeTestProblem(1, 2, 1, 5, 9, 12);
  ASSERT_TRUE(CheckAgainstReference(emu.get(), p, &kernel).ok());
  const std::string want = o.target == "scalar" ? "flash/SCALAR " : "flash/EMU128 ";
  EXPECT_EQ(kernel.rfind(want, 0), 0u) << kernel;
}

TEST(HighwayTarget, UnknownTargetIsUnavailableWithReason) {
  HighwayOptions o;
  o.target = "NEON";
  auto backend = MakeHighwayBackend(o);
  const absl::Status s = backend->Available();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("available:"), absl::string_view::npos) << s;
  AttentionProblem p = MakeTestProblem(1, 1, 1, 2, 2, 4);
  EXPECT_FALSE(backend->Supports(p).ok());
}

}  // namespace
}  // namespace attnkit
