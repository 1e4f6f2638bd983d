// The synthetic tasks' layout, the whole model's gradients against finite
// differences of its cross-entropy, and a short training run whose loss must
// fall by a clear factor.
#include "ops/sequence_model.h"

#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends/builtin.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ops/adam.h"
#include "ops/fd_test_util.h"
#include "ops/train_task.h"

namespace attnkit {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(TrainTaskTest, CopyAndReverseLayout) {
  for (TrainTask task : {TrainTask::kCopy, TrainTask::kReverse}) {
    std::mt19937_64 rng(3);
    auto batch = MakeTaskBatch(task, 10, 3, 2, &rng);
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(batch->length, 6);
    EXPECT_EQ(batch->scored, 6);
    for (int64_t b = 0; b < 2; ++b) {
      const int32_t* t = batch->tokens.data() + b * 6;
      const int32_t* y = batch->targets.data() + b * 6;
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(t[i] >= 1 && t[i] <= 9);
      EXPECT_EQ(t[3], kSeparatorToken);
      for (int i = 0; i < 3; ++i) EXPECT_EQ(y[i], kNotScored);
      // Targets b_1 b_2 b_3; the inputs after SEP are b_1 b_2.
      const int32_t want[3] = {task == TrainTask::kCopy ? t[0] : t[2], t[1],
                               task == TrainTask::kCopy ? t[2] : t[0]};
      EXPECT_THAT(std::vector<int32_t>(y + 3, y + 6), ElementsAre(want[0], want[1], want[2]));
      EXPECT_EQ(t[4], want[0]);
      EXPECT_EQ(t[5], want[1]);
    }
  }
  EXPECT_THAT(std::string(ParseTrainTask("sort").status().message()),
              HasSubstr("task 'sort' is not one of: copy, reverse"));
  std::mt19937_64 rng(1);
  EXPECT_FALSE(MakeTaskBatch(TrainTask::kCopy, 2, 3, 1, &rng).ok());
}

SequenceModelConfig Tiny(const std::string& backend) {
  SequenceModelConfig c;
  c.vocab = 6;
  c.max_len = 6;
  c.dim = 8;
  c.heads = 2;
  c.kv_heads = 1;
  c.layers = 2;
  c.mlp_hidden = 12;
  c.backend = backend;
  c.seed = 4;
  return c;
}

// Every parameter of a 2-block model against central differences of the
// mean cross-entropy (tolerances as in attention_grad_test.cc).
TEST(SequenceModelTest, GradientsMatchFiniteDifferences) {
  auto model = SequenceModel::Create(Tiny("reference"), GlobalRegistry());
  ASSERT_TRUE(model.ok()) << model.status();
  std::mt19937_64 rng(9);
  auto batch = MakeTaskBatch(TrainTask::kReverse, 6, 3, 2, &rng);
  ASSERT_TRUE(batch.ok());
  ASSERT_TRUE((*model)->ZeroGradients().ok());
  ASSERT_TRUE((*model)->ForwardTrain(*batch).ok());
  ASSERT_TRUE((*model)->Backward().ok());
  auto params = (*model)->Parameters();
  ASSERT_TRUE(params.ok());
  int64_t n = 0;
  for (const ParamRef& p : *params) n += p.size;
  EXPECT_EQ(n, (*model)->NumParameters());
  const auto loss = [&]() { return (*model)->ForwardTrain(*batch)->loss; };
  const fd_test::FdResult r = fd_test::CheckGradients(*params, loss, 1e-2f, 1e-4, 1e-2);
  EXPECT_LE(r.worst_ratio, 1.0) << r.worst << " (" << r.checked << " checked)";
  EXPECT_GT(r.max_abs_grad, 0.01);
  std::printf("[fd] model: %d elements, worst ratio %.3f (%s)\n", int(r.checked), r.worst_ratio,
              r.worst.c_str());
  // Backward needs a forward of its own.
  auto fresh = SequenceModel::Create(Tiny("reference"), GlobalRegistry());
  EXPECT_EQ((*fresh)->Backward().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SequenceModelTest, RefusesBadConfigByName) {
  SequenceModelConfig c = Tiny("highway");
  c.dim = 9;
  EXPECT_THAT(std::string(SequenceModel::Create(c, GlobalRegistry()).status().message()),
              HasSubstr("dim (9) must be a multiple of heads (2)"));
  c = Tiny("highway");
  c.kv_heads = 3;
  EXPECT_THAT(std::string(SequenceModel::Create(c, GlobalRegistry()).status().message()),
              HasSubstr("heads (2) must be a multiple of kv_heads (3)"));
  c = Tiny("no-such-backend");
  EXPECT_FALSE(SequenceModel::Create(c, GlobalRegistry()).ok());
}

// 60 Adam steps on the copy task with the highway backend: the mean loss of
// the last 10 steps is under a third of the first 10 (ln 7 = 1.95 at chance).
TEST(SequenceModelTest, CopyTaskLossFallsOnHighway) {
  SequenceModelConfig c;
  c.vocab = 8;
  c.max_len = 8;
  c.dim = 32;
  c.heads = 4;
  c.kv_heads = 2;
  c.layers = 2;
  c.backend = "highway";
  c.seed = 1;
  auto model = SequenceModel::Create(c, GlobalRegistry());
  ASSERT_TRUE(model.ok()) << model.status();
  auto params = (*model)->Parameters();
  ASSERT_TRUE(params.ok());
  AdamOptions o;
  o.lr = 1e-2f;
  auto adam = Adam::Create(*params, o);
  ASSERT_TRUE(adam.ok());
  std::mt19937_64 rng(5);
  std::vector<double> losses;
  const auto start = std::chrono::steady_clock::now();
  for (int step = 0; step < 60; ++step) {
    auto batch = MakeTaskBatch(TrainTask::kCopy, c.vocab, 4, 16, &rng);
    ASSERT_TRUE(batch.ok());
    ASSERT_TRUE((*model)->ZeroGradients().ok());
    auto r = (*model)->ForwardTrain(*batch);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE((*model)->Backward().ok());
    adam->Step();
    losses.push_back(r->loss);
  }
  double first = 0, last = 0;
  for (int i = 0; i < 10; ++i) {
    first += losses[i] / 10;
    last += losses[50 + i] / 10;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[train] copy, highway: mean loss %.3f (steps 1-10) -> %.3f (51-60) in %.2f s\n",
              first, last, seconds);
  EXPECT_LT(last, first / 3);
  EXPECT_EQ((*model)->block(0).attention().last_backward_run().backend, "highway");
}

}  // namespace
}  // namespace attnkit
