// The Highway backward pass against the fp64 reference (oracle/compare_grad.h)
// under every compiled Highway target this CPU supports, on a grid of masks,
// padding, per-pair inputs, group sizes, layouts, dtypes and odd sizes; and
// its determinism (two calls, and 1 vs 2 threads).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/highway/highway_backend.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "harness/grad_data.h"
#include "harness/problem_data.h"
#include "hwy/targets.h"
#include "hwy/tests/hwy_gtest.h"
#include "oracle/compare_grad.h"
#include "oracle/reference_backward.h"

namespace attnkit {
namespace {

AttentionProblem Problem(int64_t b, int64_t h, int64_t g, int64_t tq, int64_t tk, int64_t d) {
  AttentionProblem p = BasicProblem(b, h, g, tq, tk, d);
  p.return_lse = true;
  return p;
}

// The grid: every feature Caps().backward claims, with odd sizes so that
// query tiles, key blocks and the head dim all have remainders.
std::vector<AttentionProblem> BackwardGrid() {
  std::vector<AttentionProblem> grid;
  auto add = [&grid](AttentionProblem p, const std::string& name) {
    p.name = name;
    grid.push_back(p);
  };
  add(Problem(1, 2, 2, 37, 101, 80), "mha_d80_q37_k101");
  add(Problem(1, 3, 3, 9, 20, 7), "mha_d7");
  add(Problem(2, 6, 2, 70, 130, 32), "gqa_g3");
  {  // MQA with >= 8 key blocks: dQ partials over key chunks, merged.
    AttentionProblem p = Problem(1, 2, 1, 520, 520, 16);
    p.mask = MaskKind::kCausal;
    add(p, "mqa_chunked_causal_tl");
    p = Problem(1, 4, 1, 150, 600, 24);
    p.mask = MaskKind::kSlidingWindow;
    p.window_left = 100;
    p.window_right = 20;
    p.alignment = Alignment::kBottomRight;
    add(p, "mqa_chunked_window_br");
  }
  for (Alignment al : {Alignment::kTopLeft, Alignment::kBottomRight}) {
    for (auto qk : {std::pair<int64_t, int64_t>{67, 67}, {19, 150}, {150, 19}}) {
      AttentionProblem p = Problem(1, 2, 1, qk.first, qk.second, 24);
      p.mask = MaskKind::kCausal;
      p.alignment = al;
      add(p, absl::StrCat("causal_", AlignmentName(al), "_", qk.first, "x", qk.second));
      p.mask = MaskKind::kSlidingWindow;
      p.window_left = 9;
      p.window_right = 3;
      add(p, absl::StrCat("window_", AlignmentName(al), "_", qk.first, "x", qk.second));
    }
  }
  {
    AttentionProblem p = Problem(1, 2, 2, 200, 200, 32);  // window over several blocks
    p.mask = MaskKind::kSlidingWindow;
    p.window_left = 70;
    p.window_right = 0;
    p.alignment = Alignment::kBottomRight;
    add(p, "window_70_0_br");
  }
  {  // Padding incl. kv_length 0 and causal rows that see nothing.
    AttentionProblem p = Problem(3, 4, 2, 21, 90, 16);
    p.kv_lengths = {90, 0, 13};
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kBottomRight;
    add(p, "kv_lengths_causal_br");
  }
  {  // Dense mask (a fully blocked row appears: see BlockWholeRow) + bias + softcap, BTHD.
    AttentionProblem p = Problem(2, 6, 2, 17, 77, 40);
    p.blocked_mask = p.additive_bias = true;
    p.softcap = 5.0f;
    p.layout = Layout::kBTHD;
    add(p, "mask_bias_softcap_bthd");
  }
  {
    AttentionProblem p = Problem(1, 4, 2, 65, 65, 64);
    p.softcap = 2.0f;
    p.scale = 0.3f;
    p.mask = MaskKind::kCausal;
    add(p, "softcap_causal");
  }
  {
    AttentionProblem p = Problem(2, 4, 4, 33, 70, 48);
    p.additive_bias = true;
    p.kv_lengths = {70, 41};
    add(p, "bias_kv_lengths");
  }
  for (DType dt : {DType::kBF16, DType::kF16}) {
    AttentionProblem p = Problem(2, 8, 2, 45, 71, 64);
    p.dtype = p.kv_dtype = dt;
    p.layout = Layout::kBTHD;
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kBottomRight;
    add(p, absl::StrCat("gqa_causal_bthd_", DTypeName(dt)));
  }
  {
    AttentionProblem p = Problem(1, 4, 2, 30, 50, 32);
    p.dtype = DType::kBF16;
    p.kv_dtype = DType::kF32;
    add(p, "mixed_bf16_f32");
  }
  return grid;
}

// Inputs and gradients for one call: the problem's random data, o and lse
// from the backend's own forward, dO from seed 2.
struct Case {
  ProblemData data;
  GradData grads;
};

absl::StatusOr<Case> MakeCase(Backend* backend, const AttentionProblem& p) {
  ATTNKIT_ASSIGN_OR_RETURN(ProblemData data, ProblemData::Random(p, 1));
  if (p.blocked_mask) {  // block every key of row (b 0, h 0, i 1): a row that sees nothing
    const TensorView m = data.blocked_mask.view();
    for (int64_t j = 0; j < p.kv_len; ++j) {
      static_cast<uint8_t*>(m.data)[m.Offset(0, 0, 1, j)] = 1;
    }
  }
  ATTNKIT_RETURN_IF_ERROR(backend->Forward(p, data.args()));
  ATTNKIT_ASSIGN_OR_RETURN(GradData grads, GradData::Random(p, 2, p.additive_bias));
  return Case{std::move(data), std::move(grads)};
}

// All gradient bytes, for bitwise comparisons.
std::vector<uint8_t> GradBytes(const AttentionProblem& p, const GradData& g) {
  std::vector<uint8_t> out;
  auto append = [&out](const Tensor& t) {
    if (t.data() == nullptr) return;
    const TensorView v = t.view();
    const size_t bytes = static_cast<size_t>(v.SpanElements()) * DTypeSize(v.dtype);
    const uint8_t* data = static_cast<const uint8_t*>(t.data());
    out.insert(out.end(), data, data + bytes);
  };
  append(g.dq);
  append(g.dk);
  append(g.dv);
  if (p.additive_bias) append(g.dbias);
  return out;
}

// Fills every gradient with NaN so that an element never written fails.
void PoisonGrads(const GradData& g) {
  for (const Tensor* t : {&g.dq, &g.dk, &g.dv, &g.dbias}) {
    if (t->data() == nullptr) continue;
    ForEachOffset(t->view(), [&](int64_t off) {
      StoreFromF32(t->view().data, t->view().dtype, off, std::nanf(""));
    });
  }
}

class BackwardTargetTest : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(BackwardTargetTest);

// Every grid problem under this target against the fp64 reference.
TEST_P(BackwardTargetTest, GridMatchesReference) {
  // No forced target: dispatch follows SetSupportedTargetsForTest(GetParam()).
  static Backend* backend = MakeHighwayBackend({/*num_threads=*/2}).release();
  const std::string want = std::string("flash-bwd/") + hwy::TargetName(GetParam()) + " ";
  for (const AttentionProblem& p : BackwardGrid()) {
    SCOPED_TRACE(p.name);
    ASSERT_TRUE(backend->SupportsBackward(p).ok()) << backend->SupportsBackward(p);
    absl::StatusOr<Case> c = MakeCase(backend, p);
    ASSERT_TRUE(c.ok()) << c.status();
    PoisonGrads(c->grads);
    RunInfo info;
    const absl::Status s = backend->Backward(p, c->data.args(), c->grads.args(), &info);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(info.kernel.rfind(want, 0), 0u) << info.kernel << " wanted " << want;
    if (p.name.rfind("mqa_chunked", 0) == 0) {
      EXPECT_EQ(info.kernel.find(" chunks=1 "), std::string::npos) << info.kernel;
    }
    const ReferenceGradients ref = ComputeReferenceBackward(p, c->data.args(), c->grads.d_o.view());
    const Comparison cmp = CompareGradients(p, c->grads.args(), ref);
    EXPECT_TRUE(cmp.ok()) << info.kernel << ": " << cmp.first_failure << " (" << cmp.mismatches
                          << " of " << cmp.checked << ", max rel " << cmp.max_rel_err << ")";
  }
}

// Two calls give the same bits; so do 1 and 2 threads (the plan depends on
// the shape only), including the chunked-dQ (MQA) path.
TEST_P(BackwardTargetTest, DeterministicAcrossCallsAndThreads) {
  static Backend* one = MakeHighwayBackend({/*num_threads=*/1}).release();
  static Backend* two = MakeHighwayBackend({/*num_threads=*/2}).release();
  std::vector<AttentionProblem> problems;
  {
    AttentionProblem p = Problem(1, 4, 1, 150, 600, 64);  // chunks > 1
    p.mask = MaskKind::kCausal;
    problems.push_back(p);
  }
  {
    AttentionProblem p = Problem(4, 8, 4, 70, 70, 32);  // chunks == 1
    p.additive_bias = true;
    problems.push_back(p);
  }
  for (const AttentionProblem& p : problems) {
    absl::StatusOr<Case> c = MakeCase(two, p);
    ASSERT_TRUE(c.ok()) << c.status();
    std::vector<std::vector<uint8_t>> runs;
    for (Backend* backend : {two, two, one}) {
      PoisonGrads(c->grads);
      const absl::Status s = backend->Backward(p, c->data.args(), c->grads.args());
      ASSERT_TRUE(s.ok()) << s;
      runs.push_back(GradBytes(p, c->grads));
    }
    EXPECT_TRUE(runs[0] == runs[1]) << "two calls with 2 threads differ";
    EXPECT_TRUE(runs[0] == runs[2]) << "1 and 2 threads differ";
  }
}

// What the backward refuses, with a reason.
TEST(BackwardCapsTest, RefusesWhatItDoesNotBuild) {
  std::unique_ptr<Backend> backend = MakeHighwayBackend({1});
  AttentionProblem p = Problem(1, 2, 2, 8, 8, 16);
  EXPECT_TRUE(backend->SupportsBackward(p).ok());
  AttentionProblem int8 = p;
  int8.kv_dtype = DType::kI8;
  EXPECT_EQ(backend->SupportsBackward(int8).code(), absl::StatusCode::kUnimplemented);
  AttentionProblem paged = p;
  paged.page_size = 16;
  paged.num_pages = 1;
  EXPECT_EQ(backend->SupportsBackward(paged).code(), absl::StatusCode::kUnimplemented);
  AttentionProblem ragged = p;
  ragged.q_lengths = {8};
  ragged.kv_lengths = {8};
  EXPECT_EQ(backend->SupportsBackward(ragged).code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace attnkit
