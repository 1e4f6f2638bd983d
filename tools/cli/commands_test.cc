// The CLI commands end to end on files: correct results, and for bad input a
// clear error with no output file left behind.
#include "tools/cli/commands.h"

#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "backends/builtin.h"
#include "core/problem_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "harness/problem_data.h"
#include "harness/records.pb.h"
#include "io/config_io.h"
#include "io/npy.h"
#include "io/proto_json.h"
#include "ops/cost.h"
#include "oracle/compare.h"
#include "oracle/reference.h"

namespace attnkit {
namespace {

using ::testing::HasSubstr;

class RunCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/run_" + std::to_string(counter_++);
    ASSERT_EQ(system(("mkdir -p " + dir_).c_str()), 0);
  }
  std::string Path(const std::string& name) { return dir_ + "/" + name; }

  // Writes a config and random q/k/v for it; returns the problem.
  AttentionProblem Prepare(const std::string& config_text) {
    EXPECT_TRUE(WriteFileAtomically(Path("cfg.textproto"), config_text).ok());
    auto p = ProblemFromConfig(*ParseConfigText(config_text, "cfg"));
    EXPECT_TRUE(p.ok()) << p.status();
    data_ = std::move(*ProblemData::Random(*p, 5));
    const bool bthd = p->layout == Layout::kBTHD;
    for (auto [name, tensor] :
         {std::make_pair("q.npy", &data_.q), std::make_pair("k.npy", &data_.k),
          std::make_pair("v.npy", &data_.v)}) {
      TensorView v = tensor->view();
      if (bthd) {
        std::swap(v.shape[1], v.shape[2]);
        std::swap(v.strides[1], v.strides[2]);
      }
      EXPECT_TRUE(WriteNpy(Path(name), v).ok());
    }
    options_.config = Path("cfg.textproto");
    UseInputsInDir();
    options_.backend = "reference";
    return *p;
  }
  // Points --q, --k, --v at q.npy, k.npy, v.npy here and --out at o.npy.
  void UseInputsInDir() {
    options_.q = Path("q.npy");
    options_.k = Path("k.npy");
    options_.v = Path("v.npy");
    options_.out = Path("o.npy");
  }

  absl::Status Run() {
    std::ostringstream out;
    return RunCommand(GlobalRegistry(), options_, out);
  }

  bool Exists(const std::string& name) { return access(Path(name).c_str(), F_OK) == 0; }

  static int counter_;
  std::string dir_;
  CliOptions options_;
  ProblemData data_;
};
int RunCommandTest::counter_ = 0;

TEST_F(RunCommandTest, MatchesTheReferenceInBothLayouts) {
  for (const char* layout : {"BHTD", "BTHD"}) {
    const AttentionProblem p =
        Prepare(std::string("num_heads: 4 num_kv_heads: 2 head_dim: 16 q_len: 5 kv_len: 9 "
                            "mask { kind: CAUSAL } alignment: BOTTOM_RIGHT layout: ") +
                layout);
    options_.lse_out = Path("lse.npy");
    ASSERT_TRUE(Run().ok()) << Run();
    auto o = ReadNpy(Path("o.npy"));
    auto lse = ReadNpy(Path("lse.npy"));
    ASSERT_TRUE(o.ok() && lse.ok());
    const ReferenceResult ref = ComputeReference(p, data_.args());
    AttentionArgs got = data_.args();
    got.o = AttentionView(o->tensor.data(), DType::kF32, p.layout, 1, 4, 5, 16);
    AttentionProblem with_lse = p;
    with_lse.return_lse = true;
    got.lse = lse->tensor.view();
    const Comparison c = CompareToReference(with_lse, got, ref);
    EXPECT_TRUE(c.ok()) << layout << ": " << c.first_failure;
  }
}

// inputs -> run -> verify: the files `inputs` writes run as the config's
// problem (bf16 through float32 files, BTHD, padding, a dense mask and a bias
// included), `verify` passes the output `run` made and fails one changed
// value, naming it; a NaN row the problem's own inputs call for passes.
TEST_F(RunCommandTest, InputsRunVerifyRoundTrip) {
  const std::string config =
      "num_heads: 4 num_kv_heads: 2 head_dim: 16 q_len: 6 kv_len: 11 batch: 2 "
      "kv_lengths: [11, 7] mask { kind: CAUSAL } alignment: BOTTOM_RIGHT layout: BTHD "
      "dtype: BF16 kv_dtype: BF16 blocked_mask: true additive_bias: true seed: 9 "
      "return_lse: true";
  ASSERT_TRUE(WriteFileAtomically(Path("cfg.textproto"), config).ok());
  std::ostringstream out;
  options_.config = Path("cfg.textproto");
  options_.dir = dir_;
  ASSERT_TRUE(InputsCommand(options_, out).ok()) << InputsCommand(options_, out);
  EXPECT_THAT(out.str(), HasSubstr("q.npy k.npy v.npy kv_lengths.npy mask.npy bias.npy"));
  UseInputsInDir();
  options_.kv_lengths = Path("kv_lengths.npy");
  options_.mask = Path("mask.npy");
  options_.bias = Path("bias.npy");
  options_.lse_out = Path("lse.npy");
  options_.backend = "highway";
  ASSERT_TRUE(Run().ok()) << Run();
  options_.o = Path("o.npy");
  options_.lse = Path("lse.npy");
  absl::Status s = VerifyCommand(options_, out);
  EXPECT_TRUE(s.ok()) << s << "\n" << out.str();
  EXPECT_THAT(out.str(), HasSubstr(": pass;"));
  options_.sample_rows = 7;  // rows spread evenly: still a pass, fewer values
  EXPECT_TRUE(VerifyCommand(options_, out).ok());
  options_.sample_rows = -1;
  EXPECT_THAT(std::string(VerifyCommand(options_, out).message()),
              HasSubstr("--sample_rows (-1) must be >= 0"));
  options_.sample_rows = 0;

  // The same inputs `check` draws: verify agrees with the reference on them.
  auto p = ProblemFromConfig(*ParseConfigText(config, "cfg"));
  ASSERT_TRUE(p.ok());
  auto o = ReadNpy(Path("o.npy"));
  ASSERT_TRUE(o.ok());
  // One value off by 1 %: FAIL, naming it.
  auto* values = static_cast<float*>(o->tensor.data());
  values[37] = values[37] * 1.01f + 0.01f;
  ASSERT_TRUE(WriteNpy(Path("bad.npy"), o->tensor.view()).ok());
  options_.o = Path("bad.npy");
  std::ostringstream bad_out;
  s = VerifyCommand(options_, bad_out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("bad.npy disagrees with the reference"));
  EXPECT_THAT(bad_out.str(), HasSubstr("FAIL"));

  // Without --o: one clear line.
  options_.o.clear();
  s = VerifyCommand(options_, bad_out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--o is required"));
}

TEST_F(RunCommandTest, BadInputIsOneClearErrorAndNoOutput) {
  Prepare("num_heads: 4 head_dim: 16 q_len: 5 kv_len: 7");
  struct Case {
    std::function<void(CliOptions*)> mutate;
    std::string message;
  };
  const std::string k = Path("k.npy");
  ASSERT_TRUE(
      WriteFileAtomically(Path("truncated.npy"), ReadFile(k)->substr(0, ReadFile(k)->size() - 4))
          .ok());
  int32_t ints[4] = {1, 2, 3, 4};
  ASSERT_TRUE(WriteNpy(Path("ints.npy"), ContiguousView(ints, DType::kI32, {1, 4, 1, 1})).ok());
  ASSERT_TRUE(WriteFileAtomically(Path("bad.textproto"), "num_heads: 4\nhead_dim: x\n").ok());
  const Case cases[] = {
      {[&](CliOptions* o) { o->q = k; }, "--q=" + k + " has shape (1, 4, 7, 16)"},
      {[&](CliOptions* o) { o->k = Path("truncated.npy"); }, "(truncated)"},
      {[&](CliOptions* o) { o->v = Path("missing.npy"); }, "cannot open"},
      {[&](CliOptions* o) { o->backend = "nope"; }, "unknown backend 'nope'"},
      {[&](CliOptions* o) { o->config = Path("bad.textproto"); }, "line 2, column 11"},
      {[&](CliOptions* o) { o->kv_lengths = Path("ints.npy"); }, "must be an int32 or int64 array"},
      {[&](CliOptions* o) { o->mask = Path("ints.npy"); },
       "--mask=" + Path("ints.npy") + " has shape"},
      {[&](CliOptions* o) { o->out = Path("nodir/o.npy"); }, "nodir/o.npy"},
  };
  for (const Case& c : cases) {
    CliOptions saved = options_;
    c.mutate(&options_);
    const absl::Status s = Run();
    EXPECT_FALSE(s.ok()) << c.message;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message));
    EXPECT_EQ(std::string(s.message()).find('\n'), std::string::npos) << "one line";
    EXPECT_FALSE(Exists("o.npy")) << "partial output left behind for " << c.message;
    options_ = saved;
  }
}

// --out and --lse_out are one set: when --lse_out cannot be replaced, the
// existing --out keeps its old content and no temporary is left behind.
TEST_F(RunCommandTest, OutputsAreWrittenAsOneSet) {
  Prepare("num_heads: 2 head_dim: 8 q_len: 3 kv_len: 4");
  ASSERT_TRUE(WriteFileAtomically(Path("o.npy"), "old output").ok());
  ASSERT_EQ(system(("mkdir -p " + Path("lse_is_a_dir")).c_str()), 0);
  options_.lse_out = Path("lse_is_a_dir");
  const absl::Status s = Run();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("lse_is_a_dir"));
  EXPECT_EQ(*ReadFile(Path("o.npy")), "old output");
  const std::string listing = dir_ + "/listing.txt";
  ASSERT_EQ(system(("ls " + dir_ + " > " + listing).c_str()), 0);
  EXPECT_THAT(*ReadFile(listing), ::testing::Not(HasSubstr(".tmp."))) << *ReadFile(listing);

  options_.lse_out = Path("lse.npy");
  ASSERT_TRUE(Run().ok());
  EXPECT_NE(*ReadFile(Path("o.npy")), "old output");
  EXPECT_TRUE(Exists("lse.npy"));
}

// memory_budget_bytes is checked from the config alone, before any input is
// read or any tensor allocated (the input files here do not even exist).
TEST_F(RunCommandTest, MemoryBudgetIsEnforcedBeforeLoading) {
  Prepare("num_heads: 4 head_dim: 8 q_len: 4");
  const std::string config = "num_heads: 4 head_dim: 64 q_len: 256 memory_budget_bytes: 1000";
  ASSERT_TRUE(WriteFileAtomically(Path("budget.textproto"), config).ok());
  options_.config = Path("budget.textproto");
  options_.q = options_.k = options_.v = Path("never_read.npy");
  const absl::Status s = Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("memory_budget_bytes (1000)"));
  EXPECT_FALSE(Exists("o.npy"));
}

TEST_F(RunCommandTest, BroadcastMaskAndPadding) {
  const AttentionProblem p = Prepare("num_heads: 2 head_dim: 8 q_len: 3 kv_len: 4 batch: 2");
  uint8_t mask[3][4] = {{0, 1, 0, 0}, {1, 1, 1, 1}, {0, 0, 0, 1}};
  ASSERT_TRUE(WriteNpy(Path("m.npy"), ContiguousView(mask, DType::kU8, {3, 4})).ok());
  int32_t lengths32[2] = {4, 2};
  ASSERT_TRUE(WriteNpy(Path("l.npy"), ContiguousView(lengths32, DType::kI32, {2})).ok());
  options_.mask = Path("m.npy");
  options_.kv_lengths = Path("l.npy");
  options_.lse_out = Path("lse.npy");
  ASSERT_TRUE(Run().ok()) << Run();
  auto lse = ReadNpy(Path("lse.npy"));
  ASSERT_TRUE(lse.ok());
  const float* l = static_cast<const float*>(lse->tensor.data());
  // Row 1 is fully blocked by the mask in every batch entry and head.
  for (int b = 0; b < 2; ++b) {
    for (int h = 0; h < 2; ++h) EXPECT_TRUE(std::isinf(l[(b * 2 + h) * 3 + 1]));
  }
  // Sequence 1 has two keys; row 0 may only see key 0 (key 1 is masked).
  auto o = ReadNpy(Path("o.npy"));
  ASSERT_TRUE(o.ok());
  const float* out = static_cast<const float*>(o->tensor.data());
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(out[((1 * 2 + 0) * 3 + 0) * 8 + c],
              data_.v.view().LoadF32(data_.v.view().Offset(1, 0, 0, c)));
  }
  EXPECT_EQ(p.batch, 2);
}

TEST(CostTest, StandardFigures) {
  auto cost = [](const std::string& text) {
    return ComputeCost(*ProblemFromConfig(*ParseConfigText(text, "t")));
  };
  EXPECT_EQ(cost("num_heads: 1 head_dim: 64 q_len: 1024").score_entries, 1048576);
  EXPECT_EQ(cost("num_heads: 16 head_dim: 64 q_len: 1024").score_entries, 16777216);
  // Model dim 512: the same FLOPs for 1, 8 and 16 heads, 262,144 weights per matrix.
  const double flops = cost("num_heads: 1 head_dim: 512 q_len: 1024").useful_flops;
  EXPECT_EQ(cost("num_heads: 8 head_dim: 64 q_len: 1024").useful_flops, flops);
  EXPECT_EQ(cost("num_heads: 16 head_dim: 32 q_len: 1024").useful_flops, flops);
  EXPECT_EQ(cost("num_heads: 8 head_dim: 64 q_len: 4").projection_params, 4 * 262144);
  EXPECT_EQ(cost("num_heads: 16 head_dim: 32 q_len: 4").projection_params, 4 * 262144);
  // KV cache for one layer: 4096 tokens, d = 128, 16-bit, 32 / 8 / 1 KV heads.
  const std::string base = "num_heads: 32 head_dim: 128 q_len: 1 kv_len: 4096 dtype: BF16 ";
  EXPECT_EQ(cost(base + "num_kv_heads: 32").kv_cache_bytes * 32, int64_t{2} << 30);
  EXPECT_EQ(cost(base + "num_kv_heads: 8").kv_cache_bytes * 32, int64_t{512} << 20);
  EXPECT_EQ(cost(base + "num_kv_heads: 1").kv_cache_bytes * 32, int64_t{64} << 20);
}

// `attnkit cost --layers=32` prints the whole model's cache: 32 layers,
// head_dim 128, 4,096 tokens, 16-bit values.
TEST(CostTest, KvCacheForAllLayers) {
  const std::string dir = ::testing::TempDir();
  const std::pair<int, const char*> cases[] = {
      {32, "2147483648 B (2 GiB)"}, {8, "536870912 B (0.5 GiB)"}, {1, "67108864 B (0.0625 GiB)"}};
  for (const auto& [kv_heads, want] : cases) {
    const std::string path = dir + "/kv" + std::to_string(kv_heads) + ".textproto";
    ASSERT_TRUE(WriteFileAtomically(path,
                                    "num_heads: 32 head_dim: 128 q_len: 1 kv_len: 4096 "
                                    "dtype: BF16 alignment: BOTTOM_RIGHT num_kv_heads: " +
                                        std::to_string(kv_heads))
                    .ok());
    CliOptions options;
    options.config = path;
    options.layers = 32;
    std::ostringstream out;
    ASSERT_TRUE(CostCommand(options, out).ok());
    EXPECT_THAT(out.str(), HasSubstr(std::string("kv cache, 32 layers ") + want));
  }
  CliOptions bad;
  bad.layers = 0;
  std::ostringstream out;
  EXPECT_THAT(std::string(CostCommand(bad, out).message()), HasSubstr("--layers (0) must be >= 1"));
}

// --config.* flags override the --config file (or the built-in default) in
// command-line order, --grad after them; validation still names the field.
TEST(LoadCliConfigTest, ConfigFlagsOverrideTheFileInOrder) {
  const std::string path = ::testing::TempDir() + "/flags.textproto";
  ASSERT_TRUE(WriteFileAtomically(
                  path, "name: \"file\" num_heads: 8 head_dim: 64 q_len: 16 mask { kind: CAUSAL }")
                  .ok());
  CliOptions options;
  options.config = path;
  options.config_flags = {{"num_heads", "2", true},
                          {"mask.window_left", "2", true},
                          {"mask.kind", "sliding_window", true},
                          {"num_heads", "4", true},
                          {"backward", "false", true}};
  options.grad = true;
  absl::StatusOr<AttentionConfig> c = LoadCliConfig(options);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name(), "file");
  EXPECT_EQ(c->num_heads(), 4);
  EXPECT_EQ(c->head_dim(), 64);
  EXPECT_EQ(c->mask().kind(), MaskSpec::SLIDING_WINDOW);
  EXPECT_EQ(c->mask().window_left(), 2);
  EXPECT_TRUE(c->backward());

  options.config.clear();
  options.grad = false;
  options.config_flags = {{"q_len", "1", true}};
  c = LoadCliConfig(options);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name(), "default-gqa-causal-prefill");
  EXPECT_EQ(c->q_len(), 1);

  options.config_flags = {{"num_kv_heads", "5", true}};
  std::ostringstream out;
  EXPECT_THAT(std::string(CostCommand(options, out).message()),
              HasSubstr("num_heads (16) must be a multiple of num_kv_heads (5)"));
}

// A small stack end to end on the reference backend: chunked prefill, decode,
// and the recompute agrees.
TEST(GenerateCommandTest, SmallStackVerifies) {
  const std::string path = ::testing::TempDir() + "/gen.textproto";
  ASSERT_TRUE(WriteFileAtomically(path, "num_heads: 4 num_kv_heads: 2 head_dim: 8 seed: 3").ok());
  CliOptions options;
  options.config = path;
  options.backend = "reference";
  options.layers = 2;
  GenerateOptions gen;
  gen.prompt_len = 7;
  gen.new_tokens = 4;
  gen.chunk = 3;
  std::ostringstream out;
  const absl::Status s = GenerateCommand(GlobalRegistry(), options, gen, out);
  ASSERT_TRUE(s.ok()) << s << out.str();
  EXPECT_THAT(out.str(), HasSubstr("backend            reference"));
  EXPECT_THAT(out.str(), HasSubstr("matmul reference"));
  EXPECT_THAT(out.str(), HasSubstr("in chunks of 3"));
  EXPECT_THAT(out.str(), HasSubstr("tokens/s"));
  // 2 layers x 2 (K, V) x 2 kv heads x 11 tokens x 8 x 4 bytes.
  EXPECT_THAT(out.str(), HasSubstr("kv cache           2816 B"));
  EXPECT_THAT(out.str(), HasSubstr(": ok"));

  gen.prompt_len = 0;
  EXPECT_THAT(std::string(GenerateCommand(GlobalRegistry(), options, gen, out).message()),
              HasSubstr("--prompt_len (0) must be >= 1"));
  ASSERT_TRUE(
      WriteFileAtomically(path, "num_heads: 4 head_dim: 8 model_dim: 30 mask { kind: NONE }").ok());
  gen.prompt_len = 4;
  EXPECT_THAT(std::string(GenerateCommand(GlobalRegistry(), options, gen, out).message()),
              HasSubstr("mask.kind must be CAUSAL"));
}

TEST(CheckCommandTest, DefaultConfigPassesAndReportsEachBackend) {
  std::ostringstream out;
  CliOptions options;
  options.backends = {"reference"};
  const absl::Status s = CheckCommand(GlobalRegistry(), options, out);
  EXPECT_TRUE(s.ok()) << s << out.str();
  EXPECT_THAT(out.str(), HasSubstr("reference"));
  EXPECT_THAT(out.str(), HasSubstr("pass"));
}

TEST(CheckCommandTest, JsonReportHasEveryResultWithNumbersAsNumbers) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/check.json";
  std::ostringstream out;
  CliOptions options;
  options.backends = {"highway", "reference"};
  options.json = path;
  const absl::Status s = CheckCommand(GlobalRegistry(), options, out);
  ASSERT_TRUE(s.ok()) << s << out.str();
  EXPECT_THAT(out.str(), HasSubstr("wrote " + path));
  const absl::StatusOr<std::string> json = ReadFile(path);
  ASSERT_TRUE(json.ok()) << json.status();
  CheckReport report;
  ASSERT_TRUE(ProtoFromJson(*json, path, &report).ok()) << *json;
  ASSERT_EQ(report.results_size(), 2);
  EXPECT_EQ(report.results(0).backend(), "highway");
  EXPECT_EQ(report.results(0).status(), "pass");
  EXPECT_GT(report.results(0).checked(), 0);
  EXPECT_LT(report.results(0).max_bound_fraction(), 1.0);
  // int64 config fields are JSON numbers, not strings.
  EXPECT_THAT(*json, HasSubstr("\"num_heads\": " + std::to_string(report.config().num_heads())));
}

// A backend that cannot run on this machine, as CUDA is without a GPU.
class UnavailableBackend : public Backend {
 public:
  std::string Name() const override { return "nogpu"; }
  std::string Description() const override { return "needs a device this machine lacks"; }
  Capabilities Caps() const override { return Capabilities{}; }
  absl::Status Available() const override {
    return absl::UnavailableError("no CUDA-capable device is detected");
  }

 protected:
  absl::Status ForwardImpl(const AttentionProblem&, const AttentionArgs&, RunInfo*) override {
    return absl::InternalError("never runs");
  }
};

TEST(CheckCommandTest, NamedBackendThatCannotRunFailsUnlessSkipsAreAllowed) {
  BackendRegistry registry;
  ASSERT_TRUE(registry.Register(std::make_unique<UnavailableBackend>()).ok());
  std::ostringstream out;
  CliOptions options;
  options.backends = {"nogpu"};
  const absl::Status s = CheckCommand(registry, options, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("nogpu (unavailable)"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("--allow_skip"));
  EXPECT_THAT(out.str(), HasSubstr("unavailable: no CUDA-capable device is detected"));

  options.allow_skip = true;
  EXPECT_TRUE(CheckCommand(registry, options, out).ok());
}

// fuzz: an unavailable backend is reported as such (not as "unsupported"
// problems) and, named in --backends, fails the run unless skips are allowed.
TEST(FuzzCommandTest, NamedBackendThatCannotRunFailsUnlessSkipsAreAllowed) {
  BackendRegistry registry;
  ASSERT_TRUE(registry.Register(std::make_unique<UnavailableBackend>()).ok());
  std::ostringstream out;
  CliOptions options;
  options.backends = {"nogpu"};
  options.count = 3;
  options.repro_dir = testing::TempDir();
  const absl::Status s = FuzzCommand(registry, options, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("no CUDA-capable device"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("--allow_skip"));
  EXPECT_THAT(out.str(), HasSubstr("unavailable: nogpu: no CUDA-capable device is detected"));
  EXPECT_THAT(out.str(), HasSubstr("0 backend runs, 0 unsupported, 1 unavailable backends"));

  options.allow_skip = true;
  EXPECT_TRUE(FuzzCommand(registry, options, out).ok());
}

// --allow_skip only matters for backends --backends names: without it, the
// flag would change nothing, so check and fuzz refuse it before running.
TEST(CheckCommandTest, AllowSkipWithoutBackendsIsRefused) {
  CliOptions options;
  options.allow_skip = true;
  options.count = 3;
  options.repro_dir = testing::TempDir();
  for (const bool fuzz : {false, true}) {
    std::ostringstream out;
    const absl::Status s = fuzz ? FuzzCommand(GlobalRegistry(), options, out)
                                : CheckCommand(GlobalRegistry(), options, out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("--allow_skip only applies to the backends --backends names"));
    EXPECT_EQ(out.str(), "") << "nothing runs";
  }
  options.backends = {"reference"};
  std::ostringstream out;
  EXPECT_TRUE(CheckCommand(GlobalRegistry(), options, out).ok()) << out.str();
}

TEST(BackendsCommandTest, ListsCapabilities) {
  std::ostringstream out;
  ASSERT_TRUE(BackendsCommand(GlobalRegistry(), CliOptions(), out).ok());
  EXPECT_THAT(out.str(), HasSubstr("reference: available"));
  EXPECT_THAT(out.str(), HasSubstr("masks: none, causal, window"));
}

// --compute sets the config's compute over the file and the --config.*
// flags (exact as unset, its default); --config.compute works as any field.
TEST(LoadCliConfigTest, ComputeFlagSetsTheMode) {
  CliOptions options;
  options.config_flags = {{"dtype", "bf16", true}};
  absl::StatusOr<AttentionConfig> c = LoadCliConfig(options);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->compute(), COMPUTE_UNSPECIFIED);  // EXACT
  for (const char* fast : {"fast", "FAST", "Fast"}) {
    options.compute = fast;
    c = LoadCliConfig(options);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->compute(), FAST) << fast;
    EXPECT_THAT(ProblemFromConfig(*c)->Id(), ::testing::EndsWith("_bf16_fast"));
  }
  options.config_flags.push_back({"compute", "fast", true});
  options.compute = "exact";  // after the --config.* flags
  c = LoadCliConfig(options);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->compute(), COMPUTE_UNSPECIFIED);
  EXPECT_EQ(ProblemFromConfig(*c)->compute, ComputeMode::kExact);
  options.compute.clear();  // --config.compute alone
  c = LoadCliConfig(options);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->compute(), FAST);

  options.compute = "turbo";
  const absl::Status bad = LoadCliConfig(options).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("--compute=turbo: use exact"));
  EXPECT_THAT(std::string(bad.message()), HasSubstr("or fast"));
  // A FAST training step needs one dtype for Q and K/V (FAST would round Q
  // to K's type, which has no gradient): refused, naming both.
  options.compute = "fast";
  options.grad = true;
  options.backends = {"reference"};
  options.config_flags = {{"dtype", "f32", true}, {"kv_dtype", "bf16", true}};
  std::ostringstream out;
  const std::string refusal(CheckCommand(GlobalRegistry(), options, out).message());
  EXPECT_THAT(refusal, HasSubstr("compute (FAST) with backward (true) needs dtype (f32)"));
  EXPECT_THAT(refusal, HasSubstr("kv_dtype (bf16)"));
}

// check --compute=fast: the id, the table's header and the JSON say which
// mode ran; a backend that computes FAST passes, one that cannot refuses
// ("unsupported", which --backends counts as not run).
TEST(CheckCommandTest, ComputeFastIsReportedAndRefusedWhereUnsupported) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/check_fast.json";
  CliOptions options;
  options.config_flags = {{"dtype", "bf16", true}, {"q_len", "9", true}, {"kv_len", "40", true}};
  options.backends = {"highway", "blas", "reference"};
  options.compute = "fast";
  options.json = path;
  std::ostringstream out;
  const absl::Status named = CheckCommand(GlobalRegistry(), options, out);
  EXPECT_EQ(named.code(), absl::StatusCode::kFailedPrecondition) << named << out.str();
  EXPECT_THAT(std::string(named.message()), HasSubstr("--backends named blas"));
  EXPECT_THAT(out.str(),
              HasSubstr("_bf16_fast (default-gqa-causal-prefill), seed 1, compute fast"));
  EXPECT_THAT(out.str(), HasSubstr("unsupported: compute FAST with kv_dtype bf16"));

  options.allow_skip = true;
  out.str("");
  const absl::Status s = CheckCommand(GlobalRegistry(), options, out);
  ASSERT_TRUE(s.ok()) << s << out.str();
  const absl::StatusOr<std::string> json = ReadFile(path);
  ASSERT_TRUE(json.ok()) << json.status();
  CheckReport report;
  ASSERT_TRUE(ProtoFromJson(*json, path, &report).ok()) << *json;
  EXPECT_EQ(report.compute(), "fast");
  EXPECT_EQ(report.config().compute(), FAST);
  EXPECT_THAT(report.id(), ::testing::EndsWith("_fast"));
  ASSERT_EQ(report.results_size(), 3);
  EXPECT_EQ(report.results(0).status(), "pass") << report.results(0).detail();
  EXPECT_EQ(report.results(1).status(), "unsupported");
  EXPECT_THAT(report.results(1).detail(), HasSubstr("supported: exact only"));
  EXPECT_EQ(report.results(2).status(), "pass") << report.results(2).detail();

  // The default is exact, and says so; blas runs it.
  options.compute.clear();
  out.str("");
  ASSERT_TRUE(CheckCommand(GlobalRegistry(), options, out).ok()) << out.str();
  EXPECT_THAT(out.str(), HasSubstr("seed 1, compute exact"));
  ASSERT_TRUE(ProtoFromJson(*ReadFile(path), path, &report).ok());
  EXPECT_EQ(report.compute(), "exact");
  EXPECT_THAT(report.id(), ::testing::Not(::testing::EndsWith("_fast")));
  EXPECT_EQ(report.results(1).status(), "pass") << report.results(1).detail();
}

// run --compute=fast reaches the backend: its output passes verify under
// FAST's bound and not under EXACT's (Q was rounded to bf16 before Q.K).
TEST_F(RunCommandTest, ComputeFastRunsAndVerifiesUnderItsBound) {
  const AttentionProblem p = Prepare(
      "num_heads: 4 num_kv_heads: 2 head_dim: 64 q_len: 9 kv_len: 33 kv_dtype: BF16 "
      "mask { kind: CAUSAL } alignment: BOTTOM_RIGHT");
  options_.backend = "highway";
  options_.compute = "fast";
  std::ostringstream out;
  options_.json = "-";
  ASSERT_TRUE(RunCommand(GlobalRegistry(), options_, out).ok()) << out.str();
  EXPECT_THAT(out.str(), HasSubstr("\"id\": \"" + p.Id() + "_fast\""));
  EXPECT_THAT(out.str(), HasSubstr("\"compute\": \"FAST\""));
  options_.json.clear();
  options_.o = Path("o.npy");
  out.str("");
  const absl::Status fast = VerifyCommand(options_, out);
  EXPECT_TRUE(fast.ok()) << fast << out.str();
  options_.compute = "exact";
  const absl::Status exact = VerifyCommand(options_, out);
  EXPECT_EQ(exact.code(), absl::StatusCode::kFailedPrecondition) << exact;

  // A backend that computes only EXACT refuses FAST with bf16 K/V, by name.
  options_.compute = "fast";
  options_.backend = "blas";
  const absl::Status blas = RunCommand(GlobalRegistry(), options_, out);
  EXPECT_EQ(blas.code(), absl::StatusCode::kUnimplemented) << blas;
  EXPECT_THAT(std::string(blas.message()), HasSubstr("compute FAST with kv_dtype bf16"));
  options_.compute = "quick";
  EXPECT_THAT(std::string(RunCommand(GlobalRegistry(), options_, out).message()),
              HasSubstr("--compute=quick: use exact"));
}

// compare --compute=fast: the problem's record says the mode, and a backend
// without FAST for the K/V type is not run ("unsupported").
TEST(CompareCommandTest, ComputeFastIsInTheRecords) {
  CliOptions options;
  options.config_flags = {{"num_heads", "2", true}, {"num_kv_heads", "1", true},
                          {"head_dim", "16", true}, {"q_len", "8", true},
                          {"kv_len", "8", true},    {"dtype", "bf16", true}};
  options.compute = "fast";
  options.backends = {"highway", "blas"};
  options.threads = 1;
  options.json = "-";
  std::ostringstream out, progress;
  ASSERT_TRUE(CompareCommand(GlobalRegistry(), options, out, progress).ok()) << out.str();
  CompareReport report;
  ASSERT_TRUE(ProtoFromJson(out.str(), "compare", &report).ok()) << out.str();
  ASSERT_EQ(report.problems_size(), 1);
  const ProblemResult& p = report.problems(0);
  EXPECT_EQ(p.compute(), "fast");
  EXPECT_EQ(p.config().compute(), FAST);
  EXPECT_THAT(p.id(), ::testing::EndsWith("_bf16_fast"));
  for (const BackendResult& r : p.results()) {
    EXPECT_EQ(r.status(), r.backend() == "blas" ? "unsupported" : "ok")
        << r.backend() << ": " << r.detail();
  }
}

// fuzz: --compute fixes every problem's mode, else it is drawn; the JSON
// counts the FAST problems. A backend without FAST for a K/V type declines
// those problems (unsupported), which is no mismatch.
TEST(FuzzCommandTest, ComputeModeIsDrawnOrFixed) {
  CliOptions options;
  options.backends = {"highway", "blas"};
  options.count = 40;
  options.seed = 5;
  options.repro_dir = testing::TempDir();
  options.json = "-";
  const auto fuzz = [&options](std::string* json) {
    std::ostringstream out;
    const absl::Status s = FuzzCommand(GlobalRegistry(), options, out);
    *json = out.str();
    return s;
  };
  std::string json;
  ASSERT_TRUE(fuzz(&json).ok()) << json;
  EXPECT_THAT(json, HasSubstr("\"compute\": \"drawn\""));
  EXPECT_THAT(json, ::testing::Not(HasSubstr("\"fast_problems\": 0,")));
  EXPECT_THAT(json, ::testing::Not(HasSubstr("\"fast_problems\": 40,")));
  EXPECT_THAT(json, HasSubstr("\"mismatches\": []"));
  options.compute = "fast";
  ASSERT_TRUE(fuzz(&json).ok()) << json;
  EXPECT_THAT(json, HasSubstr("\"fast_problems\": 40,"));
  EXPECT_THAT(json, HasSubstr("\"mismatches\": []"));
  options.compute = "exact";
  ASSERT_TRUE(fuzz(&json).ok()) << json;
  EXPECT_THAT(json, HasSubstr("\"fast_problems\": 0,"));
  // --grad --compute=fast: training steps FAST where Q's dtype is K/V's.
  options.compute = "fast";
  options.grad = true;
  options.count = 12;
  ASSERT_TRUE(fuzz(&json).ok()) << json;
  EXPECT_THAT(json, ::testing::Not(HasSubstr("\"fast_problems\": 0,")));
  EXPECT_THAT(json, HasSubstr("\"mismatches\": []"));
  options.grad = false;
  options.compute = "slow";
  EXPECT_EQ(fuzz(&json).code(), absl::StatusCode::kInvalidArgument);
}

// Each backend's FAST K/V types, as text and as data.
TEST(BackendsCommandTest, ListsTheComputeModes) {
  std::ostringstream out;
  CliOptions options;
  ASSERT_TRUE(BackendsCommand(GlobalRegistry(), options, out).ok());
  EXPECT_THAT(out.str(), HasSubstr("compute: exact; fast for kv dtypes f16, bf16, i8"));
  const std::string text = out.str();
  const size_t blas = text.find("blas: ");
  ASSERT_NE(blas, std::string::npos) << text;
  const size_t compute = text.find("  compute: ", blas);
  ASSERT_NE(compute, std::string::npos) << text;
  EXPECT_EQ(text.substr(compute, text.find('\n', compute) - compute), "  compute: exact");
  options.json = "-";
  out.str("");
  ASSERT_TRUE(BackendsCommand(GlobalRegistry(), options, out).ok());
  EXPECT_THAT(out.str(), HasSubstr("\"fast_kv_dtypes\": [\n"));
  EXPECT_THAT(out.str(), HasSubstr("\"fast_kv_dtypes\": []"));
}

}  // namespace
}  // namespace attnkit
