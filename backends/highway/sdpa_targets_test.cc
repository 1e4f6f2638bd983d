// The flash kernels under every compiled Highway target this CPU supports
// (not only the best), against the fp64 reference on a representative grid.
#include <iostream>
#include <string>

#include "backends/highway/flash_test_util.h"
#include "backends/highway/highway_backend.h"
#include "backends/highway/x86_dot.h"
#include "harness/problem_data.h"
#include "hwy/targets.h"
#include "hwy/tests/hwy_gtest.h"
#include "oracle/compare.h"
#include "oracle/reference.h"

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

// int8 K/V decode under FAST (4 query rows per kv head, keys that fill no
// whole tile) against the oracle, and the Q.K it ran: vpdpbusd where the
// target and CPU allow (AVX-512 targets with AVX512_VNNI, AVX2 with
// AVX-VNNI), f32 products of the widened values otherwise.
TEST_P(FlashTargetTest, Int8FastDecodeMatchesTheOracle) {
  static Backend* backend = MakeHighwayBackend({/*num_threads=*/2}).release();
  const int64_t target = GetParam();
  std::string want = "";
  if (target == HWY_AVX2 && x86_dot::HaveAvxVnni()) {
    want = " qk=int8avxvnni";
  } else if (target <= HWY_AVX3 && x86_dot::HaveVnni()) {
    want = " qk=int8vnni";
  } else if (target == HWY_AVX2) {
    std::cout << "not checking the AVX2 kernel's products: this CPU has no AVX-VNNI\n";
  }
  for (int64_t d : {128, 80}) {
    for (int64_t kv_len : {301, 45}) {
      AttentionProblem p = MakeTestProblem(2, 8, 2, 1, kv_len, d);
      p.kv_dtype = DType::kI8;
      p.compute = ComputeMode::kFast;
      p.return_lse = true;
      absl::StatusOr<ProblemData> data = ProblemData::Random(p, 5);
      ASSERT_TRUE(data.ok()) << data.status();
      RunInfo info;
      const absl::Status s = backend->Forward(p, data->args(), &info);
      ASSERT_TRUE(s.ok()) << p.Id() << ": " << s;
      const Comparison c = CompareToReference(p, data->args(), ComputeReference(p, data->args()));
      EXPECT_TRUE(c.ok()) << p.Id() << ": " << c.first_failure << " kernel " << info.kernel;
      if (!want.empty()) {
        EXPECT_NE(info.kernel.find(want), std::string::npos) << info.kernel << " wanted " << want;
      } else {
        EXPECT_EQ(info.kernel.find("qk=int8"), std::string::npos) << info.kernel;
      }
    }
  }
}

}  // namespace
}  // namespace attnkit
