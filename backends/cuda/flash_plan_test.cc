// Forward launch planning on the CPU: which kernel and which instance the
// compute mode selects (EXACT: f32 P on the CUDA cores; FAST: 16-bit P on
// tensor cores), and what the run info says about it.
#include "backends/cuda/flash_plan.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "backends/cuda/params.h"
#include "gtest/gtest.h"
#include "harness/problem_data.h"

namespace attnkit {
namespace cuda {
namespace {

constexpr int kSms = 132;  // H100 SXM

AttentionProblem Problem(DType q, DType kv, ComputeMode mode, int64_t q_len, int64_t kv_len,
                         int64_t head_dim = 128) {
  AttentionProblem p;
  p.batch = 2;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = head_dim;
  p.model_dim = 8 * head_dim;
  p.q_len = q_len;
  p.kv_len = kv_len;
  p.dtype = q;
  p.kv_dtype = kv;
  p.compute = mode;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.scale = 0.125f;
  p.name = p.Id();
  return p;
}

// The plans of every launch of p (one for a dense batch).
std::vector<LaunchPlan> Plans(const AttentionProblem& p) {
  std::vector<LaunchPlan> plans;
  auto data = ProblemData::Allocate(p);
  EXPECT_TRUE(data.ok()) << data.status();
  if (!data.ok()) return plans;
  auto launches = MakeFlashLaunches(p, data->args());
  EXPECT_TRUE(launches.ok()) << launches.status();
  if (!launches.ok()) return plans;
  for (const FlashLaunch& l : *launches) {
    auto plan = PlanLaunch(l.params, kSms, "cuda");
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (plan.ok()) plans.push_back(*plan);
  }
  return plans;
}

LaunchPlan PlanOf(const AttentionProblem& p) {
  const std::vector<LaunchPlan> plans = Plans(p);
  return plans.empty() ? LaunchPlan{} : plans.front();
}

TEST(PlanLaunchTest, ExactPrefillKeepsPInF32) {
  for (DType t : {DType::kBF16, DType::kF16}) {
    const LaunchPlan plan = PlanOf(Problem(t, t, ComputeMode::kExact, 1024, 1024));
    SCOPED_TRACE(DTypeName(t));
    EXPECT_FALSE(plan.decode);
    EXPECT_FALSE(plan.params.round_p);
    EXPECT_FALSE(plan.params.round_q);
    EXPECT_FALSE(plan.config.tensor_core_pv) << "EXACT: P V on the CUDA cores with f32 P";
    EXPECT_EQ(plan.config.smem_bytes, FlashConfig(128, plan.params.compute, false).smem_bytes);
    const std::string name = KernelName(plan);
    EXPECT_TRUE(absl::StartsWith(
        name, t == DType::kBF16 ? "flash-wmma-bf16 d128 m64n64w4" : "flash-wmma-f16 d128 m64n64w4"))
        << name;
    EXPECT_TRUE(absl::EndsWith(name, " p=f32")) << name;
  }
}

TEST(PlanLaunchTest, FastPrefillRoundsPOnTensorCores) {
  const LaunchPlan bf16 =
      PlanOf(Problem(DType::kBF16, DType::kBF16, ComputeMode::kFast, 1024, 1024));
  EXPECT_FALSE(bf16.decode);
  EXPECT_TRUE(bf16.params.round_p);
  EXPECT_TRUE(bf16.config.tensor_core_pv);
  EXPECT_EQ(KernelName(bf16), "flash-wmma-bf16 d128 m64n64w4 splits=1 p=bf16");
  const LaunchPlan f16 = PlanOf(Problem(DType::kF16, DType::kF16, ComputeMode::kFast, 1024, 1024));
  EXPECT_TRUE(f16.config.tensor_core_pv);
  EXPECT_TRUE(absl::EndsWith(KernelName(f16), " p=f16")) << KernelName(f16);
}

// FAST with Q stored in another type than K: the tiles take K/V's type and
// Q is rounded to it (the name says so); EXACT runs such a pair in f32.
TEST(PlanLaunchTest, FastMixedTypesRoundQToK) {
  const LaunchPlan fast =
      PlanOf(Problem(DType::kF32, DType::kBF16, ComputeMode::kFast, 1024, 1024));
  EXPECT_EQ(fast.params.compute, ComputeKind::kBF16);
  EXPECT_TRUE(fast.params.round_q && fast.params.round_p);
  EXPECT_FALSE(fast.params.q_vec) << "f32 Q converts (rounds) element by element";
  EXPECT_EQ(KernelName(fast), "flash-wmma-bf16 d128 m64n64w4 splits=1 q->bf16 p=bf16");
  const LaunchPlan exact =
      PlanOf(Problem(DType::kF32, DType::kBF16, ComputeMode::kExact, 1024, 1024));
  EXPECT_EQ(exact.params.compute, ComputeKind::kF32);
  EXPECT_FALSE(exact.config.tensor_core_pv);
  EXPECT_TRUE(absl::StartsWith(KernelName(exact), "flash-simt-f32 ")) << KernelName(exact);
  EXPECT_TRUE(absl::EndsWith(KernelName(exact), " p=f32")) << KernelName(exact);
}

// The decode kernel keeps P in f32 in both modes; FAST still rounds Q.
TEST(PlanLaunchTest, DecodeKeepsPInF32InBothModes) {
  const LaunchPlan exact =
      PlanOf(Problem(DType::kBF16, DType::kBF16, ComputeMode::kExact, 1, 4096));
  ASSERT_TRUE(exact.decode);
  EXPECT_TRUE(absl::EndsWith(KernelName(exact), " p=f32")) << KernelName(exact);
  const LaunchPlan fast = PlanOf(Problem(DType::kBF16, DType::kBF16, ComputeMode::kFast, 1, 4096));
  ASSERT_TRUE(fast.decode);
  EXPECT_FALSE(fast.params.round_p) << "cleared for the decode kernel";
  EXPECT_TRUE(fast.params.round_q);
  EXPECT_TRUE(absl::EndsWith(KernelName(fast), " p=f32")) << KernelName(fast);
  const LaunchPlan mixed = PlanOf(Problem(DType::kF32, DType::kF16, ComputeMode::kFast, 1, 4096));
  ASSERT_TRUE(mixed.decode);
  EXPECT_TRUE(mixed.params.round_q) << "Q rounded to f16 as it is loaded";
  EXPECT_TRUE(absl::StrContains(KernelName(mixed), "q->f16 p=f32")) << KernelName(mixed);
}

// Every head-dim bucket has both instances for 16-bit tiles.
TEST(PlanLaunchTest, EveryBucketPlansBothModes) {
  for (int64_t d : {16, 64, 80, 128, 200, 256}) {
    for (ComputeMode mode : {ComputeMode::kExact, ComputeMode::kFast}) {
      SCOPED_TRACE(testing::Message() << "d " << d << " " << ComputeModeName(mode));
      const LaunchPlan plan = PlanOf(Problem(DType::kF16, DType::kF16, mode, 100, 100, d));
      EXPECT_EQ(plan.config.head_dim, HeadDimBucket(d));
      EXPECT_EQ(plan.config.tensor_core_pv, mode == ComputeMode::kFast);
    }
  }
  FlashParams f;
  f.head_dim = 300;
  f.rows_per_kv_head = 100;
  EXPECT_EQ(PlanLaunch(f, kSms, "cuda").status().code(), absl::StatusCode::kUnimplemented);
}

// Ev != E: one bucket covers the wider head dim (the other's tiles are
// zero-padded), split-K partials are dv wide, and the name says both dims;
// a dim past every bucket is refused naming both.
TEST(PlanLaunchTest, ValueHeadDimTakesTheWiderBucket) {
  struct Case {
    int64_t d, dv;
    int bucket;
  };
  for (const Case& c :
       {Case{64, 128, 128}, Case{128, 64, 128}, Case{192, 128, 256}, Case{32, 256, 256}}) {
    for (const int64_t q_len : {int64_t{1}, int64_t{300}}) {  // decode and prefill kernels
      SCOPED_TRACE(testing::Message() << "d " << c.d << " dv " << c.dv << " Tq " << q_len);
      AttentionProblem p = Problem(DType::kBF16, DType::kBF16, ComputeMode::kExact, q_len,
                                   /*kv_len=*/4096, c.d);
      p.value_head_dim = c.dv;
      p.name = p.Id();
      const LaunchPlan plan = PlanOf(p);
      EXPECT_EQ(plan.bucket, c.bucket);
      EXPECT_EQ(plan.config.head_dim, c.bucket);
      EXPECT_EQ(plan.params.value_dim, c.dv);
      const std::string name = KernelName(plan);
      EXPECT_TRUE(absl::StrContains(name, absl::StrFormat("dqk=%d dv=%d", c.d, c.dv))) << name;
      if (plan.params.num_splits > 1) {
        const size_t rows = static_cast<size_t>(plan.params.num_splits) * 2 * 8 * q_len;
        EXPECT_EQ(plan.partial_o_bytes, rows * c.dv * sizeof(float));
      }
    }
  }
  // MLA's 576/512 is past the largest compiled bucket (256).
  AttentionProblem mla = Problem(DType::kBF16, DType::kBF16, ComputeMode::kExact, 1, 64, 128);
  auto data = ProblemData::Allocate(mla);
  ASSERT_TRUE(data.ok()) << data.status();
  auto f = MakeFlashParams(mla, data->args());
  ASSERT_TRUE(f.ok()) << f.status();
  FlashParams wide = *f;
  wide.head_dim = 576;
  wide.value_dim = 512;
  const auto refused = PlanLaunch(wide, kSms, "cuda");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "head_dim 576 with value_head_dim 512"))
      << refused.status();
}

// fp8 K/V plans the f32 kernels and says the storage type in the name.
TEST(PlanLaunchTest, Fp8KvNamesItsFormat) {
  for (const int64_t q_len : {int64_t{1}, int64_t{300}}) {
    const LaunchPlan e4m3 =
        PlanOf(Problem(DType::kBF16, DType::kF8E4M3, ComputeMode::kExact, q_len, 512));
    EXPECT_TRUE(absl::StrContains(KernelName(e4m3), "kv=f8e4m3")) << KernelName(e4m3);
    EXPECT_EQ(e4m3.params.compute, ComputeKind::kF32);
    const LaunchPlan e5m2 =
        PlanOf(Problem(DType::kF32, DType::kF8E5M2, ComputeMode::kExact, q_len, 512));
    EXPECT_TRUE(absl::StrContains(KernelName(e5m2), "kv=f8e5m2")) << KernelName(e5m2);
    EXPECT_FALSE(e5m2.params.round_p);
  }
}

TEST(PlanLaunchTest, RaggedNameCountsKernelsAndNamesTheMode) {
  AttentionProblem p = Problem(DType::kBF16, DType::kBF16, ComputeMode::kFast, 100, 300);
  p.layout = Layout::kBTHD;
  p.batch = 3;
  p.q_lengths = {100, 1, 100};
  p.kv_lengths = {300, 50, 300};
  p.name = p.Id();
  const std::vector<LaunchPlan> plans = Plans(p);
  ASSERT_EQ(plans.size(), 3u);
  const std::string name = RaggedKernelName(plans);
  EXPECT_TRUE(absl::StartsWith(name, "ragged seqs=3: 2x flash-wmma-bf16 ")) << name;
  EXPECT_TRUE(absl::StrContains(name, " p=bf16; 1x flash-decode-f32 ")) << name;
}

}  // namespace
}  // namespace cuda
}  // namespace attnkit
