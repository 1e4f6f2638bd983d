// The Highway backend on the best target against the fp64 reference, over
// the full problem grid; thread-count invariance; target forcing.
#include "backends/highway/highway_backend.h"

#include <cstring>

#include "backends/highway/flash_test_util.h"
#include "gtest/gtest.h"

namespace attnkit {
namespace {

class HighwayGridTest : public testing::TestWithParam<AttentionProblem> {};

TEST_P(HighwayGridTest, MatchesReference) {
  static Backend* backend = MakeHighwayBackend({/*num_threads=*/2}).release();
  const AttentionProblem& p = GetParam();
  ASSERT_TRUE(backend->Supports(p).ok()) << backend->Supports(p);
  std::string kernel;
  EXPECT_TRUE(CheckAgainstReference(backend, p, &kernel).ok())
      << CheckAgainstReference(backend, p);
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
  ASSERT_TRUE(CheckAgainstReference(backend.get(), MakeTestProblem(1, 4, 2, 9, 30, 16), &kernel).ok());
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
