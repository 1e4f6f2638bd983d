// Scratch memory stays under the budget however long the sequence: the plan
// for T = 16384 is checked for several shapes and budgets, and one long
// causal problem is run under a small budget and spot-checked.
#include "backends/blas/block_plan.h"

#include <cmath>
#include <vector>

#include "backends/blas/blas_backend.h"
#include "gtest/gtest.h"
#include "harness/problem_data.h"
#include "oracle/reference.h"

namespace attnkit {
namespace {

AttentionProblem LongProblem(int64_t h, int64_t g, int64_t d, MaskKind mask, DType kv) {
  AttentionProblem p;
  p.num_heads = h;
  p.num_kv_heads = g;
  p.head_dim = d;
  p.model_dim = h * d;
  p.q_len = p.kv_len = 16384;
  p.mask = mask;
  if (mask == MaskKind::kSlidingWindow) p.window_left = 1024;
  p.kv_dtype = kv;
  p.scale = 1.0f / std::sqrt(float(d));
  return p;
}

TEST(BlockPlanTest, LongSequencesStayUnderEveryBudget) {
  const std::vector<AttentionProblem> problems = {
      LongProblem(16, 16, 64, MaskKind::kNone, DType::kF32),
      LongProblem(32, 8, 128, MaskKind::kCausal, DType::kF32),
      LongProblem(64, 1, 256, MaskKind::kNone, DType::kBF16),
      LongProblem(8, 8, 1024, MaskKind::kSlidingWindow, DType::kF16),
  };
  for (size_t budget : {size_t{64} << 20, size_t{8} << 20, size_t{1} << 20}) {
    for (int workers : {1, 2, 4}) {
      for (const AttentionProblem& p : problems) {
        SCOPED_TRACE(testing::Message()
                     << p.Id() << " budget " << budget << " workers " << workers);
        blas::PlanOptions o;
        o.budget_bytes = budget;
        o.workers = workers;
        o.stage_kv = p.kv_dtype != DType::kF32;
        auto plan = blas::MakePlan(p, o);
        ASSERT_TRUE(plan.ok()) << plan.status();
        EXPECT_LE(plan->total_bytes(), budget);
        EXPECT_EQ(plan->worker_bytes, blas::WorkerBytes(plan->rows(), plan->key_chunk, p.head_dim,
                                                        p.value_dim(), o.stage_kv));
        EXPECT_GE(plan->key_chunk, 16);
      }
    }
  }
}

TEST(BlockPlanTest, DefaultBudgetKeepsWholeGroupsAndWholeKeyRange) {
  const AttentionProblem p = LongProblem(32, 8, 128, MaskKind::kCausal, DType::kF32);
  blas::PlanOptions o;
  o.workers = 2;
  auto plan = blas::MakePlan(p, o);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->head_block, 4);
  EXPECT_EQ(plan->token_block, 64);
  EXPECT_EQ(plan->key_chunk, 16384);  // 256 x 16384 floats = 16 MiB per worker
  EXPECT_EQ(plan->panel_tokens, 16);  // 64-row diagonal panels of 4 heads
  o.stack_heads = false;
  plan = blas::MakePlan(p, o);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->panel_tokens, 64);  // one head: 64-row panels are the whole block
}

TEST(BlockPlanTest, ImpossibleBudgetIsResourceExhausted) {
  const AttentionProblem p = LongProblem(1, 1, 1024, MaskKind::kNone, DType::kF16);
  blas::PlanOptions o;
  o.budget_bytes = 64 << 10;  // less than two staged [16, 1024] f32 K/V chunks
  o.stage_kv = true;
  auto plan = blas::MakePlan(p, o);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted) << plan.status();
}

// T = 16384, causal, under a 2 MiB budget: runs in key chunks and never holds
// more scratch than the budget. Rows are spot-checked against the reference
// (the whole reference would take minutes).
TEST(BlockPlanTest, LongCausalRunUnderSmallBudget) {
  AttentionProblem p = LongProblem(2, 1, 16, MaskKind::kCausal, DType::kF32);
  p.return_lse = true;
  const size_t budget = size_t{2} << 20;
  BlasOptions options;
  options.num_threads = 2;
  options.memory_budget_bytes = budget;
  BlasBackend backend(options);
  auto plan = backend.PlanFor(p);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_LT(plan->key_chunk, p.kv_len);  // the budget forces key chunking
  auto data = ProblemData::Random(p, 11);
  ASSERT_TRUE(data.ok());
  const AttentionArgs args = data->args();
  RunInfo info;
  ASSERT_TRUE(backend.Forward(p, args, &info).ok());
  EXPECT_LE(backend.workspace_bytes(), budget) << info.kernel;
  EXPECT_EQ(backend.workspace_bytes(), plan->total_bytes());

  std::vector<double> scores(static_cast<size_t>(p.kv_len)), row(16);
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{777}, int64_t{8191}, int64_t{16383}}) {
      const double lse = ReferenceRow(p, args, 0, h, i, &scores, row.data());
      for (int64_t c = 0; c < 16; ++c) {
        EXPECT_NEAR(args.o.LoadF32(args.o.Offset(0, h, i, c)), row[c], 1e-5)
            << "h " << h << " i " << i << " c " << c;
      }
      EXPECT_NEAR(static_cast<float*>(args.lse.data)[args.lse.Offset(0, h, i)], lse,
                  1e-5 * (1 + std::fabs(lse)));
    }
  }
}

}  // namespace
}  // namespace attnkit
