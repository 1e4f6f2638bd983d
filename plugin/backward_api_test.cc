// The backward pass's interface (core/backend.h): ValidateGradArgs' rules,
// CheckBackwardCapabilities, and Backward across the plugin C ABI both ways,
// including a plugin built before it (smaller structs, no backward entry).
#include <cstddef>
#include <cstring>
#include <memory>

#include "core/backend.h"
#include "core/full_capabilities.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "harness/grad_data.h"
#include "harness/problem_data.h"
#include "plugin/backend_export.h"
#include "plugin/c_abi.h"
#include "plugin/plugin_table_backend.h"

namespace attnkit {
namespace {

using ::testing::HasSubstr;

AttentionProblem GqaCausal() {
  AttentionProblem p = BasicProblem(2, 4, 2, 5, 7, 8);
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.return_lse = true;
  return p;
}

// A backend whose Backward records what reached it and writes dq = 1.
class RecordingBackend : public Backend {
 public:
  std::string Name() const override { return "recording"; }
  std::string Description() const override { return "test double"; }
  Capabilities Caps() const override {
    Capabilities c = FullCapabilities();
    c.backward = FullBackwardCapabilities();
    c.backward.softcap = false;
    return c;
  }
  int backward_calls = 0;
  int64_t seen_d_o_rank = 0;
  bool seen_dbias = false;

 protected:
  absl::Status ForwardImpl(const AttentionProblem&, const AttentionArgs&, RunInfo*) override {
    return absl::OkStatus();
  }
  absl::Status BackwardImpl(const AttentionProblem& p, const AttentionArgs& args,
                            const GradArgs& grads, RunInfo* info) override {
    (void)args;
    ++backward_calls;
    seen_d_o_rank = grads.d_o.rank;
    seen_dbias = !grads.dbias.empty();
    for (int64_t b = 0; b < p.batch; ++b) {
      for (int64_t h = 0; h < p.num_heads; ++h) {
        for (int64_t i = 0; i < p.q_len; ++i) {
          for (int64_t c = 0; c < p.head_dim; ++c) {
            StoreFromF32(grads.dq.data, grads.dq.dtype, grads.dq.Offset(b, h, i, c), 1.0f);
          }
        }
      }
    }
    info->kernel = "recorded";
    return absl::OkStatus();
  }
};

// A backend with the forward only.
class ForwardOnlyBackend : public RecordingBackend {
 public:
  Capabilities Caps() const override { return FullCapabilities(); }
};

TEST(GradArgsTest, ValidCallPasses) {
  const AttentionProblem p = GqaCausal();
  auto data = ProblemData::Random(p, 1);
  auto grads = GradData::Random(p, 1, /*with_dbias=*/false);
  ASSERT_TRUE(data.ok() && grads.ok());
  EXPECT_TRUE(ValidateGradArgs(p, data->args(), grads->args()).ok());
}

TEST(GradArgsTest, RulesNameTheTensor) {
  AttentionProblem p = GqaCausal();
  auto data = ProblemData::Random(p, 1);
  auto grads = GradData::Random(p, 1, false);
  ASSERT_TRUE(data.ok() && grads.ok());
  const AttentionArgs a = data->args();

  GradArgs g = grads->args();
  g.dk = g.dq;  // wrong shape: [B, H, Tq, d] where [B, G, Tk, d] is needed
  EXPECT_THAT(ValidateGradArgs(p, a, g).message(), HasSubstr("dk has shape"));

  g = grads->args();
  g.d_o = TensorView{};
  EXPECT_THAT(ValidateGradArgs(p, a, g).message(), HasSubstr("d_o is missing"));

  g = grads->args();
  g.dq = a.q;  // writing the gradient over an input
  EXPECT_THAT(ValidateGradArgs(p, a, g).message(), HasSubstr("overlaps an input"));

  g = grads->args();
  g.dv = g.dk;
  EXPECT_THAT(ValidateGradArgs(p, a, g).message(), HasSubstr("overlap"));

  g = grads->args();
  g.dbias = g.dq;
  EXPECT_THAT(ValidateGradArgs(p, a, g).message(), HasSubstr("additive_bias off"));

  AttentionProblem no_lse = p;
  no_lse.return_lse = false;
  AttentionArgs a_no_lse = a;
  a_no_lse.lse = TensorView{};
  EXPECT_THAT(ValidateGradArgs(no_lse, a_no_lse, grads->args()).message(),
              HasSubstr("return_lse must be true"));
}

TEST(GradArgsTest, BroadcastDbiasIsRefused) {
  AttentionProblem p = GqaCausal();
  p.additive_bias = true;
  auto data = ProblemData::Random(p, 1);
  auto grads = GradData::Random(p, 1, /*with_dbias=*/true);
  ASSERT_TRUE(data.ok() && grads.ok());
  EXPECT_TRUE(ValidateGradArgs(p, data->args(), grads->args()).ok());
  GradArgs g = grads->args();
  g.dbias.strides[1] = 0;  // one head's gradient for all heads
  EXPECT_THAT(ValidateGradArgs(p, data->args(), g).message(), HasSubstr("stride 0 in dim 1"));
}

TEST(GradDataTest, RefusesProblemsWithoutABackward) {
  AttentionProblem p = GqaCausal();
  p.return_lse = false;
  EXPECT_THAT(GradData::Random(p, 1, false).status().message(), HasSubstr("return_lse"));
  p.return_lse = true;
  EXPECT_THAT(GradData::Random(p, 1, true).status().message(), HasSubstr("additive_bias"));
  p.memory_budget_bytes = *ProblemBytes(p) + 10;
  EXPECT_EQ(GradData::Random(p, 1, false).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(BackwardCapabilitiesTest, RefusalsNameTheFeature) {
  Capabilities c = FullCapabilities();
  AttentionProblem p = GqaCausal();
  EXPECT_THAT(CheckBackwardCapabilities(c, p).message(),
              HasSubstr("backward pass is not supported"));
  c.backward = FullBackwardCapabilities();
  EXPECT_TRUE(CheckBackwardCapabilities(c, p).ok());
  c.backward.masks = {MaskKind::kNone};
  EXPECT_THAT(CheckBackwardCapabilities(c, p).message(), HasSubstr("backward with mask causal"));
  c.backward = FullBackwardCapabilities();
  p.softcap = 30;
  c.backward.softcap = false;
  EXPECT_THAT(CheckBackwardCapabilities(c, p).message(), HasSubstr("backward with softcap"));
  p.softcap = 0;
  p.kv_dtype = DType::kI8;
  EXPECT_THAT(CheckBackwardCapabilities(c, p).message(), HasSubstr("kv_dtype i8"));
  p.kv_dtype = DType::kF32;
  p.page_size = 16;
  p.num_pages = 4;
  EXPECT_THAT(CheckBackwardCapabilities(c, p).message(), HasSubstr("paged K/V"));
}

TEST(BackwardAbiTest, ProblemCarriesBackward) {
  AttentionProblem p = GqaCausal();
  p.backward = true;
  auto back = ProblemFromC(ProblemToC(p));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->backward);
  attnkit_problem older = ProblemToC(p);
  older.struct_size = offsetof(attnkit_problem, backward);  // a 0.25 caller
  back = ProblemFromC(attnkit_sdk::internal::CopyIn(&older));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->backward);
}

TEST(BackwardAbiTest, CapsRoundTrip) {
  Capabilities c = FullCapabilities();
  c.backward = FullBackwardCapabilities();
  c.backward.kv_dtypes = {DType::kBF16};
  c.backward.softcap = false;
  const Capabilities back = CapsFromC(CapsToC(c));
  EXPECT_TRUE(back.backward.supported);
  EXPECT_EQ(back.backward.kv_dtypes, c.backward.kv_dtypes);
  EXPECT_EQ(back.backward.masks, c.backward.masks);
  EXPECT_FALSE(back.backward.softcap);
  EXPECT_TRUE(back.backward.bias_grad);
  EXPECT_EQ(back.Describe(), c.Describe());
}

// A plugin built before 0.26 fills caps only up to `ragged`: it claims no
// backward, and the host says so.
TEST(BackwardAbiTest, OlderPluginCapsClaimNoBackward) {
  Capabilities c = FullCapabilities();
  c.backward = FullBackwardCapabilities();
  attnkit_caps host;
  std::memset(&host, 0, sizeof(host));
  host.struct_size = offsetof(attnkit_caps, bwd_supported);
  attnkit_sdk::internal::CopyOut(CapsToC(c), &host);
  EXPECT_FALSE(CapsFromC(host).backward.supported);
}

TEST(BackwardAbiTest, BackwardCrossesTheAbi) {
  auto inner = std::make_unique<RecordingBackend>();
  RecordingBackend* recording = inner.get();
  std::unique_ptr<Backend> backend = AdoptSdkBackend(ExportBackend(std::move(inner)));
  AttentionProblem p = GqaCausal();
  p.additive_bias = true;
  auto data = ProblemData::Random(p, 2);
  auto grads = GradData::Random(p, 2, /*with_dbias=*/true);
  ASSERT_TRUE(data.ok() && grads.ok());
  RunInfo info;
  const absl::Status s = backend->Backward(p, data->args(), grads->args(), &info);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(recording->backward_calls, 1);
  EXPECT_EQ(recording->seen_d_o_rank, 4);
  EXPECT_TRUE(recording->seen_dbias);
  EXPECT_EQ(info.kernel, "recorded");
  EXPECT_EQ(grads->dq.view().LoadF32(0), 1.0f);
  // What the backend's backward capabilities leave out is refused by name,
  // before the plugin is called.
  p.softcap = 20;
  EXPECT_THAT(backend->Backward(p, data->args(), grads->args()).message(),
              HasSubstr("backward with softcap"));
  EXPECT_EQ(recording->backward_calls, 1);
}

// dBias is asked for by passing it; a backend without bias_grad refuses.
TEST(BackwardAbiTest, DbiasNeedsBiasGrad) {
  class NoDbias : public RecordingBackend {
   public:
    Capabilities Caps() const override {
      Capabilities c = RecordingBackend::Caps();
      c.backward.bias_grad = false;
      return c;
    }
  };
  std::unique_ptr<Backend> backend = AdoptSdkBackend(ExportBackend(std::make_unique<NoDbias>()));
  AttentionProblem p = GqaCausal();
  p.additive_bias = true;
  auto data = ProblemData::Random(p, 2);
  auto with = GradData::Random(p, 2, /*with_dbias=*/true);
  auto without = GradData::Random(p, 2, /*with_dbias=*/false);
  ASSERT_TRUE(data.ok() && with.ok() && without.ok());
  EXPECT_THAT(backend->Backward(p, data->args(), with->args()).message(),
              HasSubstr("dbias is not supported"));
  EXPECT_TRUE(backend->Backward(p, data->args(), without->args()).ok());
}

TEST(BackwardAbiTest, ForwardOnlyBackendRefusesWithItsName) {
  std::unique_ptr<Backend> backend =
      AdoptSdkBackend(ExportBackend(std::make_unique<ForwardOnlyBackend>()));
  const AttentionProblem p = GqaCausal();
  auto data = ProblemData::Random(p, 2);
  auto grads = GradData::Random(p, 2, false);
  ASSERT_TRUE(data.ok() && grads.ok());
  const absl::Status s = backend->Backward(p, data->args(), grads->args());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("recording cannot run the backward"));
}

}  // namespace
}  // namespace attnkit
