// The CUDA plugin through the registry's dlopen route. Without a usable GPU
// every entry point must fail cleanly with the CUDA reason; with one, a small
// GQA problem must match the fp64 reference on both backends, calls
// alternating between two streams must not share scratch in flight, 16-bit
// problems in both compute modes (EXACT and FAST) on both, the serving
// problems (paged, int8 and ragged) on "cuda", and the backward pass of
// "cuda" the fp64 reference backward.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <future>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "backends/cuda/bwd_test_cases.h"
#include "core/problem.h"
#include "gtest/gtest.h"
#include "harness/execute.h"
#include "harness/grad_data.h"
#include "harness/problem_data.h"
#include "oracle/compare.h"
#include "oracle/compare_grad.h"
#include "oracle/reference.h"
#include "oracle/reference_backward.h"
#include "plugin/registry.h"
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

  // The fp64 references of data[n], drawn for `p` from seed first_seed + n.
  // They are these tests' slow part (a few seconds for a prefill on one
  // core, far more than the GPU takes), and both backends of a test check
  // the same inputs, so each is computed once per test; the missing ones
  // side by side, a thread each (the GPU machine has the cores).
  std::vector<const ReferenceResult*> References(const AttentionProblem& p, uint64_t first_seed,
                                                 const std::vector<ProblemData>& data) {
    auto key = [&](size_t n) { return Key(p, first_seed + n); };
    std::vector<std::future<ReferenceResult>> pending(data.size());
    for (size_t n = 0; n < data.size(); ++n) {
      if (references_.count(key(n)) != 0) continue;
      const ProblemData& d = data[n];
      pending[n] =
          std::async(std::launch::async, [&p, &d] { return ComputeReference(p, d.args()); });
    }
    std::vector<const ReferenceResult*> out;
    for (size_t n = 0; n < data.size(); ++n) {
      if (pending[n].valid()) references_.emplace(key(n), pending[n].get());
      out.push_back(&references_.at(key(n)));
    }
    return out;
  }
  const ReferenceResult& Reference(const AttentionProblem& p, uint64_t seed,
                                   const ProblemData& data) {
    const std::string key = Key(p, seed);
    auto it = references_.find(key);
    if (it == references_.end()) {
      it = references_.emplace(key, ComputeReference(p, data.args())).first;
    }
    return it->second;
  }

  static std::string Key(const AttentionProblem& p, uint64_t seed) {
    return absl::StrCat(p.Id(), "#", seed);
  }

  BackendRegistry registry_;
  std::map<std::string, ReferenceResult> references_;  // by Key
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
        const uint64_t seed = 11 + n++;
        auto data = ProblemData::Random(p, seed);
        ASSERT_TRUE(data.ok()) << data.status();
        PoisonOutputs(*data);
        RunInfo info;
        const absl::Status run = RunOnBackend(b, p, *data, &info);
        ASSERT_TRUE(run.ok()) << b->Name() << " " << p.name << ": " << run;
        if (b->Name() == "cuda") {
          EXPECT_TRUE(absl::StartsWith(info.kernel, "flash-decode")) << info.kernel;
        }
        const Comparison cmp = CompareToReference(p, data->args(), Reference(p, seed, *data));
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

// Calls alternating between two streams with no synchronisation between
// them share each backend's scratch memory (split-K partials, cuBLAS's
// score blocks) while the previous call may still run: every output must
// still match the reference. Before issue 33 the second stream's kernels
// could overwrite the first's partials; the stream switch now records an
// event the next stream waits on (stream_order.h, emulated on the CPU by
// stream_order_test).
TEST_F(CudaPluginTest, TwoStreamsDoNotShareScratchInFlight) {
  cudaStream_t streams[2] = {nullptr, nullptr};
  for (Backend* b : registry_.All()) {
    if (!b->Available().ok()) {
      ASSERT_TRUE(NotRequired(*b));
      GTEST_SKIP() << b->Available();
    }
    if (streams[0] == nullptr) {
      for (cudaStream_t& s : streams) {
        ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
      }
    }
    // Decode over many keys (few blocks, so the flash kernel splits K), and
    // a prefill whose query blocks reuse cuBLAS's score buffer.
    AttentionProblem decode = BasicProblem(1, 32, 8, 1, 8192, 128);
    decode.dtype = decode.kv_dtype = DType::kBF16;
    decode.return_lse = true;
    AttentionProblem prefill = BasicProblem(2, 8, 2, 300, 1100, 64);
    prefill.dtype = prefill.kv_dtype = DType::kF16;
    prefill.mask = MaskKind::kCausal;
    prefill.alignment = Alignment::kBottomRight;
    for (AttentionProblem p : {decode, prefill}) {
      p.name = p.Id();
      constexpr int kCalls = 8;
      constexpr uint64_t kFirstSeed = 300;
      std::vector<ProblemData> data;
      std::vector<PlacedProblem> placed;
      data.reserve(kCalls);
      placed.reserve(kCalls);
      for (int i = 0; i < kCalls; ++i) {
        auto d = ProblemData::Random(p, kFirstSeed + i);  // other inputs for every call
        ASSERT_TRUE(d.ok()) << d.status();
        PoisonOutputs(*d);
        data.push_back(std::move(*d));
      }
      const std::vector<const ReferenceResult*> refs = References(p, kFirstSeed, data);
      for (int i = 0; i < kCalls; ++i) {
        auto on_device = PlacedProblem::Place(b, data[i]);
        ASSERT_TRUE(on_device.ok()) << on_device.status();
        placed.push_back(std::move(*on_device));
      }
      RunInfo info;
      for (int i = 0; i < kCalls; ++i) {
        ASSERT_TRUE(b->SetStream(streams[i % 2]).ok());
        const absl::Status run = placed[i].Forward(p, &info);
        ASSERT_TRUE(run.ok()) << b->Name() << " " << p.name << " call " << i << ": " << run;
      }
      for (int i = 0; i < kCalls; ++i) {
        ASSERT_TRUE(b->SetStream(streams[i % 2]).ok());
        const absl::Status got = placed[i].DownloadOutputs(data[i]);
        ASSERT_TRUE(got.ok()) << got;
        const Comparison c = CompareToReference(p, data[i].args(), *refs[i]);
        EXPECT_TRUE(c.ok()) << b->Name() << " [" << info.kernel << "] " << p.name << " call " << i
                            << " on stream " << i % 2 << ": " << c.first_failure;
      }
    }
    ASSERT_TRUE(b->SetStream(nullptr).ok());  // nothing of ours stays on the streams
  }
  for (cudaStream_t s : streams) {
    if (s != nullptr) cudaStreamDestroy(s);
  }
}

// Serving problems: paged K/V (shuffled pages, sequences sharing pages, NaN
// in every pool row no sequence reads), int8 K/V (dense and paged) and
// ragged batches, through the decode kernel (few rows per KV head) and the
// flash kernel (prefill).
std::vector<AttentionProblem> ServingProblems() {
  std::vector<AttentionProblem> out;
  auto add = [&](AttentionProblem p) {
    p.name = p.Id();
    out.push_back(p);
  };
  // Decode over 16-key pages, fewer pages than 3 * 44: shared prefixes.
  AttentionProblem paged_decode = BasicProblem(3, 8, 2, 1, 700, 128);
  paged_decode.dtype = paged_decode.kv_dtype = DType::kBF16;
  paged_decode.page_size = 16;
  paged_decode.num_pages = 90;
  paged_decode.kv_lengths = {700, 1, 333};
  paged_decode.mask = MaskKind::kCausal;
  paged_decode.alignment = Alignment::kBottomRight;
  paged_decode.return_lse = true;
  add(paged_decode);
  // Decode with split-K over 64-key pages.
  AttentionProblem paged_split = BasicProblem(1, 32, 8, 1, 4099, 128);
  paged_split.dtype = paged_split.kv_dtype = DType::kF16;
  paged_split.page_size = 64;
  paged_split.num_pages = paged_split.max_pages() + 3;
  paged_split.return_lse = true;
  add(paged_split);
  // Prefill (flash kernel) on every compute kind, 12 pages for 2 x 10.
  AttentionProblem paged_prefill = BasicProblem(2, 4, 2, 70, 300, 64);
  paged_prefill.dtype = paged_prefill.kv_dtype = DType::kF16;
  paged_prefill.page_size = 32;
  paged_prefill.num_pages = 12;
  paged_prefill.kv_lengths = {300, 150};
  paged_prefill.mask = MaskKind::kCausal;
  paged_prefill.alignment = Alignment::kBottomRight;
  paged_prefill.return_lse = true;
  add(paged_prefill);
  AttentionProblem paged_bf16 = BasicProblem(2, 4, 2, 70, 300, 80);  // d padded to 128
  paged_bf16.dtype = paged_bf16.kv_dtype = DType::kBF16;
  paged_bf16.page_size = 32;
  paged_bf16.num_pages = 12;
  paged_bf16.kv_lengths = {300, 150};
  paged_bf16.return_lse = true;
  paged_bf16.alignment = Alignment::kBottomRight;
  paged_bf16.mask = MaskKind::kSlidingWindow;
  paged_bf16.window_left = 50;
  paged_bf16.layout = Layout::kBTHD;
  add(paged_bf16);
  AttentionProblem paged_f32 = BasicProblem(2, 6, 3, 40, 600, 32);
  paged_f32.page_size = 256;
  paged_f32.num_pages = 5;
  paged_f32.kv_lengths = {600, 513};
  add(paged_f32);
  // int8 K/V, dense: decode, and prefill with the extras.
  AttentionProblem int8_decode = BasicProblem(2, 8, 2, 1, 300, 64);
  int8_decode.dtype = DType::kBF16;
  int8_decode.kv_dtype = DType::kI8;
  int8_decode.return_lse = true;
  add(int8_decode);
  AttentionProblem int8_prefill = BasicProblem(2, 8, 2, 33, 300, 64);
  int8_prefill.dtype = DType::kF16;
  int8_prefill.kv_dtype = DType::kI8;
  int8_prefill.mask = MaskKind::kCausal;
  int8_prefill.alignment = Alignment::kBottomRight;
  int8_prefill.return_lse = true;
  add(int8_prefill);
  AttentionProblem int8_extras = int8_prefill;
  int8_extras.dtype = DType::kF32;
  int8_extras.layout = Layout::kBTHD;
  int8_extras.kv_lengths = {300, 170};
  int8_extras.additive_bias = int8_extras.blocked_mask = true;
  int8_extras.softcap = 30.0f;
  add(int8_extras);
  // int8 pools.
  AttentionProblem int8_paged_decode = paged_decode;
  int8_paged_decode.kv_dtype = DType::kI8;
  int8_paged_decode.page_size = 32;
  int8_paged_decode.num_pages = 3 * int8_paged_decode.max_pages();
  add(int8_paged_decode);
  AttentionProblem int8_paged_prefill = paged_prefill;
  int8_paged_prefill.kv_dtype = DType::kI8;
  add(int8_paged_prefill);
  // Ragged: one long prefill chunk beside short decodes, one sequence
  // without queries and one without keys; then the same paged and int8.
  AttentionProblem ragged = BasicProblem(5, 8, 2, 100, 1200, 64);
  ragged.dtype = ragged.kv_dtype = DType::kF16;
  ragged.layout = Layout::kBTHD;
  ragged.q_lengths = {100, 1, 1, 0, 1};
  ragged.kv_lengths = {300, 1200, 5, 7, 0};
  ragged.mask = MaskKind::kCausal;
  ragged.alignment = Alignment::kBottomRight;
  ragged.return_lse = true;
  add(ragged);
  AttentionProblem ragged_paged = ragged;
  ragged_paged.dtype = DType::kBF16;
  ragged_paged.kv_dtype = DType::kI8;
  ragged_paged.page_size = 64;
  ragged_paged.num_pages = 5 * ragged_paged.max_pages();
  add(ragged_paged);
  return out;
}

// "cuda" claims paged, int8 and ragged problems in its capabilities, so its
// Supports() may refuse them only for a machine reason (no GPU: the
// Available() message); "cuda-cublas" does not claim them and names the
// feature it lacks. Runs without a GPU.
TEST_F(CudaPluginTest, ServingFeaturesAreClaimedOnlyByFlash) {
  auto flash = registry_.Find("cuda");
  auto cublas = registry_.Find("cuda-cublas");
  ASSERT_TRUE(flash.ok() && cublas.ok());
  const Capabilities caps = (*flash)->Caps();
  EXPECT_TRUE(caps.paged_kv && caps.ragged);
  EXPECT_NE(std::find(caps.kv_dtypes.begin(), caps.kv_dtypes.end(), DType::kI8),
            caps.kv_dtypes.end());
  for (const AttentionProblem& p : ServingProblems()) {
    ASSERT_TRUE(ValidateProblem(p).ok()) << p.name << ": " << ValidateProblem(p);
    EXPECT_TRUE(CheckCapabilities(caps, p).ok()) << p.name << ": " << CheckCapabilities(caps, p);
    const absl::Status flash_supports = (*flash)->Supports(p);
    const absl::Status available = (*flash)->Available();
    if (available.ok()) {
      EXPECT_TRUE(flash_supports.ok()) << p.name << ": " << flash_supports;
    } else {
      EXPECT_EQ(flash_supports.code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_EQ(flash_supports.message(), available.message()) << p.name;
    }
    const absl::Status refused = CheckCapabilities((*cublas)->Caps(), p);
    EXPECT_EQ(refused.code(), absl::StatusCode::kUnimplemented) << p.name;
    const bool names_feature = absl::StrContains(refused.message(), "paged") ||
                               absl::StrContains(refused.message(), "ragged") ||
                               absl::StrContains(refused.message(), "kv_dtype i8");
    EXPECT_TRUE(names_feature) << p.name << ": " << refused;
    if ((*cublas)->Available().ok()) {
      EXPECT_EQ((*cublas)->Supports(p).code(), absl::StatusCode::kUnimplemented) << p.name;
    }
  }
}

TEST_F(CudaPluginTest, ServingProblemsMatchReferenceOnGpu) {
  auto flash = registry_.Find("cuda");
  ASSERT_TRUE(flash.ok());
  Backend* b = *flash;
  if (!b->Available().ok()) {
    ASSERT_TRUE(NotRequired(*b));
    GTEST_SKIP() << b->Available();
  }
  int n = 0;
  for (const AttentionProblem& p : ServingProblems()) {
    ASSERT_TRUE(b->Supports(p).ok()) << p.name << ": " << b->Supports(p);
    auto data = ProblemData::Random(p, 21 + n++);
    ASSERT_TRUE(data.ok()) << data.status();
    PoisonOutputs(*data);
    RunInfo info;
    const absl::Status run = RunOnBackend(b, p, *data, &info);
    ASSERT_TRUE(run.ok()) << p.name << ": " << run;
    const Comparison c = CompareToReference(p, data->args(), ComputeReference(p, data->args()));
    EXPECT_TRUE(c.ok()) << "[" << info.kernel << "] " << p.name << ": " << c.first_failure;
    // Provenance: what ran says what it read.
    if (p.is_ragged()) {
      EXPECT_TRUE(absl::StartsWith(info.kernel, "ragged seqs=4: ")) << info.kernel;
    } else if (p.q_len * p.group_size() <= 16) {
      EXPECT_TRUE(absl::StartsWith(info.kernel, "flash-decode")) << info.kernel;
    }
    if (p.is_paged()) {
      EXPECT_TRUE(absl::StrContains(info.kernel, absl::StrCat("paged=", p.page_size)))
          << info.kernel;
    }
    if (p.kv_dtype == DType::kI8) {
      EXPECT_TRUE(absl::StrContains(info.kernel, "kv=i8")) << info.kernel;
    }
  }
}

// The compute modes (config.proto compute) on 16-bit problems: each runs
// EXACT and FAST. EXACT must meet the oracle's fp32 bound (no rounding of P
// granted), FAST the bound with P rounded to V's type and Q to K's; the run
// info names what was rounded. Flash kernel (every head-dim bucket, masks,
// extras, paged, ragged) and decode kernel (split-K), same and mixed types.
std::vector<AttentionProblem> ComputeModeProblems() {
  std::vector<AttentionProblem> out;
  auto add = [&](AttentionProblem p) {
    p.return_lse = true;
    for (ComputeMode mode : {ComputeMode::kExact, ComputeMode::kFast}) {
      p.compute = mode;
      p.name = p.Id();
      out.push_back(p);
    }
  };
  const std::pair<DType, DType> kTypes[] = {
      {DType::kBF16, DType::kBF16}, {DType::kF16, DType::kF16},  {DType::kF32, DType::kBF16},
      {DType::kF32, DType::kF16},   {DType::kBF16, DType::kF16}, {DType::kF16, DType::kBF16}};
  for (const auto& [q, kv] : kTypes) {
    // Prefill, GQA 4, causal: the flash kernel with split-K.
    AttentionProblem prefill = BasicProblem(2, 8, 2, 129, 257, 64);
    prefill.dtype = q;
    prefill.kv_dtype = kv;
    prefill.mask = MaskKind::kCausal;
    prefill.alignment = Alignment::kBottomRight;
    add(prefill);
    // Decode over a long cache: the decode kernel with split-K.
    AttentionProblem decode = BasicProblem(1, 32, 8, 1, 4099, 128);
    decode.dtype = q;
    decode.kv_dtype = kv;
    add(decode);
  }
  for (DType t : {DType::kBF16, DType::kF16}) {
    // Every head-dim bucket (16 and 80 padded), MHA and MQA.
    for (int64_t d : {16, 80, 128, 256}) {
      AttentionProblem p = BasicProblem(1, 12, d == 256 ? 2 : 12, 70, 300, d);
      p.dtype = p.kv_dtype = t;
      p.mask = d == 80 ? MaskKind::kSlidingWindow : MaskKind::kNone;
      if (d == 80) p.window_left = 40;
      p.alignment = Alignment::kBottomRight;
      add(p);
    }
    // The extras: padding, dense mask, bias, softcap, NaN/Inf inputs, BTHD.
    AttentionProblem extras = BasicProblem(2, 6, 2, 65, 200, 64);
    extras.dtype = extras.kv_dtype = t;
    extras.mask = MaskKind::kCausal;
    extras.alignment = Alignment::kTopLeft;
    extras.kv_lengths = {200, 77};
    extras.additive_bias = extras.blocked_mask = true;
    extras.softcap = 20.0f;
    extras.nonfinite_inputs = 3;
    extras.layout = Layout::kBTHD;
    add(extras);
  }
  // Serving ("cuda" only): paged prefill, and a ragged batch mixing a
  // prefill chunk (flash kernel) with decodes (decode kernel).
  AttentionProblem paged = BasicProblem(2, 4, 2, 70, 300, 64);
  paged.dtype = DType::kF32;
  paged.kv_dtype = DType::kBF16;
  paged.page_size = 32;
  paged.num_pages = 12;
  paged.kv_lengths = {300, 150};
  paged.mask = MaskKind::kCausal;
  paged.alignment = Alignment::kBottomRight;
  add(paged);
  AttentionProblem ragged = BasicProblem(4, 8, 2, 100, 600, 64);
  ragged.dtype = ragged.kv_dtype = DType::kF16;
  ragged.layout = Layout::kBTHD;
  ragged.q_lengths = {100, 1, 0, 3};
  ragged.kv_lengths = {300, 600, 7, 40};
  ragged.mask = MaskKind::kCausal;
  ragged.alignment = Alignment::kBottomRight;
  add(ragged);
  return out;
}

// Both backends compute FAST for 16-bit K/V and only there (int8 K/V runs
// EXACT only on "cuda"). Runs without a GPU.
TEST_F(CudaPluginTest, FastIsClaimedForSixteenBitKv) {
  for (Backend* b : registry_.All()) {
    const Capabilities caps = b->Caps();
    EXPECT_EQ(caps.fast_kv_dtypes, (std::vector<DType>{DType::kF16, DType::kBF16})) << b->Name();
    for (const AttentionProblem& p : ComputeModeProblems()) {
      if (!CheckCapabilities(caps, p).ok()) {
        EXPECT_TRUE(b->Name() == "cuda-cublas" && (p.is_paged() || p.is_ragged()))
            << b->Name() << " " << p.name << ": " << CheckCapabilities(caps, p);
      }
    }
    AttentionProblem f32 = SmallGqa(DType::kF32);
    f32.compute = ComputeMode::kFast;
    EXPECT_TRUE(CheckCapabilities(caps, f32).ok()) << "FAST is EXACT for f32 K/V";
  }
  auto flash = registry_.Find("cuda");
  ASSERT_TRUE(flash.ok());
  AttentionProblem int8 = SmallGqa(DType::kBF16);
  int8.kv_dtype = DType::kI8;
  EXPECT_TRUE(CheckCapabilities((*flash)->Caps(), int8).ok());
  int8.compute = ComputeMode::kFast;
  const absl::Status refused = CheckCapabilities((*flash)->Caps(), int8);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(refused.message(), "compute FAST")) << refused;
}

TEST_F(CudaPluginTest, ComputeModesMatchReferenceOnGpu) {
  for (Backend* b : registry_.All()) {
    if (!b->Available().ok()) {
      ASSERT_TRUE(NotRequired(*b));
      GTEST_SKIP() << b->Available();
    }
    const std::vector<AttentionProblem> problems = ComputeModeProblems();
    for (size_t n = 0; n < problems.size(); ++n) {
      const AttentionProblem& p = problems[n];
      if (!CheckCapabilities(b->Caps(), p).ok()) continue;  // cuda-cublas: paged, ragged
      ASSERT_TRUE(ValidateProblem(p).ok()) << p.name << ": " << ValidateProblem(p);
      ASSERT_TRUE(b->Supports(p).ok()) << b->Name() << " " << p.name << ": " << b->Supports(p);
      // The same inputs in both modes (problems come in EXACT, FAST pairs).
      const uint64_t seed = 41 + n / 2;
      auto data = ProblemData::Random(p, seed);
      ASSERT_TRUE(data.ok()) << data.status();
      PoisonOutputs(*data);
      RunInfo info;
      const absl::Status run = RunOnBackend(b, p, *data, &info);
      ASSERT_TRUE(run.ok()) << b->Name() << " " << p.name << ": " << run;
      const Comparison c = CompareToReference(p, data->args(), Reference(p, seed, *data));
      EXPECT_TRUE(c.ok()) << b->Name() << " [" << info.kernel << "] " << p.name << ": "
                          << c.mismatches << " of " << c.checked << " outside the bound (error/"
                          << "bound up to " << c.max_bound_fraction
                          << "); first: " << c.first_failure;
      // Provenance: EXACT never rounds P; FAST rounds P to V's type except in
      // the decode kernel, and says when it rounded a Q of another type.
      const std::string kv(DTypeName(p.kv_dtype));
      const bool decode_only =
          b->Name() == "cuda" && !p.is_ragged() && p.q_len * p.group_size() <= 16;
      if (!p.fast()) {
        EXPECT_TRUE(absl::StrContains(info.kernel, "p=f32")) << info.kernel;
        EXPECT_FALSE(absl::StrContains(info.kernel, "q->")) << info.kernel;
      } else {
        EXPECT_TRUE(absl::StrContains(info.kernel, decode_only ? "p=f32" : "p=" + kv))
            << info.kernel;
        EXPECT_EQ(absl::StrContains(info.kernel, "q->" + kv), p.dtype != p.kv_dtype) << info.kernel;
      }
    }
  }
}

// A NaN int8 scale makes its row non-finite, as a NaN in a float row does:
// the query rows that see that key give NaN, the others are unchanged. In
// sequence 0, key 90 of KV head 0 (its K scale) and key 95 of KV head 1
// (its V scale), which under the bottom-right causal mask only the late
// queries see; sequence 1 reads neither.
TEST_F(CudaPluginTest, NanInt8ScalePoisonsOnlyTheRowsThatReadIt) {
  auto flash = registry_.Find("cuda");
  ASSERT_TRUE(flash.ok());
  Backend* b = *flash;
  if (!b->Available().ok()) {
    ASSERT_TRUE(NotRequired(*b));
    GTEST_SKIP() << b->Available();
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t q_len : {1, 3, 40}) {  // decode kernel (2, 6 rows), flash kernel (80 rows)
    for (int64_t page_size : {0, 16}) {
      AttentionProblem p = BasicProblem(2, 4, 2, q_len, 100, 64);
      p.dtype = DType::kBF16;
      p.kv_dtype = DType::kI8;
      p.mask = MaskKind::kCausal;
      p.alignment = Alignment::kBottomRight;
      p.return_lse = true;
      if (page_size > 0) {
        p.page_size = page_size;
        p.num_pages = 2 * p.max_pages();
      }
      p.name = p.Id();
      auto data = ProblemData::Random(p, 5);
      ASSERT_TRUE(data.ok()) << data.status();
      const AttentionArgs a = data->args();
      auto scale_of = [&](const TensorView& scale, int64_t g, int64_t t) -> float& {
        int64_t off = scale.Offset(0, g, t);
        if (p.is_paged()) {  // sequence 0's row of the block table
          const int32_t page = static_cast<const int32_t*>(a.block_table.data)[t / page_size];
          off = scale.Offset(page, t % page_size, g);
        }
        return static_cast<float*>(scale.data)[off];
      };
      scale_of(a.k_scale, 0, 90) = nan;
      scale_of(a.v_scale, 1, 95) = nan;
      PoisonOutputs(*data);
      RunInfo info;
      const absl::Status run = RunOnBackend(b, p, *data, &info);
      ASSERT_TRUE(run.ok()) << p.name << ": " << run;
      const Comparison c = CompareToReference(p, a, ComputeReference(p, a));
      EXPECT_TRUE(c.ok()) << "[" << info.kernel << "] " << p.name << ": " << c.first_failure;
      EXPECT_GT(c.poisoned_rows, 0) << p.name;
      EXPECT_LT(c.poisoned_rows, p.batch * p.num_heads * p.q_len)
          << p.name << ": sequence 1 is clean";
    }
  }
}

// ---- The backward pass ----

// "cuda" claims the backward pass (within its forward's head dims, layouts
// and groups); "cuda-cublas" claims none and refuses through its caps.
// Without a GPU, "cuda" refuses with the CUDA reason. Runs without a GPU.
TEST_F(CudaPluginTest, BackwardIsClaimedOnlyByFlash) {
  auto flash = registry_.Find("cuda");
  auto cublas = registry_.Find("cuda-cublas");
  ASSERT_TRUE(flash.ok() && cublas.ok());
  const BackwardCapabilities bw = (*flash)->Caps().backward;
  EXPECT_TRUE(bw.supported);
  EXPECT_EQ(bw.dtypes, (std::vector<DType>{DType::kF32, DType::kF16, DType::kBF16}));
  EXPECT_EQ(bw.kv_dtypes, bw.dtypes);
  EXPECT_EQ(bw.masks.size(), 3u);
  EXPECT_TRUE(bw.kv_lengths && bw.blocked_mask && bw.additive_bias && bw.bias_grad && bw.softcap &&
              bw.deterministic);
  EXPECT_FALSE(bw.ragged);
  EXPECT_FALSE((*cublas)->Caps().backward.supported);
  for (const cuda::BwdTestCase& c : cuda::BackwardTestCases()) {
    const AttentionProblem& p = c.problem;
    ASSERT_TRUE(ValidateProblem(p).ok()) << p.name << ": " << ValidateProblem(p);
    EXPECT_TRUE(CheckBackwardCapabilities((*flash)->Caps(), p).ok())
        << p.name << ": " << CheckBackwardCapabilities((*flash)->Caps(), p);
    EXPECT_EQ(CheckBackwardCapabilities((*cublas)->Caps(), p).code(),
              absl::StatusCode::kUnimplemented)
        << p.name;
    const absl::Status available = (*flash)->Available();
    if (!available.ok()) {
      EXPECT_EQ((*flash)->SupportsBackward(p).message(), available.message());
    } else {
      EXPECT_TRUE((*flash)->SupportsBackward(p).ok()) << (*flash)->SupportsBackward(p);
    }
  }
  // Paged and int8 K/V have no backward pass.
  AttentionProblem int8 = BasicProblem(1, 4, 2, 8, 64, 64);
  int8.kv_dtype = DType::kI8;
  int8.return_lse = true;
  EXPECT_EQ(CheckBackwardCapabilities((*flash)->Caps(), int8).code(),
            absl::StatusCode::kUnimplemented);
}

// The backward pass on the backend's own forward (its O and LSE) against
// the fp64 reference backward, over the cases bwd_plan_test also emulates on
// the CPU (bwd_test_cases.h); rows that see no key give dQ = 0; a second
// run gives the same bits (deterministic is claimed).
TEST_F(CudaPluginTest, BackwardMatchesReferenceOnGpu) {
  auto flash = registry_.Find("cuda");
  ASSERT_TRUE(flash.ok());
  Backend* b = *flash;
  if (!b->Available().ok()) {
    ASSERT_TRUE(NotRequired(*b));
    GTEST_SKIP() << b->Available();
  }
  uint64_t seed = 301;
  for (const cuda::BwdTestCase& c : cuda::BackwardTestCases()) {
    const AttentionProblem& p = c.problem;
    ASSERT_TRUE(b->SupportsBackward(p).ok()) << p.name << ": " << b->SupportsBackward(p);
    auto data = cuda::BackwardTestData(c, seed++);
    ASSERT_TRUE(data.ok()) << data.status();
    PoisonOutputs(*data);
    const absl::Status forward = RunOnBackend(b, p, *data, nullptr);
    ASSERT_TRUE(forward.ok()) << p.name << ": " << forward;
    auto grads = GradData::Random(p, seed++, c.with_dbias);
    ASSERT_TRUE(grads.ok()) << grads.status();
    PoisonGradients(*grads);
    RunInfo info;
    const absl::Status run = RunBackwardOnBackend(b, p, *data, *grads, &info);
    ASSERT_TRUE(run.ok()) << p.name << ": " << run;
    EXPECT_TRUE(absl::StartsWith(info.kernel, "flash-bwd")) << info.kernel;
    const Comparison cmp = CompareGradients(
        p, grads->args(), ComputeReferenceBackward(p, data->args(), grads->d_o.view()));
    EXPECT_TRUE(cmp.ok()) << "[" << info.kernel << "] " << p.name << ": " << cmp.mismatches
                          << " of " << cmp.checked << " outside the bound (error/bound up to "
                          << cmp.max_bound_fraction << "); first: " << cmp.first_failure;
    if (c.block_last_row) {
      EXPECT_TRUE(cuda::LastRowDqIsZero(p, *grads));
    }
    const std::string first = cuda::GradientBits(*grads);
    PoisonGradients(*grads);
    const absl::Status rerun = RunBackwardOnBackend(b, p, *data, *grads, nullptr);
    ASSERT_TRUE(rerun.ok()) << p.name << ": " << rerun;
    EXPECT_TRUE(cuda::GradientBits(*grads) == first) << p.name << ": a second run gave other bits";
  }
}

}  // namespace
}  // namespace attnkit

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc > 1) attnkit::plugin_path = new std::string(argv[1]);
  return RUN_ALL_TESTS();
}
