// The flash kernels under every compiled Highway target this CPU supports
// (not only the best), against the fp64 reference on a representative grid.
#include "backends/highway/flash_test_util.h"
#include "backends/highway/highway_backend.h"
#include "hwy/targets.h"
#include "hwy/tests/hwy_gtest.h"

namespace attnkit {
namespace {

class FlashTargetTest : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(FlashTargetTest);

TEST_P(FlashTargetTest, GridMatchesReference) {
  // No forced target: the backend dispatches through HWY_DYNAMIC_DISPATCH,
  // which follows SetSupportedTargetsForTest(GetParam()).
  static Backend* backend = MakeHighwayBackend({/*num_threads=*/2}).release();
  const std::string want = std::string("flash/") + hwy::TargetName(GetParam()) + " ";
  for (const AttentionProblem& p : TestGrid(/*small=*/true)) {
    std::string kernel;
    const absl::Status s = CheckAgainstReference(backend, p, &kernel);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(kernel.rfind(want, 0), 0u) << kernel << " wanted " << want;
  }
}

// The direct decode path (packed score tiles on every target but scalar).
TEST_P(FlashTargetTest, DecodeTilesMatchReference) {
  static Backend* backend = MakeHighwayBackend({/*num_threads=*/2}).release();
  for (const AttentionProblem& p : DecodeTileGrid()) {
    const absl::Status s = CheckAgainstReference(backend, p);
    EXPECT_TRUE(s.ok()) << p.Id() << ": " << s;
  }
}

}  // namespace
}  // namespace attnkit
