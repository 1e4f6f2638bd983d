// CompareGradients' rules, one at a time, on the reference's own gradients
// rounded into the gradient tensors (tests/grad_oracle_test.cc proves the
// bound against planted bugs and real backends).
#include "oracle/compare_grad.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "harness/grad_data.h"
#include "harness/problem_data.h"
#include "oracle/reference_backward.h"

namespace attnkit {
namespace {

struct Fixture {
  AttentionProblem p;
  ProblemData data;
  GradData grads;
  ReferenceGradients ref;
};

// A GQA problem with bias, softcap, padding and a fully blocked row
// (batch 1 has no keys), the reference's gradients stored in `grads`.
Fixture Make(DType dtype) {
  Fixture f;
  f.p = BasicProblem(2, 4, 2, 3, 6, 8);
  f.p.return_lse = true;
  f.p.dtype = f.p.kv_dtype = dtype;
  f.p.additive_bias = true;
  f.p.softcap = 2.0f;
  f.p.kv_lengths = {6, 0};
  f.p.layout = Layout::kBTHD;
  f.data = *ProblemData::Random(f.p, 17);
  f.grads = *GradData::Random(f.p, 17, /*with_dbias=*/true);
  f.ref = ComputeReferenceBackward(f.p, f.data.args(), f.grads.d_o.view());
  const GradArgs g = f.grads.args();
  auto store = [&](const std::vector<double>& from, const TensorView& to, int64_t heads,
                   int64_t tokens) {
    size_t x = 0;
    for (int64_t b = 0; b < f.p.batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t t = 0; t < tokens; ++t)
          for (int64_t c = 0; c < f.p.head_dim; ++c) {
            StoreFromF32(to.data, to.dtype, to.Offset(b, h, t, c), static_cast<float>(from[x++]));
          }
  };
  store(f.ref.dq, g.dq, f.p.num_heads, f.p.q_len);
  store(f.ref.dk, g.dk, f.p.num_kv_heads, f.p.kv_len);
  store(f.ref.dv, g.dv, f.p.num_kv_heads, f.p.kv_len);
  auto* dbias = static_cast<float*>(g.dbias.data);
  for (size_t x = 0; x < f.ref.dbias.size(); ++x) dbias[x] = static_cast<float>(f.ref.dbias[x]);
  return f;
}

TEST(CompareGradientsTest, RoundedReferencePasses) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    const Fixture f = Make(t);
    const Comparison c = CompareGradients(f.p, f.grads.args(), f.ref);
    EXPECT_TRUE(c.ok()) << DTypeName(t) << ": " << c.first_failure;
    // dq, dk, dv and dbias, every element.
    EXPECT_EQ(c.checked, 2 * 4 * 3 * 8 + 2 * 2 * 2 * 6 * 8 + 2 * 4 * 3 * 6);
    EXPECT_GT(c.max_bound, 0);
    EXPECT_LE(c.max_bound_fraction, 1.0);
  }
}

TEST(CompareGradientsTest, NamesTheTensorAndIndexOfAnError) {
  const Fixture f = Make(DType::kF32);
  const TensorView dk = f.grads.args().dk;
  const int64_t off = dk.Offset(0, 1, 4, 3);
  const float v = dk.LoadF32(off);
  static_cast<float*>(dk.data)[off] = v + 0.01f;
  const Comparison c = CompareGradients(f.p, f.grads.args(), f.ref);
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.mismatches, 1);
  EXPECT_EQ(c.first_failure.rfind("dk[0,1,4,3] = ", 0), 0u) << c.first_failure;
  EXPECT_NE(c.first_failure.find("> bound"), std::string::npos) << c.first_failure;
}

TEST(CompareGradientsTest, NonFiniteFailsAtOnce) {
  const Fixture f = Make(DType::kBF16);
  const TensorView dv = f.grads.args().dv;
  StoreFromF32(dv.data, dv.dtype, dv.Offset(0, 0, 2, 5), std::numeric_limits<float>::quiet_NaN());
  const Comparison c = CompareGradients(f.p, f.grads.args(), f.ref);
  EXPECT_FALSE(c.ok());
  EXPECT_TRUE(c.non_finite);
  EXPECT_EQ(c.first_failure.rfind("dv[0,0,2,5] = nan", 0), 0u) << c.first_failure;
}

// Batch 1 has no keys: its dq rows must be exactly 0, however small.
TEST(CompareGradientsTest, BlockedRowMustBeExactlyZero) {
  const Fixture f = Make(DType::kF32);
  const TensorView dq = f.grads.args().dq;
  static_cast<float*>(dq.data)[dq.Offset(1, 2, 1, 0)] = 1e-30f;
  const Comparison c = CompareGradients(f.p, f.grads.args(), f.ref);
  EXPECT_FALSE(c.ok());
  EXPECT_NE(c.first_failure.find("dq[1,2,1,0]"), std::string::npos) << c.first_failure;
  EXPECT_NE(c.first_failure.find("exactly 0"), std::string::npos) << c.first_failure;
}

// An error of a few bounds fails; a tenth of the bound passes: the bound is
// a number, not a flag.
TEST(CompareGradientsTest, ErrorsAreMeasuredAgainstTheBound) {
  Fixture f = Make(DType::kF32);
  const Comparison clean = CompareGradients(f.p, f.grads.args(), f.ref);
  ASSERT_TRUE(clean.ok()) << clean.first_failure;
  // dbias[0, 0, 1, 2]: f32, so its bound is the f32 term plus half an ulp.
  auto* dbias = static_cast<float*>(f.grads.args().dbias.data);
  const size_t at = (0 * 3 + 1) * 6 + 2;
  ASSERT_NE(f.ref.dbias_abs[at], 0.0);
  const double want = f.ref.dbias[at];
  const double mag = f.ref.dbias_abs[at];
  dbias[at] = static_cast<float>(want + 1e-3 * mag);
  EXPECT_FALSE(CompareGradients(f.p, f.grads.args(), f.ref).ok());
  dbias[at] = static_cast<float>(want + 1e-7 * mag);
  EXPECT_TRUE(CompareGradients(f.p, f.grads.args(), f.ref).ok());
}

TEST(CompareGradientsTest, MissingReferenceFails) {
  const Fixture f = Make(DType::kF32);
  const Comparison c = CompareGradients(f.p, f.grads.args(), ReferenceGradients{});
  EXPECT_FALSE(c.ok());
  EXPECT_NE(c.first_failure.find("no reference gradients"), std::string::npos);
}

}  // namespace
}  // namespace attnkit
