// attnkit_backward through the C structs: the forward with return_lse by
// attnkit_run, then the backward by name and by auto, each held to the fp64
// reference gradients by the gradient oracle (oracle/compare_grad.h); and the
// errors a caller meets (dO missing, return_lse off, paged K/V, short
// structs), each a status code with a message naming the cause.
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "attnkit/attnkit.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "harness/grad_data.h"
#include "harness/problem_data.h"
#include "oracle/compare_grad.h"
#include "oracle/reference_backward.h"
#include "plugin/c_abi.h"

namespace attnkit {
namespace {

using ::testing::HasSubstr;

// GQA (4 query heads over 2 KV heads), bottom-right causal with Tq < Tk,
// so rows see different key counts; small enough for the fp64 reference.
AttentionProblem GqaCausal(Layout layout) {
  AttentionProblem p;
  p.batch = 2;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.head_dim = 16;
  p.model_dim = 64;
  p.q_len = 9;
  p.kv_len = 13;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.layout = layout;
  p.return_lse = true;
  p.scale = 0.25f;
  return p;
}

class CApiBackwardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(attnkit_context_create(nullptr, &ctx_, err_, sizeof(err_)), ATTNKIT_OK) << err_;
    result_.struct_size = sizeof(result_);
  }
  void TearDown() override { attnkit_context_destroy(ctx_); }

  attnkit_context* ctx_ = nullptr;
  char err_[2048] = {0};
  attnkit_run_result result_;
};

TEST_F(CApiBackwardTest, GradientsMatchTheReferenceByNameAndByAuto) {
  for (Layout layout : {Layout::kBHTD, Layout::kBTHD}) {
    const AttentionProblem p = GqaCausal(layout);
    SCOPED_TRACE(p.Id());
    absl::StatusOr<ProblemData> data = ProblemData::Random(p, 11);
    ASSERT_TRUE(data.ok()) << data.status();
    const attnkit_problem cp = ProblemToC(p);
    const attnkit_args ca = ArgsToC(data->args());
    ASSERT_EQ(attnkit_run(ctx_, "auto", &cp, &ca, nullptr, err_, sizeof(err_)), ATTNKIT_OK) << err_;
    absl::StatusOr<GradData> grads = GradData::Random(p, 12, /*with_dbias=*/false);
    ASSERT_TRUE(grads.ok()) << grads.status();
    const ReferenceGradients ref = ComputeReferenceBackward(p, data->args(), grads->d_o.view());
    for (const char* backend : {"auto", "highway", "blas", "reference"}) {
      SCOPED_TRACE(backend);
      // Fresh outputs, so that no earlier backend's gradients can pass.
      absl::StatusOr<GradData> fresh = GradData::Random(p, 12, /*with_dbias=*/false);
      ASSERT_TRUE(fresh.ok()) << fresh.status();
      const attnkit_grads cg = GradsToC(fresh->args());
      ASSERT_EQ(attnkit_backward(ctx_, backend, &cp, &ca, &cg, &result_, err_, sizeof(err_)),
                ATTNKIT_OK)
          << err_;
      const Comparison c = CompareGradients(p, fresh->args(), ref);
      EXPECT_TRUE(c.ok()) << c.first_failure;
      EXPECT_GT(c.checked, 0);
      if (std::string(backend) == "auto") {
        EXPECT_STREQ(result_.backend, "highway");
        EXPECT_THAT(result_.reason, HasSubstr("whose backward supports this problem"));
        EXPECT_THAT(result_.reason, HasSubstr("host backends only"));
      } else {
        EXPECT_STREQ(result_.backend, backend);
        EXPECT_THAT(result_.reason, HasSubstr("chosen by name"));
      }
      EXPECT_STRNE(result_.kernel, "");
    }
  }
}

// dL/dbias through the C API, against the reference's (highway by auto).
TEST_F(CApiBackwardTest, WritesTheBiasGradientWhenAsked) {
  AttentionProblem p = GqaCausal(Layout::kBHTD);
  p.additive_bias = true;
  absl::StatusOr<ProblemData> data = ProblemData::Random(p, 21);
  ASSERT_TRUE(data.ok()) << data.status();
  const attnkit_problem cp = ProblemToC(p);
  const attnkit_args ca = ArgsToC(data->args());
  ASSERT_EQ(attnkit_run(ctx_, nullptr, &cp, &ca, nullptr, err_, sizeof(err_)), ATTNKIT_OK) << err_;
  absl::StatusOr<GradData> grads = GradData::Random(p, 22, /*with_dbias=*/true);
  ASSERT_TRUE(grads.ok()) << grads.status();
  const attnkit_grads cg = GradsToC(grads->args());
  ASSERT_EQ(attnkit_backward(ctx_, nullptr, &cp, &ca, &cg, nullptr, err_, sizeof(err_)), ATTNKIT_OK)
      << err_;
  const Comparison c = CompareGradients(
      p, grads->args(), ComputeReferenceBackward(p, data->args(), grads->d_o.view()));
  EXPECT_TRUE(c.ok()) << c.first_failure;
}

TEST_F(CApiBackwardTest, BadCallsAreErrorsThatSayWhy) {
  AttentionProblem p = GqaCausal(Layout::kBHTD);
  absl::StatusOr<ProblemData> data = ProblemData::Random(p, 31);
  ASSERT_TRUE(data.ok()) << data.status();
  attnkit_problem cp = ProblemToC(p);
  const attnkit_args ca = ArgsToC(data->args());
  ASSERT_EQ(attnkit_run(ctx_, "auto", &cp, &ca, nullptr, err_, sizeof(err_)), ATTNKIT_OK) << err_;
  absl::StatusOr<GradData> grads = GradData::Random(p, 32, /*with_dbias=*/false);
  ASSERT_TRUE(grads.ok()) << grads.status();
  attnkit_grads cg = GradsToC(grads->args());

  // dO missing, by name and by auto.
  attnkit_grads no_do = cg;
  no_do.d_o.data = nullptr;
  for (const char* backend : {"auto", "highway"}) {
    EXPECT_EQ(attnkit_backward(ctx_, backend, &cp, &ca, &no_do, nullptr, err_, sizeof(err_)),
              ATTNKIT_INVALID_ARGUMENT);
    EXPECT_THAT(err_, HasSubstr("d_o is missing"));
  }
  // A caller built before dsinks (0.28): struct_size ends at dbias, and
  // whatever follows in its memory is never read as dsinks.
  {
    std::vector<unsigned char> memory(sizeof(attnkit_grads), 0xAB);  // garbage past dbias
    const size_t old_size = offsetof(attnkit_grads, dbias) + sizeof(attnkit_tensor);
    std::memcpy(memory.data(), &cg, old_size);
    auto* old = reinterpret_cast<attnkit_grads*>(memory.data());
    old->struct_size = static_cast<uint32_t>(old_size);
    EXPECT_EQ(attnkit_backward(ctx_, "auto", &cp, &ca, old, nullptr, err_, sizeof(err_)),
              ATTNKIT_OK)
        << err_;
  }
  // A gradient whose shape differs from its input's.
  attnkit_grads bad_dk = cg;
  bad_dk.dk.shape[2] = 12;
  EXPECT_EQ(attnkit_backward(ctx_, "auto", &cp, &ca, &bad_dk, nullptr, err_, sizeof(err_)),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(err_, HasSubstr("dk has shape"));
  // dbias without additive_bias.
  absl::StatusOr<Tensor> dbias = Tensor::Contiguous(DType::kF32, {2, 4, 9, 13});
  ASSERT_TRUE(dbias.ok());
  attnkit_grads with_dbias = cg;
  with_dbias.dbias = TensorToC(dbias->view());
  EXPECT_EQ(attnkit_backward(ctx_, "auto", &cp, &ca, &with_dbias, nullptr, err_, sizeof(err_)),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(err_, HasSubstr("additive_bias off"));
  // The forward did not keep its lse.
  attnkit_problem no_lse = cp;
  no_lse.return_lse = 0;
  attnkit_args ca_no_lse = ca;
  ca_no_lse.lse.data = nullptr;
  EXPECT_EQ(attnkit_backward(ctx_, "auto", &no_lse, &ca_no_lse, &cg, nullptr, err_, sizeof(err_)),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(err_, HasSubstr("return_lse must be true"));
  // Struct sizes and NULLs name the struct.
  attnkit_grads small = cg;
  small.struct_size = 8;
  EXPECT_EQ(attnkit_backward(ctx_, "auto", &cp, &ca, &small, nullptr, err_, sizeof(err_)),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(err_, HasSubstr("attnkit_grads.struct_size (8)"));
  EXPECT_EQ(attnkit_backward(ctx_, "auto", &cp, &ca, nullptr, nullptr, err_, sizeof(err_)),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(err_, HasSubstr("grads is NULL"));
  EXPECT_EQ(attnkit_backward(nullptr, "auto", &cp, &ca, &cg, nullptr, err_, sizeof(err_)),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(err_, HasSubstr("ctx is NULL"));
  attnkit_run_result short_result;
  short_result.struct_size = 4;
  EXPECT_EQ(attnkit_backward(ctx_, "auto", &cp, &ca, &cg, &short_result, err_, sizeof(err_)),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(err_, HasSubstr("attnkit_run_result.struct_size (4)"));
  EXPECT_EQ(attnkit_backward(ctx_, "nope", &cp, &ca, &cg, nullptr, err_, sizeof(err_)),
            ATTNKIT_NOT_FOUND);
  EXPECT_THAT(err_, HasSubstr("nope"));
  EXPECT_EQ(attnkit_struct_size("attnkit_grads"), sizeof(attnkit_grads));
}

// Paged K/V has no backward on any backend: UNIMPLEMENTED naming paged K/V,
// by auto (which lists what it passed over) and by name.
TEST_F(CApiBackwardTest, PagedProblemsHaveNoBackward) {
  AttentionProblem p = GqaCausal(Layout::kBHTD);
  p.kv_len = 20;
  p.page_size = 16;
  p.num_pages = 4;
  absl::StatusOr<ProblemData> data = ProblemData::Random(p, 41);
  ASSERT_TRUE(data.ok()) << data.status();
  const attnkit_problem cp = ProblemToC(p);
  const attnkit_args ca = ArgsToC(data->args());
  const AttentionArgs a = data->args();
  // Gradient buffers shaped like q and like the K/V pools.
  auto like = [](const TensorView& t) {
    return Tensor::Contiguous(t.dtype,
                              std::vector<int64_t>(t.shape.begin(), t.shape.begin() + t.rank));
  };
  absl::StatusOr<Tensor> d_o = like(a.o), dq = like(a.q), dk = like(a.k), dv = like(a.v);
  ASSERT_TRUE(d_o.ok() && dq.ok() && dk.ok() && dv.ok());
  GradArgs g;
  g.d_o = d_o->view();
  g.dq = dq->view();
  g.dk = dk->view();
  g.dv = dv->view();
  const attnkit_grads cg = GradsToC(g);
  EXPECT_EQ(attnkit_backward(ctx_, "auto", &cp, &ca, &cg, nullptr, err_, sizeof(err_)),
            ATTNKIT_UNIMPLEMENTED);
  EXPECT_THAT(err_, HasSubstr("no registered host-memory backend supports the backward"));
  EXPECT_THAT(err_, HasSubstr("paged K/V"));
  EXPECT_EQ(attnkit_backward(ctx_, "highway", &cp, &ca, &cg, nullptr, err_, sizeof(err_)),
            ATTNKIT_UNIMPLEMENTED);
  EXPECT_THAT(err_, HasSubstr("backend 'highway' cannot run the backward"));
  EXPECT_THAT(err_, HasSubstr("paged K/V"));
}

}  // namespace
}  // namespace attnkit
