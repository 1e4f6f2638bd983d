// The CUDA plugin through the registry's dlopen route. Without a usable GPU
// every entry point must fail cleanly with the CUDA reason; with one, a small
// GQA problem must match the fp64 reference on both backends.
#include <string>

#include "absl/strings/match.h"
#include "core/compare.h"
#include "core/execute.h"
#include "core/problem.h"
#include "core/problem_data.h"
#include "core/reference.h"
#include "core/registry.h"
#include "gtest/gtest.h"
#include "tests/required_backends.h"

namespace attnkit {
namespace {

std::string* plugin_path = nullptr;

// For an unavailable backend: a failure when ATTNKIT_REQUIRE_BACKENDS names it.
::testing::AssertionResult NotRequired(const Backend& b) {
  if (!testing_env::IsRequired(b.Name())) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << b.Name()
         << " is named in ATTNKIT_REQUIRE_BACKENDS but is unavailable: " << b.Available();
}

class CudaPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(plugin_path, nullptr) << "usage: cuda_plugin_test PATH/libattnkit_cuda.so";
    const absl::Status loaded = registry_.LoadPlugin(*plugin_path);
    ASSERT_TRUE(loaded.ok()) << loaded;
  }
  BackendRegistry registry_;
};

AttentionProblem SmallGqa(DType dtype) {
  AttentionProblem p;
  p.batch = 2;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  p.model_dim = 256;
  p.q_len = 33;
  p.kv_len = 70;
  p.dtype = p.kv_dtype = dtype;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.scale = 0.125f;
  p.return_lse = true;
  p.name = p.Id();
  return p;
}

TEST_F(CudaPluginTest, ProvidesBothBackends) {
  EXPECT_EQ(registry_.Names(), (std::vector<std::string>{"cuda", "cuda-cublas"}));
  for (Backend* b : registry_.All()) {
    const Capabilities c = b->Caps();
    EXPECT_EQ(c.dtypes.size(), 3u) << b->Name();
    EXPECT_TRUE(c.lse && c.kv_lengths && c.blocked_mask && c.additive_bias && c.softcap);
    EXPECT_FALSE(b->UsesHostMemory());
  }
  auto flash = registry_.Find("cuda");
  ASSERT_TRUE(flash.ok());
  EXPECT_EQ((*flash)->Caps().max_head_dim, 256);
}

TEST_F(CudaPluginTest, UnavailableWithoutGpuSaysWhy) {
  for (Backend* b : registry_.All()) {
    const absl::Status available = b->Available();
    if (available.ok()) GTEST_SKIP() << "a GPU is present";
    EXPECT_EQ(available.code(), absl::StatusCode::kFailedPrecondition) << available;
    EXPECT_FALSE(available.message().empty());
    const AttentionProblem p = SmallGqa(DType::kF16);
    EXPECT_EQ(b->Supports(p).message(), available.message());
    EXPECT_FALSE(b->Allocate(1024).ok());
    EXPECT_FALSE(b->Synchronize().ok());
    EXPECT_EQ(b->SetStream(nullptr).message(), available.message());
    auto data = ProblemData::Random(p, 1);
    ASSERT_TRUE(data.ok());
    const absl::Status run = RunOnBackend(b, p, *data, nullptr);
    EXPECT_FALSE(run.ok());
    EXPECT_TRUE(absl::StrContains(run.message(), available.message())) << run;
  }
}

TEST_F(CudaPluginTest, SmallProblemMatchesReferenceOnGpu) {
  for (Backend* b : registry_.All()) {
    if (!b->Available().ok()) {
      ASSERT_TRUE(NotRequired(*b));
      GTEST_SKIP() << b->Available();
    }
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      const AttentionProblem p = SmallGqa(t);
      auto data = ProblemData::Random(p, 7);
      ASSERT_TRUE(data.ok());
      PoisonOutputs(*data);
      RunInfo info;
      const absl::Status run = RunOnBackend(b, p, *data, &info);
      ASSERT_TRUE(run.ok()) << b->Name() << ": " << run;
      const Comparison c = CompareToReference(p, data->args(), ComputeReference(p, data->args()));
      EXPECT_TRUE(c.ok()) << b->Name() << " [" << info.kernel << "] " << p.name << ": "
                          << c.first_failure;
    }
  }
}

// Few packed rows per KV head (decode, short chunks) take the decode kernel
// on "cuda"; both backends must match the reference on them, with GQA, head
// dims that are padded, masks, padding, bias, softcap and NaN/Inf inputs.
TEST_F(CudaPluginTest, DecodeShapesMatchReference) {
  struct Case {
    int64_t heads, kv_heads, q_len, kv_len, head_dim;
    DType dtype;
    MaskKind mask;
  };
  const Case cases[] = {
      {32, 8, 1, 4099, 128, DType::kBF16, MaskKind::kCausal},     // split-K decode
      {8, 1, 2, 700, 64, DType::kF16, MaskKind::kSlidingWindow},  // MQA, 16 rows
      {4, 4, 1, 70, 256, DType::kF32, MaskKind::kNone},           // MHA, d = 256
      {6, 2, 3, 1500, 80, DType::kF16, MaskKind::kCausal},        // padded d, 9 rows
  };
  for (Backend* b : registry_.All()) {
    if (!b->Available().ok()) {
      ASSERT_TRUE(NotRequired(*b));
      GTEST_SKIP() << b->Available();
    }
    int n = 0;
    for (const Case& c : cases) {
      for (bool extras : {false, true}) {
        AttentionProblem p = BasicProblem(2, c.heads, c.kv_heads, c.q_len, c.kv_len, c.head_dim);
        p.dtype = p.kv_dtype = c.dtype;
        p.mask = c.mask;
        p.alignment = Alignment::kBottomRight;
        if (c.mask == MaskKind::kSlidingWindow) p.window_left = 300;
        p.return_lse = true;
        if (extras) {
          p.kv_lengths = {c.kv_len / 2, c.kv_len};
          p.additive_bias = p.blocked_mask = true;
          p.softcap = 30.0f;
          p.nonfinite_inputs = 3;
        }
        p.name = p.Id();
        ASSERT_TRUE(ValidateProblem(p).ok()) << ValidateProblem(p);
        auto data = ProblemData::Random(p, 11 + n++);
        ASSERT_TRUE(data.ok()) << data.status();
        PoisonOutputs(*data);
        RunInfo info;
        const absl::Status run = RunOnBackend(b, p, *data, &info);
        ASSERT_TRUE(run.ok()) << b->Name() << " " << p.name << ": " << run;
        if (b->Name() == "cuda") {
          EXPECT_TRUE(absl::StartsWith(info.kernel, "flash-decode")) << info.kernel;
        }
        const Comparison cmp =
            CompareToReference(p, data->args(), ComputeReference(p, data->args()));
        EXPECT_TRUE(cmp.ok()) << b->Name() << " [" << info.kernel << "] " << p.name << ": "
                              << cmp.first_failure;
      }
    }
  }
}

// A stream set by the caller (here CUDA's legacy default stream, as PyTorch's
// default stream is) carries the work: results are right after Synchronize.
TEST_F(CudaPluginTest, RunsOnTheStreamTheCallerSets) {
  for (Backend* b : registry_.All()) {
    if (!b->Available().ok()) {
      ASSERT_TRUE(NotRequired(*b));
      GTEST_SKIP() << b->Available();
    }
    ASSERT_TRUE(b->SetStream(nullptr).ok());
    const AttentionProblem p = SmallGqa(DType::kBF16);
    auto data = ProblemData::Random(p, 5);
    ASSERT_TRUE(data.ok());
    PoisonOutputs(*data);
    RunInfo info;
    const absl::Status run = RunOnBackend(b, p, *data, &info);
    ASSERT_TRUE(run.ok()) << b->Name() << ": " << run;
    const Comparison c = CompareToReference(p, data->args(), ComputeReference(p, data->args()));
    EXPECT_TRUE(c.ok()) << b->Name() << " [" << info.kernel << "]: " << c.first_failure;
  }
}

// Scratch device memory grows once and is reused: repeated calls, and a
// smaller problem after a larger one, allocate nothing more (the count each
// backend reports in RunInfo::workspace_allocations).
TEST_F(CudaPluginTest, WorkspaceIsReusedAcrossCalls) {
  for (Backend* b : registry_.All()) {
    if (!b->Available().ok()) {
      ASSERT_TRUE(NotRequired(*b));
      GTEST_SKIP() << b->Available();
    }
    // Decode over many keys: few blocks, so the flash kernel splits K.
    AttentionProblem large = BasicProblem(1, 8, 2, 1, 4096, 64);
    AttentionProblem small = BasicProblem(1, 8, 2, 1, 1024, 64);
    int64_t after_first = -1;
    for (const AttentionProblem& p : {large, large, large, small, large}) {
      auto data = ProblemData::Random(p, 3);
      ASSERT_TRUE(data.ok());
      RunInfo info;
      const absl::Status run = RunOnBackend(b, p, *data, &info);
      ASSERT_TRUE(run.ok()) << b->Name() << ": " << run;
      ASSERT_GE(info.workspace_allocations, 0) << b->Name() << " does not report allocations";
      if (after_first < 0) {
        after_first = info.workspace_allocations;
      } else {
        EXPECT_EQ(info.workspace_allocations, after_first)
            << b->Name() << " [" << info.kernel << "] allocated again for " << p.Id();
      }
    }
  }
}

}  // namespace
}  // namespace attnkit

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc > 1) attnkit::plugin_path = new std::string(argv[1]);
  return RUN_ALL_TESTS();
}
