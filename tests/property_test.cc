// Properties from the standard explanations of attention, each checked on
// every registered backend that supports the case.
#include <cmath>
#include <limits>
#include <vector>

#include "backends/builtin.h"
#include "gtest/gtest.h"
#include "harness/checked_run.h"
#include "harness/execute.h"
#include "harness/poison_blocked.h"
#include "harness/problem_data.h"
#include "oracle/compare.h"
#include "oracle/reference.h"
#include "tests/backend_test_env.h"
#include "tests/highway_target_backends.h"

namespace attnkit {
namespace {

using testing_env::Outcome;

class PropertyTest : public testing_env::BackendParamTest<std::string> {
 protected:
  Backend* backend() {
    auto b = GlobalRegistry().Find(GetParam());
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? *b : nullptr;
  }
  // True when the backend runs p; otherwise records the skip reason.
  bool Runs(const AttentionProblem& p) {
    return testing_env::RunsOrRecordsSkip(GetParam(), p, &skip_reason_);
  }
  void Run(const AttentionProblem& p, const ProblemData& data) {
    PoisonOutputs(data);
    RunInfo info;
    const absl::Status s = RunOnBackend(backend(), p, data, &info);
    ASSERT_TRUE(s.ok()) << s;
  }
  std::string skip_reason_;
};

float At(const Tensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3 = 0) {
  return t.view().LoadF32(t.view().Offset(i0, i1, i2, i3));
}

// Per-head loop == batched call, on the token-major layout. A backend that
// reshapes [B, T, H, d] memory to [B, H, T, d] instead of using the strides
// fails this; the last block proves such a bug would be visible.
TEST_P(PropertyTest, PerHeadLoopEqualsBatchedCall) {
  AttentionProblem p = BasicProblem(2, 4, 2, 9, 9, 16);
  p.mask = MaskKind::kCausal;
  p.layout = Layout::kBTHD;
  if (!Runs(p)) GTEST_SKIP() << skip_reason_;
  auto batched = ProblemData::Random(p, 11);
  ASSERT_TRUE(batched.ok());
  Run(p, *batched);

  AttentionProblem one = BasicProblem(1, 1, 1, p.q_len, p.kv_len, p.head_dim);
  one.mask = MaskKind::kCausal;
  ASSERT_TRUE(Runs(one)) << skip_reason_;
  double max_diff = 0, reshape_diff = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.num_heads; ++h) {
      auto head = ProblemData::Allocate(one);
      ASSERT_TRUE(head.ok());
      const int64_t g = p.KvHead(h);
      for (int64_t t = 0; t < p.q_len; ++t) {
        for (int64_t c = 0; c < p.head_dim; ++c) {
          // Explicit transpose: token t of head h.
          StoreFromF32(head->q.data(), DType::kF32, t * p.head_dim + c, At(batched->q, b, h, t, c));
          StoreFromF32(head->k.data(), DType::kF32, t * p.head_dim + c, At(batched->k, b, g, t, c));
          StoreFromF32(head->v.data(), DType::kF32, t * p.head_dim + c, At(batched->v, b, g, t, c));
        }
      }
      Run(one, *head);
      for (int64_t t = 0; t < p.q_len; ++t) {
        for (int64_t c = 0; c < p.head_dim; ++c) {
          const double want = At(head->o, 0, 0, t, c);
          max_diff = std::max(max_diff, std::fabs(At(batched->o, b, h, t, c) - want));
          // The reshape bug reads the same memory as if it were [B, H, T, d].
          const TensorView wrong = AttentionView(batched->o.data(), DType::kF32, Layout::kBHTD,
                                                 p.batch, p.num_heads, p.q_len, p.head_dim);
          reshape_diff =
              std::max(reshape_diff, std::fabs(wrong.LoadF32(wrong.Offset(b, h, t, c)) - want));
        }
      }
    }
  }
  EXPECT_LE(max_diff, 1e-5) << "batched output differs from the per-head loop";
  EXPECT_GT(reshape_diff, 0.05) << "the test could not tell a reshape from a transpose";
}

// Under a causal mask, changing token 3 leaves outputs 0..2 bit for bit.
TEST_P(PropertyTest, CausalOutputsIgnoreLaterTokens) {
  AttentionProblem p = BasicProblem(1, 2, 1, 8, 8, 32);
  p.mask = MaskKind::kCausal;
  if (!Runs(p)) GTEST_SKIP() << skip_reason_;
  auto first = ProblemData::Random(p, 21);
  auto second = ProblemData::Random(p, 21);
  ASSERT_TRUE(first.ok() && second.ok());
  for (const Tensor* t : {&second->q, &second->k, &second->v}) {
    for (int64_t h = 0; h < t->view().dim(1); ++h) {
      for (int64_t c = 0; c < p.head_dim; ++c) {
        StoreFromF32(t->data(), DType::kF32, t->view().Offset(0, h, 3, c), 0.9f - 0.05f * c);
      }
    }
  }
  Run(p, *first);
  Run(p, *second);
  double later_diff = 0;
  for (int64_t h = 0; h < p.num_heads; ++h) {
    for (int64_t i = 0; i < p.q_len; ++i) {
      for (int64_t c = 0; c < p.head_dim; ++c) {
        const float a = At(first->o, 0, h, i, c), b = At(second->o, 0, h, i, c);
        if (i < 3) {
          ASSERT_EQ(a, b) << "output " << i << " changed when token 3 changed";
        } else {
          later_diff = std::max(later_diff, double(std::fabs(a - b)));
        }
      }
    }
  }
  EXPECT_GT(later_diff, 1e-3) << "token 3 did not influence outputs 3..7";
}

// Padded keys get exactly zero weight: whatever they hold (huge, NaN), the
// output is the same bits and finite.
TEST_P(PropertyTest, PaddedKeysGetZeroWeight) {
  AttentionProblem p = BasicProblem(2, 2, 2, 3, 8, 16);
  p.kv_lengths = {5, 3};
  if (!Runs(p)) GTEST_SKIP() << skip_reason_;
  auto clean = ProblemData::Random(p, 31);
  auto dirty = ProblemData::Random(p, 31);
  ASSERT_TRUE(clean.ok() && dirty.ok());
  const float poison[] = {1e30f, -1e30f, std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::infinity()};
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t g = 0; g < p.num_kv_heads; ++g) {
      for (int64_t j = p.kv_lengths[b]; j < p.kv_len; ++j) {
        for (int64_t c = 0; c < p.head_dim; ++c) {
          for (const Tensor* t : {&dirty->k, &dirty->v}) {
            StoreFromF32(t->data(), DType::kF32, t->view().Offset(b, g, j, c), poison[(j + c) % 4]);
          }
        }
      }
    }
  }
  Run(p, *clean);
  Run(p, *dirty);
  ForEachOffset(clean->o.view(), [&](int64_t off) {
    const float a = clean->o.view().LoadF32(off), b = dirty->o.view().LoadF32(off);
    ASSERT_TRUE(std::isfinite(b)) << "padding leaked into the output";
    ASSERT_EQ(a, b) << "padded keys changed the output";
  });
}

// Weights come out as the output when V is the identity: q = e0, k_j = s_j e0,
// scale 1, so the scores are s_j exactly.
struct WeightCase {
  std::vector<float> scores;
  int64_t visible;  // keys at or past this index are blocked
};

std::vector<double> Weights(PropertyTest* test, const WeightCase& wc, bool dense, bool* ran) {
  const int64_t n = static_cast<int64_t>(wc.scores.size());
  AttentionProblem p = BasicProblem(1, 1, 1, 1, n, n);
  p.scale = 1.0f;
  if (wc.visible < n) {
    if (dense)
      p.blocked_mask = true;
    else
      p.kv_lengths = {wc.visible};
  }
  *ran = false;
  if (!testing_env::CheckRunnable(*GlobalRegistry().Find(test->GetParam()).value(), p).ok()) {
    return {};
  }
  auto data = ProblemData::Allocate(p);
  EXPECT_TRUE(data.ok());
  auto* q = static_cast<float*>(data->q.data());
  auto* k = static_cast<float*>(data->k.data());
  auto* v = static_cast<float*>(data->v.data());
  q[0] = 1;
  for (int64_t j = 0; j < n; ++j) {
    k[j * n] = wc.scores[j];
    v[j * n + j] = 1;
    if (dense && j >= wc.visible) static_cast<uint8_t*>(data->blocked_mask.data())[j] = 1;
  }
  PoisonOutputs(*data);
  RunInfo info;
  const absl::Status s =
      RunOnBackend(GlobalRegistry().Find(test->GetParam()).value(), p, *data, &info);
  EXPECT_TRUE(s.ok()) << s;
  *ran = true;
  std::vector<double> w(n);
  for (int64_t j = 0; j < n; ++j) w[j] = static_cast<float*>(data->o.data())[j];
  return w;
}

TEST_P(PropertyTest, BlockedScoresGetZeroWeight) {
  int ran_count = 0;
  for (bool dense : {false, true}) {
    bool ran;
    const std::vector<double> w = Weights(this, {{1, 2, 0, 0}, 2}, dense, &ran);
    if (!ran) continue;
    ++ran_count;
    EXPECT_NEAR(w[0], 0.2689, 1e-4);
    EXPECT_NEAR(w[1], 0.7311, 1e-4);
    EXPECT_EQ(w[2], 0.0);
    EXPECT_EQ(w[3], 0.0);
  }
  if (ran_count == 0) GTEST_SKIP() << "supports neither kv_lengths nor blocked_mask";
}

TEST_P(PropertyTest, SoftmaxOfKnownScores) {
  bool ran;
  std::vector<double> w = Weights(this, {{2, 1, 0}, 3}, false, &ran);
  if (!ran) GTEST_SKIP() << "does not run a 1x3 f32 problem";
  EXPECT_NEAR(w[0], 0.6652, 1e-4);
  EXPECT_NEAR(w[1], 0.2447, 1e-4);
  EXPECT_NEAR(w[2], 0.0900, 1e-4);
  w = Weights(this, {{16, 8, 0}, 3}, false, &ran);
  EXPECT_NEAR(w[0], 1.0, 1e-3);
  EXPECT_NEAR(w[1], 3.3535e-4, 1e-7);
  EXPECT_NEAR(w[2], 1.1254e-7, 1e-9);
}

// Rows with nothing to attend to: zeros in o, -inf in lse, no NaN anywhere.
TEST_P(PropertyTest, FullyBlockedRowsGiveZeros) {
  std::vector<AttentionProblem> cases;
  AttentionProblem causal = BasicProblem(1, 2, 1, 5, 3, 16);  // rows 0, 1 see nothing
  causal.mask = MaskKind::kCausal;
  causal.alignment = Alignment::kBottomRight;
  causal.return_lse = true;
  cases.push_back(causal);
  AttentionProblem empty = BasicProblem(2, 2, 2, 3, 4, 16);  // sequence 1 has no keys
  empty.kv_lengths = {4, 0};
  empty.return_lse = true;
  cases.push_back(empty);
  AttentionProblem dense = BasicProblem(1, 1, 1, 3, 4, 16);  // row 1 fully blocked below
  dense.blocked_mask = true;
  dense.return_lse = true;
  cases.push_back(dense);
  int ran = 0;
  for (const AttentionProblem& p : cases) {
    if (!Runs(p)) continue;
    ++ran;
    auto data = ProblemData::Random(p, 41);
    ASSERT_TRUE(data.ok());
    if (p.blocked_mask) {
      auto* m = static_cast<uint8_t*>(data->blocked_mask.data());
      for (int64_t j = 0; j < p.kv_len; ++j) m[1 * p.kv_len + j] = 1;
    }
    Run(p, *data);
    for (int64_t b = 0; b < p.batch; ++b) {
      for (int64_t h = 0; h < p.num_heads; ++h) {
        for (int64_t i = 0; i < p.q_len; ++i) {
          const bool blocked =
              VisibleKeys(p.mask_params(), i, p.KvLength(b)).empty() || (p.blocked_mask && i == 1);
          const float lse =
              static_cast<float*>(data->lse.data())[(b * p.num_heads + h) * p.q_len + i];
          ASSERT_FALSE(std::isnan(lse)) << p.Id() << " row " << i;
          if (blocked) {
            EXPECT_TRUE(std::isinf(lse) && lse < 0) << p.Id() << " row " << i;
          }
          for (int64_t c = 0; c < p.head_dim; ++c) {
            const float o = At(data->o, b, h, i, c);
            ASSERT_TRUE(std::isfinite(o)) << p.Id() << " row " << i;
            if (blocked) {
              ASSERT_EQ(o, 0.0f) << p.Id() << " row " << i;
            }
          }
        }
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << skip_reason_;
}

// A NaN or Inf in what a row reads (its q row, the k or v row of a key it
// sees, the bias of a pair it sees) makes that row's output and LSE NaN; no
// other row changes, and a bias of -inf blocks its pair (oracle/reference.h).
// Each case places a few NaN/+-Inf values at random elements of Q, K, V and
// the bias and compares every row with the reference through the oracle,
// which requires NaN exactly where the reference gives NaN. The cases cover
// each kernel path: prefill tiles cut by the causal diagonal (a V row seen by
// some rows of a tile and not others), decode read in place (f32, bf16 as
// pairs, f16), split-K merges, several query positions per decode tile,
// padding, windows, the dense mask, bias with and without softcap, and
// FAST bf16 prefill (V as prepared pairs).
TEST_P(PropertyTest, NonFiniteInputsMakeExactlyTheRowsThatReadThemNaN) {
  std::vector<AttentionProblem> cases;
  auto add = [&cases](AttentionProblem p, const std::string& name) {
    p.name = name;
    p.return_lse = true;
    cases.push_back(p);
  };
  AttentionProblem p = BasicProblem(1, 2, 2, 70, 70, 32);
  p.mask = MaskKind::kCausal;
  add(p, "prefill_causal");
  p = BasicProblem(1, 8, 2, 1, 300, 64);  // few items: split K
  add(p, "decode_split_k");
  p = BasicProblem(2, 4, 1, 1, 90, 64);
  p.kv_dtype = DType::kBF16;
  p.kv_lengths = {90, 41};
  add(p, "decode_bf16_padded");
  p = BasicProblem(1, 8, 2, 4, 64, 32);  // 4 heads x 4 positions per tile
  p.kv_dtype = DType::kF16;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  add(p, "decode4_f16_causal_br");
  p = BasicProblem(1, 2, 1, 40, 40, 16);
  p.mask = MaskKind::kSlidingWindow;
  p.window_left = 7;
  p.window_right = 2;
  p.additive_bias = true;
  p.softcap = 5.0f;
  add(p, "window_bias_softcap");
  p = BasicProblem(1, 3, 3, 20, 33, 16);
  p.blocked_mask = true;
  p.additive_bias = true;
  p.dtype = DType::kBF16;
  p.kv_dtype = DType::kBF16;
  add(p, "dense_mask_bias_bf16");
  // FAST all-bf16 prefill over several query tiles: V read as pairs
  // prepared once per call, a V row with a NaN or Inf found in them.
  p = BasicProblem(1, 2, 1, 120, 120, 64);
  p.mask = MaskKind::kCausal;
  p.dtype = DType::kBF16;
  p.kv_dtype = DType::kBF16;
  p.compute = ComputeMode::kFast;
  add(p, "prefill_bf16_fast_causal");
  int ran = 0;
  int64_t poisoned_rows = 0, clean_rows = 0;
  for (const AttentionProblem& c : cases) {
    if (!Runs(c)) continue;
    ++ran;
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      auto data = ProblemData::Random(c, seed);
      ASSERT_TRUE(data.ok()) << data.status();
      PoisonRandomInputs(c, data->args(), 3, seed * 101);
      // Twice, the second time from a finite fill: a row that must be NaN
      // passes unwritten from NaN poison alone (harness/checked_run.h).
      const CheckedRun run = RunAndCompare(backend(), c, *data, ComputeReference(c, data->args()));
      ASSERT_TRUE(run.run.ok()) << run.run;
      const Comparison& cmp = run.comparison;
      EXPECT_TRUE(cmp.ok()) << c.name << " seed " << seed << ": " << cmp.first_failure;
      poisoned_rows += cmp.poisoned_rows;
      clean_rows += c.batch * c.num_heads * c.q_len - cmp.poisoned_rows;
    }
  }
  if (ran == 0) GTEST_SKIP() << skip_reason_;
  // Not vacuous: the poison reached rows, and left others alone.
  EXPECT_GT(poisoned_rows, 20);
  EXPECT_GT(clean_rows, 20);
}

// Every backend, and highway once more on each other Highway target.
std::vector<std::string> BackendsAndHighwayTargets() {
  testing_env::ReducedGridBackends();  // registers them
  return testing_env::BackendNames();
}

INSTANTIATE_TEST_SUITE_P(AllBackends, PropertyTest,
                         ::testing::ValuesIn(BackendsAndHighwayTargets()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return testing_env::SafeName(info.param);
                         });

}  // namespace
}  // namespace attnkit
