// The differential fuzzer: a bounded run over every registered backend finds
// nothing; a planted bug is found, shrunk, and reproduced from the written
// config; poisoning blocked inputs never changes the reference's answer.
// The same for the backward pass (tools/diff_fuzz/grad_fuzz.h): a bounded
// gradient run finds nothing, and a planted gradient bug is found and shrunk.
#include "tools/diff_fuzz/diff_fuzz.h"

#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "backends/builtin.h"
#include "backends/reference/reference_backend.h"
#include "core/problem_config.h"
#include "gtest/gtest.h"
#include "harness/problem_data.h"
#include "io/config_io.h"
#include "oracle/reference.h"
#include "tools/diff_fuzz/grad_fuzz.h"
#include "tools/diff_fuzz/random_config.h"

namespace attnkit {
namespace {

int64_t EnvCount(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoll(v) : fallback;
}

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

// Each available backend ran some of the campaign's problems (summed
// counts hide a backend that declines everything), and the tallies add up.
void ExpectEveryBackendRan(const FuzzReport& report, int64_t count) {
  int64_t runs = 0, unsupported = 0;
  for (const FuzzTally& t : report.per_backend) {
    std::printf("  %s: %lld runs, %lld unsupported, %lld mismatches\n", t.backend.c_str(),
                (long long)t.runs, (long long)t.unsupported, (long long)t.mismatches);
    EXPECT_GT(t.runs, 0) << t.backend << " ran none of the problems";
    EXPECT_EQ(t.runs + t.unsupported, count) << t.backend;
    runs += t.runs;
    unsupported += t.unsupported;
  }
  EXPECT_EQ(runs, report.runs);
  EXPECT_EQ(unsupported, report.unsupported);
}

TEST(DiffFuzzTest, BoundedRunOverEveryBackendFindsNothing) {
  FuzzOptions options;
  options.count = EnvCount("DIFF_FUZZ_COUNT", 60);
  options.seed = static_cast<uint64_t>(EnvCount("DIFF_FUZZ_SEED", 20240601));
  options.repro_dir = TempDir();
  const FuzzReport report = FuzzBackends(GlobalRegistry().All(), options, [](const std::string& l) {
    std::printf("%s\n", l.c_str());
  });
  std::printf("%lld problems (%lld compute fast), %lld runs, %lld unsupported\n",
              (long long)report.problems, (long long)report.fast_problems, (long long)report.runs,
              (long long)report.unsupported);
  EXPECT_EQ(report.problems, options.count);
  EXPECT_GT(report.runs, options.count);
  EXPECT_GT(report.fast_problems, 0);
  ExpectEveryBackendRan(report, options.count);
  for (const FuzzFinding& f : report.findings) {
    ADD_FAILURE() << f.backend << ": " << f.message << "\n  " << f.command;
  }
}

// A backend that declines every problem: it is never wrong, so before the
// per-backend tallies a campaign naming it passed.
class DecliningBackend : public Backend {
 public:
  std::string Name() const override { return "declines-all"; }
  std::string Description() const override { return "refuses every problem"; }
  Capabilities Caps() const override { return Capabilities{}; }
  absl::Status Supports(const AttentionProblem&) const override {
    return absl::UnimplementedError("declines-all runs nothing");
  }

 protected:
  absl::Status ForwardImpl(const AttentionProblem&, const AttentionArgs&, RunInfo*) override {
    return absl::InternalError("never called");
  }
};

TEST(DiffFuzzTest, ANamedBackendThatDeclinesEveryProblemFails) {
  FuzzOptions options;
  options.count = 5;
  options.repro_dir = TempDir();
  DecliningBackend declining;
  Backend* reference = GlobalRegistry().Find("reference").value();
  const FuzzReport report = FuzzBackends({reference, &declining}, options, nullptr);
  ASSERT_EQ(report.per_backend.size(), 2u);
  EXPECT_EQ(report.per_backend[1].backend, "declines-all");
  EXPECT_EQ(report.per_backend[1].runs, 0);
  EXPECT_EQ(report.per_backend[1].unsupported, 5);
  EXPECT_TRUE(report.findings.empty());
  const absl::Status named = RequireNamedBackendsRan(report, {"reference", "declines-all"});
  EXPECT_EQ(named.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(named.message().find("declines-all declined all 5 problems"), std::string::npos)
      << named;
  EXPECT_TRUE(RequireNamedBackendsRan(report, {"reference"}).ok());
  EXPECT_TRUE(RequireNamedBackendsRan(report, {}).ok());
}

// Shrunk findings of long `attnkit fuzz` runs, replayed on every backend.
TEST(DiffFuzzTest, EarlierFindingsStayFixed) {
  const char* kFindings[] = {
      // highway: NaN in V rows of keys the dense mask blocks for every query
      // leaked through 0 * NaN in the P.V product (seed 42, problem 35).
      R"pb(num_heads: 1
           head_dim: 1
           q_len: 1
           kv_len: 3
           blocked_mask: true
           alignment: BOTTOM_RIGHT
           seed: 821639
           poison_blocked: true)pb",
      R"pb(num_heads: 4
           num_kv_heads: 2
           head_dim: 33
           batch: 2
           q_len: 17
           kv_len: 65
           mask { kind: CAUSAL }
           alignment: TOP_LEFT
           blocked_mask: true
           kv_lengths: [ 0, 40 ]
           seed: 5
           poison_blocked: true
           return_lse: true)pb",
      // cuda, cuda-cublas (read of the code, issue 13): V rows inside
      // kv_length that every row of a 64-query tile masks (top-left causal
      // with Tq < Tk, a sliding window) were loaded, and 0 * NaN leaked;
      // cuBLAS multiplied P.V over the whole Tk, padding included.
      R"pb(num_heads: 2
           head_dim: 64
           batch: 2
           q_len: 70
           kv_len: 300
           mask { kind: CAUSAL }
           alignment: TOP_LEFT
           kv_lengths: [ 300, 150 ]
           seed: 13
           poison_blocked: true
           return_lse: true)pb",
      R"pb(num_heads: 4
           num_kv_heads: 1
           head_dim: 32
           q_len: 130
           kv_len: 130
           mask { kind: SLIDING_WINDOW window_left: 20 window_right: 0 }
           seed: 14
           poison_blocked: true
           dtype: BF16
           kv_dtype: BF16)pb",
      // The NaN/Inf rule (oracle/reference.h) on every path at once: NaN/Inf
      // in read and unread elements of Q, K, V and the bias, a dense mask,
      // softcap, padding, GQA, a window and split-K decode lengths.
      R"pb(num_heads: 8
           num_kv_heads: 2
           head_dim: 64
           batch: 2
           q_len: 3
           kv_len: 700
           mask { kind: SLIDING_WINDOW window_left: 300 window_right: 0 }
           alignment: BOTTOM_RIGHT
           kv_lengths: [ 700, 333 ]
           blocked_mask: true
           additive_bias: true
           softcap: 30
           seed: 15
           nonfinite_inputs: 24
           return_lse: true)pb",
      R"pb(num_heads: 4
           num_kv_heads: 4
           head_dim: 48
           q_len: 90
           kv_len: 90
           mask { kind: CAUSAL }
           seed: 16
           nonfinite_inputs: 12
           kv_dtype: F16
           return_lse: true)pb",
  };
  for (const char* text : kFindings) {
    auto config = ParseConfigText(text, "finding");
    ASSERT_TRUE(config.ok()) << config.status();
    for (Backend* b : GlobalRegistry().All()) {
      const absl::Status s = CheckOnBackend(*config, b);
      EXPECT_TRUE(s.ok()) << b->Name() << ": " << s << "\n" << text;
    }
  }
}

// The reference, except that it corrupts o[0] once kv_len reaches 5.
class PlantedBugBackend : public Backend {
 public:
  std::string Name() const override { return "planted-bug"; }
  std::string Description() const override { return "test double"; }
  Capabilities Caps() const override { return inner_->Caps(); }

 protected:
  absl::Status ForwardImpl(const AttentionProblem& p, const AttentionArgs& a,
                           RunInfo* info) override {
    const absl::Status s = inner_->Forward(p, a, info);
    if (s.ok() && p.kv_len >= 5) StoreFromF32(a.o.data, a.o.dtype, 0, 1e3f);
    return s;
  }

 private:
  std::unique_ptr<Backend> inner_ = MakeReferenceBackend();
};

TEST(DiffFuzzTest, PlantedBugIsShrunkAndReproducedFromTheConfig) {
  PlantedBugBackend bug;
  FuzzOptions options;
  options.count = 20;
  options.seed = 3;
  options.repro_dir = TempDir();
  const FuzzReport report = FuzzBackends({&bug}, options, nullptr);
  ASSERT_FALSE(report.findings.empty());
  const FuzzFinding& f = report.findings[0];
  EXPECT_NE(f.command.find("attnkit check --config="), std::string::npos) << f.command;
  auto config = LoadConfigFile(f.config_path);
  ASSERT_TRUE(config.ok()) << config.status();
  // Shrunk to the edge of the bug, with every option off.
  EXPECT_EQ(config->kv_len(), 5) << ConfigToText(*config);
  EXPECT_EQ(config->q_len(), 1);
  EXPECT_EQ(config->head_dim(), 1);
  EXPECT_EQ(config->batch(), 1);
  EXPECT_FALSE(config->blocked_mask() || config->additive_bias() || config->poison_blocked() ||
               config->nonfinite_inputs() != 0);
  EXPECT_EQ(config->page_size(), 0);
  EXPECT_EQ(config->q_lengths_size(), 0);
  EXPECT_NE(config->kv_dtype(), INT8);
  EXPECT_NE(config->compute(), FAST);
  EXPECT_FALSE(CheckOnBackend(*config, &bug).ok());
}

// RandomConfig draws compute FAST for about a third of the problems with
// 16-bit, int8 or fp8 K/V, under every K/V type and serving feature, and
// never where it would round nothing (f32 K/V).
TEST(DiffFuzzTest, RandomConfigsDrawFastComputeWhereItCanRound) {
  std::mt19937_64 rng(13);
  std::set<DTypeProto> kv_types;
  int could = 0, fast = 0, fast_paged = 0, fast_ragged = 0;
  for (int n = 0; n < 600; ++n) {
    const AttentionConfig c = RandomConfig(rng);
    auto p = ProblemFromConfig(c);
    ASSERT_TRUE(p.ok()) << p.status() << "\n" << ConfigToText(c);
    could += p->kv_dtype != DType::kF32 ? 1 : 0;
    if (!p->fast()) continue;
    ++fast;
    EXPECT_NE(p->kv_dtype, DType::kF32) << ConfigToText(c);
    kv_types.insert(c.kv_dtype());
    fast_paged += p->is_paged() ? 1 : 0;
    fast_ragged += p->is_ragged() ? 1 : 0;
  }
  EXPECT_GT(fast, could / 5) << fast << " of " << could;
  EXPECT_LT(fast, could / 2) << fast << " of " << could;
  EXPECT_EQ(kv_types, (std::set<DTypeProto>{F16, BF16, INT8, FP8_E4M3, FP8_E5M2}));
  EXPECT_GT(fast_paged, 0);
  EXPECT_GT(fast_ragged, 0);
}

// RandomConfig draws a value head dim of its own (Ev != E) for about one
// problem in five, both below and above head_dim, with serving features
// (paged, ragged, int8 K/V) among them.
TEST(DiffFuzzTest, RandomConfigsDrawValueHeadDims) {
  std::mt19937_64 rng(21);
  int own = 0, smaller = 0, larger = 0, serving = 0;
  constexpr int kDraws = 600;
  for (int n = 0; n < kDraws; ++n) {
    const AttentionConfig c = RandomConfig(rng);
    auto p = ProblemFromConfig(c);
    ASSERT_TRUE(p.ok()) << p.status() << "\n" << ConfigToText(c);
    if (!p->has_value_dim()) continue;
    ++own;
    smaller += p->value_dim() < p->head_dim ? 1 : 0;
    larger += p->value_dim() > p->head_dim ? 1 : 0;
    serving += p->is_paged() || p->is_ragged() || p->kv_dtype == DType::kI8 ? 1 : 0;
  }
  EXPECT_GT(own, kDraws / 8) << own;
  EXPECT_LT(own, kDraws / 3) << own;
  EXPECT_GT(smaller, 0);
  EXPECT_GT(larger, 0);
  EXPECT_GT(serving, 0);
}

// The reference with no FAST K/V types in its capabilities (as blas): the
// default Supports() refuses FAST over 16-bit and int8 K/V.
class ExactOnlyBackend : public Backend {
 public:
  std::string Name() const override { return "exact-only"; }
  std::string Description() const override { return "test double"; }
  Capabilities Caps() const override {
    Capabilities c = inner_->Caps();
    c.fast_kv_dtypes.clear();
    return c;
  }

 protected:
  absl::Status ForwardImpl(const AttentionProblem& p, const AttentionArgs& a,
                           RunInfo* info) override {
    return inner_->Forward(p, a, info);
  }

 private:
  std::unique_ptr<Backend> inner_ = MakeReferenceBackend();
};

// A backend without FAST for a K/V type declines those problems through
// Supports(): counted as unsupported, never as a mismatch; with f32 K/V
// FAST is EXACT and it runs them.
TEST(DiffFuzzTest, ABackendWithoutFastDeclinesItAsUnsupported) {
  ExactOnlyBackend exact_only;
  FuzzOptions options;
  options.count = 40;
  options.seed = 17;
  options.repro_dir = TempDir();
  options.compute = FuzzCompute::kFast;
  const FuzzReport report = FuzzBackends({&exact_only}, options, nullptr);
  EXPECT_EQ(report.fast_problems, 40);
  ASSERT_EQ(report.per_backend.size(), 1u);
  EXPECT_GT(report.per_backend[0].runs, 0);
  EXPECT_GT(report.per_backend[0].unsupported, 0);
  EXPECT_EQ(report.per_backend[0].mismatches, 0);
  for (const FuzzFinding& f : report.findings) ADD_FAILURE() << f.message << "\n  " << f.command;
  EXPECT_TRUE(RequireNamedBackendsRan(report, {"exact-only"}).ok());
  options.compute = FuzzCompute::kExact;
  const FuzzReport exact = FuzzBackends({&exact_only}, options, nullptr);
  EXPECT_EQ(exact.fast_problems, 0);
  EXPECT_EQ(exact.per_backend[0].unsupported, 0) << "it takes every EXACT problem";
}

// The reference, computing FAST (Q rounded to K's type) whatever it is
// asked: right under FAST, wrong under EXACT where rounding Q changes it.
class AlwaysFastBackend : public Backend {
 public:
  std::string Name() const override { return "always-fast"; }
  std::string Description() const override { return "test double"; }
  Capabilities Caps() const override { return inner_->Caps(); }

 protected:
  absl::Status ForwardImpl(const AttentionProblem& p, const AttentionArgs& a,
                           RunInfo* info) override {
    AttentionProblem fast = p;
    fast.compute = ComputeMode::kFast;
    return inner_->Forward(fast, a, info);
  }

 private:
  std::unique_ptr<Backend> inner_ = MakeReferenceBackend();
};

// EXACT is checked as EXACT: a backend that rounds Q regardless is found on
// EXACT problems, and the shrunk reproduction keeps compute EXACT (unset),
// under which it fails, and the K/V type that makes Q's rounding matter.
TEST(DiffFuzzTest, RoundingQUnderExactIsFoundAndShrunk) {
  AlwaysFastBackend bug;
  FuzzOptions options;
  options.count = 30;
  options.seed = 19;
  options.repro_dir = TempDir();
  options.compute = FuzzCompute::kExact;
  const FuzzReport report = FuzzBackends({&bug}, options, nullptr);
  ASSERT_FALSE(report.findings.empty());
  auto config = LoadConfigFile(report.findings[0].config_path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_NE(config->compute(), FAST) << ConfigToText(*config);
  EXPECT_NE(config->kv_dtype(), F32) << ConfigToText(*config);
  EXPECT_FALSE(CheckOnBackend(*config, &bug).ok());
  AttentionConfig fast = *config;
  fast.set_compute(FAST);
  EXPECT_TRUE(CheckOnBackend(fast, &bug).ok()) << "FAST permits the rounding";
  // Every problem FAST: the same backend is right throughout.
  options.compute = FuzzCompute::kFast;
  EXPECT_TRUE(FuzzBackends({&bug}, options, nullptr).findings.empty());
}

// The reference behind a bug that only paged or int8 problems reach: it
// edits the args (swapping sequence 0's first two pages, or reading V with
// K's scales) before the reference runs. `storage` holds the edited table.
class ServingBugBackend : public Backend {
 public:
  enum class Bug { kSwapPages, kKeyScalesForValues };
  explicit ServingBugBackend(Bug bug) : bug_(bug) {}
  std::string Name() const override { return "serving-bug"; }
  std::string Description() const override { return "test double"; }
  Capabilities Caps() const override { return inner_->Caps(); }

 protected:
  absl::Status ForwardImpl(const AttentionProblem& p, const AttentionArgs& a,
                           RunInfo* info) override {
    AttentionArgs edited = a;
    std::vector<int32_t> table;
    if (bug_ == Bug::kSwapPages && p.is_paged() && p.KvLength(0) > p.page_size) {
      // Block table [B, max_pages], contiguous (ProblemData).
      const auto* t = static_cast<const int32_t*>(a.block_table.data);
      table.assign(t, t + p.batch * p.max_pages());
      std::swap(table[0], table[1]);
      edited.block_table.data = table.data();
    }
    if (bug_ == Bug::kKeyScalesForValues && IsScaledKv(p.kv_dtype)) edited.v_scale = a.k_scale;
    return inner_->Forward(p, edited, info);
  }

 private:
  Bug bug_;
  std::unique_ptr<Backend> inner_ = MakeReferenceBackend();
};

// The fuzzer draws paged and int8 problems often enough to find bugs only
// they reach, and the shrunk config keeps the feature that matters.
TEST(DiffFuzzTest, PagingAndInt8BugsAreFoundAndShrunk) {
  for (ServingBugBackend::Bug bug :
       {ServingBugBackend::Bug::kSwapPages, ServingBugBackend::Bug::kKeyScalesForValues}) {
    ServingBugBackend backend(bug);
    FuzzOptions options;
    options.count = 100;
    options.seed = 11;
    options.repro_dir = TempDir();
    const FuzzReport report = FuzzBackends({&backend}, options, nullptr);
    ASSERT_FALSE(report.findings.empty()) << static_cast<int>(bug);
    auto config = LoadConfigFile(report.findings[0].config_path);
    ASSERT_TRUE(config.ok()) << config.status();
    if (bug == ServingBugBackend::Bug::kSwapPages) {
      EXPECT_GT(config->page_size(), 0) << ConfigToText(*config);
    } else {
      // int8 or fp8: both read V times its own scales.
      EXPECT_TRUE(config->kv_dtype() == INT8 || config->kv_dtype() == FP8_E4M3 ||
                  config->kv_dtype() == FP8_E5M2)
          << ConfigToText(*config);
      EXPECT_EQ(config->page_size(), 0) << "paging is not needed: " << ConfigToText(*config);
    }
    EXPECT_EQ(config->q_lengths_size(), 0) << "ragged is not needed: " << ConfigToText(*config);
    EXPECT_EQ(config->batch(), 1) << ConfigToText(*config);
    EXPECT_FALSE(CheckOnBackend(*config, &backend).ok());
  }
}

// RandomConfig draws the serving features: each one, and together, in
// valid configs the reference runs.
TEST(DiffFuzzTest, RandomConfigsDrawPagedRaggedAndInt8) {
  std::mt19937_64 rng(13);
  int paged = 0, shared = 0, ragged = 0, ragged_paged = 0, int8 = 0, empty_seq = 0, plain = 0;
  for (int n = 0; n < 400; ++n) {
    const AttentionConfig c = RandomConfig(rng);
    auto p = ProblemFromConfig(c);
    ASSERT_TRUE(p.ok()) << p.status() << "\n" << ConfigToText(c);
    paged += p->is_paged() ? 1 : 0;
    ragged += p->is_ragged() ? 1 : 0;
    ragged_paged += p->is_paged() && p->is_ragged() ? 1 : 0;
    int8 += p->kv_dtype == DType::kI8 ? 1 : 0;
    plain += !p->is_paged() && !p->is_ragged() && p->kv_dtype != DType::kI8 ? 1 : 0;
    if (p->is_paged()) {
      int64_t needed = 0;
      for (int64_t b = 0; b < p->batch; ++b) {
        needed += (p->KvLength(b) + p->page_size - 1) / p->page_size;
      }
      shared += needed > p->num_pages ? 1 : 0;
    }
    for (int64_t b = 0; p->is_ragged() && b < p->batch; ++b) {
      empty_seq += p->QLength(b) == 0 || p->KvLength(b) == 0 ? 1 : 0;
    }
  }
  EXPECT_GT(paged, 40);
  EXPECT_GT(shared, 5);
  EXPECT_GT(ragged, 40);
  EXPECT_GT(ragged_paged, 5);
  EXPECT_GT(int8, 30);
  EXPECT_GT(empty_seq, 10);
  EXPECT_GT(plain, 100) << "the dense float problems (and their NaN placement) stay common";
}

// Poison goes only where nothing is read: the reference gives the same bits.
TEST(DiffFuzzTest, PoisonedInputsDoNotChangeTheReference) {
  std::mt19937_64 rng(7);
  int tested = 0;
  for (int n = 0; n < 300; ++n) {
    AttentionConfig c = RandomConfig(rng, 2e5);
    // Poison draws into dense float K/V only (unread pool rows of a paged
    // problem are NaN already).
    if (c.page_size() != 0 || c.q_lengths_size() != 0 || c.kv_dtype() == INT8 ||
        c.kv_dtype() == FP8_E4M3 || c.kv_dtype() == FP8_E5M2) {
      continue;
    }
    ++tested;
    c.set_poison_blocked(false);
    auto p = ProblemFromConfig(c);
    ASSERT_TRUE(p.ok()) << p.status();
    AttentionProblem poisoned = *p;
    poisoned.poison_blocked = true;
    auto clean = ProblemData::Random(*p, p->seed);
    auto dirty = ProblemData::Random(poisoned, p->seed);
    ASSERT_TRUE(clean.ok() && dirty.ok());
    const ReferenceResult a = ComputeReference(*p, clean->args());
    const ReferenceResult b = ComputeReference(poisoned, dirty->args());
    ASSERT_EQ(0, std::memcmp(a.o.data(), b.o.data(), a.o.size() * sizeof(double))) << p->Id();
    ASSERT_EQ(0, std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(double)));
  }
  EXPECT_GT(tested, 100);
}

// The gradients of every backend with a backward pass against the reference
// backward, on random dense problems.
TEST(DiffFuzzTest, BoundedGradientRunOverEveryBackendFindsNothing) {
  FuzzOptions options;
  options.count = EnvCount("DIFF_FUZZ_GRAD_COUNT", 100);
  options.seed = static_cast<uint64_t>(EnvCount("DIFF_FUZZ_SEED", 20240601));
  options.repro_dir = TempDir();
  int64_t with_backward = 0;
  for (Backend* b : GlobalRegistry().All()) {
    with_backward += b->Available().ok() && b->Caps().backward.supported ? 1 : 0;
  }
  const FuzzReport report =
      FuzzBackendGradients(GlobalRegistry().All(), options,
                           [](const std::string& l) { std::printf("%s\n", l.c_str()); });
  std::printf("gradients: %lld problems, %lld backward runs, %lld unsupported\n",
              (long long)report.problems, (long long)report.runs, (long long)report.unsupported);
  EXPECT_EQ(report.problems, options.count);
  ASSERT_GT(with_backward, 0) << "no registered backend has a backward pass";
  // Every dense float problem is one the reference's backward takes.
  EXPECT_GE(report.runs, options.count);
  for (const FuzzTally& t : report.per_backend) {
    std::printf("  %s: %lld runs, %lld unsupported, %lld mismatches\n", t.backend.c_str(),
                (long long)t.runs, (long long)t.unsupported, (long long)t.mismatches);
    // A backend with a backward pass must run some of the dense problems.
    Backend* b = GlobalRegistry().Find(t.backend).value();
    if (b->Caps().backward.supported) {
      EXPECT_GT(t.runs, 0) << t.backend;
    }
  }
  for (const FuzzFinding& f : report.findings) {
    ADD_FAILURE() << f.backend << ": " << f.message << "\n  " << f.command;
  }
}

// RandomGradConfig draws only problems with a backward pass, and still the
// features the backward contract has.
TEST(DiffFuzzTest, RandomGradConfigsAreDenseBackwardProblems) {
  std::mt19937_64 rng(17);
  int padded = 0, dense = 0, bias = 0, softcap = 0, gqa = 0, poison = 0, bthd = 0, half = 0;
  std::set<MaskKind> masks;
  for (int n = 0; n < 300; ++n) {
    const AttentionConfig c = RandomGradConfig(rng);
    auto p = ProblemFromConfig(c);
    ASSERT_TRUE(p.ok()) << p.status() << "\n" << ConfigToText(c);
    ASSERT_FALSE(p->is_paged() || p->is_ragged() || p->kv_dtype == DType::kI8) << p->Id();
    ASSERT_TRUE(p->return_lse && p->nonfinite_inputs == 0) << p->Id();
    padded += p->has_kv_lengths() ? 1 : 0;
    dense += p->blocked_mask ? 1 : 0;
    bias += p->additive_bias ? 1 : 0;
    softcap += p->softcap > 0 ? 1 : 0;
    gqa += p->group_size() > 1 ? 1 : 0;
    poison += p->poison_blocked ? 1 : 0;
    bthd += p->layout == Layout::kBTHD ? 1 : 0;
    half += p->dtype != DType::kF32 || p->kv_dtype != DType::kF32 ? 1 : 0;
    masks.insert(p->mask);
  }
  EXPECT_EQ(masks.size(), 3u);
  for (int n : {padded, dense, bias, softcap, gqa, poison, bthd, half}) EXPECT_GT(n, 20);
}

// The reference, except that its dK of kv head g is the one of kv head
// g + 1 (mod G): the sum over the wrong group's query heads. Only problems
// with two or more KV heads reach it; the forward is right.
class WrongGroupDkBackend : public Backend {
 public:
  std::string Name() const override { return "planted-grad-bug"; }
  std::string Description() const override { return "test double"; }
  Capabilities Caps() const override { return inner_->Caps(); }

 protected:
  absl::Status ForwardImpl(const AttentionProblem& p, const AttentionArgs& a,
                           RunInfo* info) override {
    return inner_->Forward(p, a, info);
  }
  absl::Status BackwardImpl(const AttentionProblem& p, const AttentionArgs& a, const GradArgs& g,
                            RunInfo* info) override {
    const absl::Status s = inner_->Backward(p, a, g, info);
    const int64_t G = p.num_kv_heads;
    if (!s.ok() || G < 2) return s;
    // dk [B, G, Tk, d]: read every head, then write head g from head g + 1.
    const TensorView& dk = g.dk;
    std::vector<float> copy(static_cast<size_t>(p.batch * G * p.kv_len * p.head_dim));
    auto index = [&](int64_t b, int64_t h, int64_t t, int64_t c) {
      return static_cast<size_t>(((b * G + h) * p.kv_len + t) * p.head_dim + c);
    };
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < G; ++h)
        for (int64_t t = 0; t < p.kv_len; ++t)
          for (int64_t c = 0; c < p.head_dim; ++c)
            copy[index(b, h, t, c)] = dk.LoadF32(dk.Offset(b, h, t, c));
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < G; ++h)
        for (int64_t t = 0; t < p.kv_len; ++t)
          for (int64_t c = 0; c < p.head_dim; ++c)
            StoreFromF32(dk.data, dk.dtype, dk.Offset(b, h, t, c),
                         copy[index(b, (h + 1) % G, t, c)]);
    return s;
  }

 private:
  std::unique_ptr<Backend> inner_ = MakeReferenceBackend();
};

TEST(DiffFuzzTest, PlantedGradientBugIsShrunkAndReproducedFromTheConfig) {
  WrongGroupDkBackend bug;
  ASSERT_TRUE(bug.Caps().backward.supported) << "the reference has no backward pass";
  FuzzOptions options;
  options.count = 20;
  options.seed = 3;
  options.repro_dir = TempDir();
  const FuzzReport report = FuzzBackendGradients({&bug}, options, nullptr);
  ASSERT_FALSE(report.findings.empty());
  const FuzzFinding& f = report.findings[0];
  EXPECT_NE(f.command.find("attnkit check --grad --config="), std::string::npos) << f.command;
  EXPECT_NE(f.message.find("dk["), std::string::npos)
      << "the first bad element is in dK: " << f.message;
  auto config = LoadConfigFile(f.config_path);
  ASSERT_TRUE(config.ok()) << config.status();
  // Shrunk to the edge of the bug: two KV heads of one query head each, two
  // keys (with one, dS = P (dP - D) = 0 and dK vanishes), every option off.
  EXPECT_EQ(config->num_kv_heads(), 2) << ConfigToText(*config);
  EXPECT_EQ(config->num_heads(), 2) << ConfigToText(*config);
  EXPECT_EQ(config->kv_len(), 2) << ConfigToText(*config);
  EXPECT_EQ(config->q_len(), 1) << ConfigToText(*config);
  EXPECT_EQ(config->head_dim(), 1) << ConfigToText(*config);
  EXPECT_EQ(config->batch(), 1) << ConfigToText(*config);
  EXPECT_FALSE(config->blocked_mask() || config->additive_bias() || config->poison_blocked() ||
               config->softcap() != 0 || config->kv_lengths_size() != 0)
      << ConfigToText(*config);
  EXPECT_FALSE(CheckGradOnBackend(*config, &bug).ok());
  // The forward is right, and the reference's own backward passes the config.
  EXPECT_TRUE(CheckOnBackend(*config, &bug).ok());
  auto reference = MakeReferenceBackend();
  bool ran = false;
  EXPECT_TRUE(CheckGradOnBackend(*config, reference.get(), &ran).ok());
  EXPECT_TRUE(ran);
}

}  // namespace
}  // namespace attnkit
