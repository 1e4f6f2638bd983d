// Concurrency: Forward on one backend from 8 threads at once, each on its own
// problem, gives the bits that serial calls give, and the serial calls meet
// the fp64 oracle (so a bug both share fails too); the registry and plugin
// loading can be used from several threads at once.
#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "backends/builtin.h"
#include "gtest/gtest.h"
#include "harness/execute.h"
#include "harness/problem_data.h"
#include "oracle/compare.h"
#include "oracle/reference.h"
#include "plugin/registry.h"
#include "tests/backend_test_env.h"

namespace attnkit {
namespace {

constexpr int kThreads = 8;

// Eight different problems: sizes, GQA ratios, masks, padding, dtypes.
AttentionProblem ProblemFor(int t) {
  AttentionProblem p = BasicProblem(1 + t % 2, 4, 1 << (t % 3), 5 + 7 * t, 9 + 5 * t, 8 << (t % 3));
  p.mask = t % 3 == 0 ? MaskKind::kNone : t % 3 == 1 ? MaskKind::kCausal : MaskKind::kSlidingWindow;
  if (p.mask == MaskKind::kSlidingWindow) p.window_left = 3;
  p.alignment = t % 2 ? Alignment::kTopLeft : Alignment::kBottomRight;
  if (t % 4 == 3) p.kv_lengths = std::vector<int64_t>(p.batch, p.kv_len / 2);
  p.return_lse = t % 2 == 0;
  p.dtype = t % 4 == 1 ? DType::kF16 : DType::kF32;
  p.seed = 100 + t;
  p.name = absl::StrCat("thread", t);
  return p;
}

std::string OutputBytes(const ProblemData& d) {
  std::string out(static_cast<const char*>(d.o.data()),
                  d.o.view().SpanElements() * DTypeSize(d.o.view().dtype));
  if (!d.lse.view().empty()) {
    out.append(static_cast<const char*>(d.lse.data()), d.lse.view().SpanElements() * 4);
  }
  return out;
}

class ConcurrencyTest : public testing_env::BackendParamTest<std::string> {};

TEST_P(ConcurrencyTest, EightThreadsGiveTheSerialResults) {
  auto found = GlobalRegistry().Find(GetParam());
  ASSERT_TRUE(found.ok()) << found.status();
  Backend* backend = *found;
  std::vector<AttentionProblem> problems;
  std::vector<ProblemData> data;
  std::vector<std::string> serial;
  for (int t = 0; t < kThreads; ++t) {
    AttentionProblem p = ProblemFor(t);
    if (!testing_env::CheckRunnable(*backend, p).ok()) continue;
    auto d = ProblemData::Random(p, p.seed);
    ASSERT_TRUE(d.ok()) << d.status();
    PoisonOutputs(*d);
    ASSERT_TRUE(RunOnBackend(backend, p, *d, nullptr).ok());
    const Comparison c = CompareToReference(p, d->args(), ComputeReference(p, d->args()));
    EXPECT_TRUE(c.ok()) << GetParam() << ": serial result of " << p.Id()
                        << " misses the oracle: " << c.mismatches << " of " << c.checked
                        << " outside the bound" << (c.non_finite ? ", non-finite output" : "")
                        << "; first: " << c.first_failure;
    serial.push_back(OutputBytes(*d));
    problems.push_back(p);
    data.push_back(std::move(*d));
  }
  if (problems.empty()) GTEST_SKIP() << GetParam() << " supports none of the problems here";
  for (int round = 0; round < 3; ++round) {
    for (const ProblemData& d : data) PoisonOutputs(d);
    std::atomic<int> ready{0};
    std::vector<absl::Status> status(problems.size());
    std::vector<std::thread> threads;
    for (size_t t = 0; t < problems.size(); ++t) {
      threads.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < static_cast<int>(problems.size())) std::this_thread::yield();
        status[t] = RunOnBackend(backend, problems[t], data[t], nullptr);
      });
    }
    for (std::thread& th : threads) th.join();
    for (size_t t = 0; t < problems.size(); ++t) {
      ASSERT_TRUE(status[t].ok()) << status[t];
      EXPECT_TRUE(OutputBytes(data[t]) == serial[t])
          << GetParam() << ": concurrent result of " << problems[t].Id() << " differs from serial";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, ConcurrencyTest,
                         ::testing::ValuesIn(testing_env::BackendNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return testing_env::SafeName(info.param);
                         });

// Loading, registering and looking up from 8 threads: every thread sees a
// consistent registry; a plugin loaded by several threads registers once.
TEST(RegistryConcurrencyTest, LoadFindAndListFromEightThreads) {
  // The reference plugin as passed with --plugin= (Bazel's runfiles path, or
  // the GPU bundle's lib/ directory).
  std::string path;
  for (const std::string& p : testing_env::PluginPaths()) {
    if (absl::EndsWith(p, "libattnkit_reference_plugin.so")) path = p;
  }
  ASSERT_FALSE(path.empty()) << "no --plugin=.../libattnkit_reference_plugin.so given";
  const char* kPlugin = path.c_str();
  for (int round = 0; round < 5; ++round) {
    BackendRegistry registry;
    std::atomic<int> loaded{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        if (t % 2 == 0) {
          if (registry.LoadPlugin(kPlugin).ok()) loaded.fetch_add(1);
          registry.LoadPlugin("/nonexistent/plugin.so").IgnoreError();
        }
        for (int i = 0; i < 50; ++i) {
          for (Backend* b : registry.All()) EXPECT_FALSE(b->Name().empty());
          registry.Find("reference-plugin").status().IgnoreError();
          EXPECT_LE(registry.Names().size(), 1u);
        }
      });
    }
    for (std::thread& th : threads) th.join();
    EXPECT_EQ(loaded.load(), 1) << "exactly one load registers the plugin";
    EXPECT_TRUE(registry.Find("reference-plugin").ok());
    EXPECT_EQ(registry.plugin_failures().size(), 4u + 3u);  // 4 missing files, 3 duplicates
  }
  // The process-wide registry is created once, whoever asks first.
  std::vector<BackendRegistry*> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&, t] { seen[t] = &GlobalRegistry(); });
  for (std::thread& th : threads) th.join();
  for (BackendRegistry* r : seen) EXPECT_EQ(r, seen[0]);
}

}  // namespace
}  // namespace attnkit
