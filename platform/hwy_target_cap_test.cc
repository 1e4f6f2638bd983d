#include "platform/hwy_target_cap.h"

#include <cstdlib>

#include "gtest/gtest.h"
#include "hwy/targets.h"

namespace attnkit {
namespace {

TEST(HighwayTargetByName, FindsTargetsCaseInsensitively) {
  EXPECT_EQ(*HighwayTargetByName("AVX2"), HWY_AVX2);
  EXPECT_EQ(*HighwayTargetByName("avx3_dl"), HWY_AVX3_DL);
  EXPECT_EQ(*HighwayTargetByName("Scalar"), HWY_SCALAR);
}

TEST(HighwayTargetByName, RejectsUnknownNamesNamingTheValue) {
  absl::StatusOr<int64_t> t = HighwayTargetByName("AVX9");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("'AVX9'"), std::string::npos) << t.status();
  EXPECT_NE(t.status().message().find("AVX2"), std::string::npos) << t.status();
}

TEST(HighwayTargetNames, ListsBestFirst) {
  EXPECT_EQ(HighwayTargetNames(HWY_SCALAR | HWY_AVX2 | HWY_AVX3), "AVX3 AVX2 SCALAR");
  EXPECT_EQ(HighwayTargetNames(0), "");
}

// A cap removes every better target from SupportedTargets() and lifting it
// restores them; the process's own cap ($ATTNKIT_HWY_TARGET) is put back.
TEST(CapHighwayTargets, RemovesBetterTargetsOnly) {
  hwy::DisableTargets(0);
  const int64_t all = hwy::SupportedTargets();
  CapHighwayTargets(HWY_SSE4);
  const int64_t capped = hwy::SupportedTargets();
  EXPECT_EQ(capped & (HWY_SSE4 - 1), 0) << HighwayTargetNames(capped);
  EXPECT_EQ(capped, all & ~(HWY_SSE4 - 1)) << HighwayTargetNames(capped);
  hwy::DisableTargets(0);
  EXPECT_EQ(hwy::SupportedTargets(), all);
  ASSERT_TRUE(CapHighwayTargetsFromEnv().ok());
}

// Under the use-after-return ASan pass (ATTNKIT_HWY_TARGET=AVX2) the static
// initializer must already have applied the cap before main.
TEST(CapHighwayTargets, EnvironmentCapHoldsFromStartUp) {
  const char* env = std::getenv("ATTNKIT_HWY_TARGET");
  if (env == nullptr || *env == '\0') GTEST_SKIP() << "ATTNKIT_HWY_TARGET is not set";
  const int64_t cap = *HighwayTargetByName(env);
  EXPECT_EQ(hwy::SupportedTargets() & (cap - 1), 0)
      << HighwayTargetNames(hwy::SupportedTargets()) << " under cap " << env;
}

}  // namespace
}  // namespace attnkit
