// `attnkit train`: bad flags are refused by name (flag, value, rule) before
// anything runs and without writing --json; a short run on highway learns
// the copy task, names the backend that ran attention both ways, and writes
// the whole loss curve.
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "backends/builtin.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/cli/commands.h"

namespace attnkit {
namespace {

using ::testing::HasSubstr;

std::string Refusal(CliOptions options, TrainOptions train) {
  std::ostringstream out;
  const absl::Status s = TrainCommand(GlobalRegistry(), options, train, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

TEST(TrainCommandTest, BadFlagsAreRefusedByName) {
  CliOptions o;
  o.layers = 2;
  o.json = ::testing::TempDir() + "/train_refused.json";
  TrainOptions t;
  t.task = "sort";
  EXPECT_THAT(Refusal(o, t), HasSubstr("--task (sort) must be copy or reverse"));
  t = TrainOptions{};
  t.steps = 0;
  EXPECT_THAT(Refusal(o, t), HasSubstr("--steps (0) must be in [1,"));
  t = TrainOptions{};
  t.vocab = 2;
  EXPECT_THAT(Refusal(o, t), HasSubstr("--vocab (2) must be in [3,"));
  t = TrainOptions{};
  t.dim = 30;
  EXPECT_THAT(Refusal(o, t), HasSubstr("--dim (30) must be a multiple of --heads (4)"));
  t = TrainOptions{};
  t.kv_heads = 3;
  EXPECT_THAT(Refusal(o, t), HasSubstr("--heads (4) must be a multiple of --kv_heads (3)"));
  t = TrainOptions{};
  t.lr = 0;
  EXPECT_THAT(Refusal(o, t), HasSubstr("--lr (0) must be in (0, 1]"));
  t.lr = NAN;
  EXPECT_THAT(Refusal(o, t), HasSubstr("--lr (nan)"));
  t = TrainOptions{};
  t.seq = 0;
  EXPECT_THAT(Refusal(o, t), HasSubstr("--seq (0) must be in [1, 1024]"));
  CliOptions bad = o;
  bad.layers = 0;
  EXPECT_THAT(Refusal(bad, TrainOptions{}), HasSubstr("--layers (0) must be in [1, 64]"));
  bad = o;
  bad.backend = "nonesuch";
  EXPECT_THAT(Refusal(bad, TrainOptions{}), HasSubstr("--backend (nonesuch)"));
  std::ifstream json(o.json);
  EXPECT_FALSE(json.good()) << "a refused run wrote " << o.json;
}

TEST(TrainCommandTest, ShortCopyRunLearnsAndWritesTheCurve) {
  CliOptions o;
  o.layers = 2;
  o.backend = "highway";
  o.seed = 3;
  o.json = ::testing::TempDir() + "/train_curve.json";
  TrainOptions t;
  t.steps = 80;
  t.seq = 4;
  t.vocab = 8;
  t.dim = 32;
  t.batch = 16;
  t.lr = 1e-2;
  std::ostringstream out;
  const absl::Status s = TrainCommand(GlobalRegistry(), o, t, out);
  ASSERT_TRUE(s.ok()) << s;
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("attention forward  highway"));
  EXPECT_THAT(text, HasSubstr("attention backward highway"));
  EXPECT_THAT(text, HasSubstr("wrote " + o.json));
  std::ifstream in(o.json);
  std::stringstream json;
  json << in.rdbuf();
  EXPECT_THAT(json.str(), HasSubstr("\"curve\""));
  EXPECT_THAT(json.str(), HasSubstr("\"step\": 80"));
  // The last loss, from "final_loss": well under chance (ln 7 = 1.95).
  const std::string key = "\"final_loss\": ";
  const size_t at = json.str().find(key);
  ASSERT_NE(at, std::string::npos);
  EXPECT_LT(std::stod(json.str().substr(at + key.size())), 0.5) << text;
}

}  // namespace
}  // namespace attnkit
