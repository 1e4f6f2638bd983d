// The blas backend against the fp64 reference over a grid of problems: odd
// sizes, head dims, GQA ratios, every mask and alignment, padding, dense
// mask, bias, softcap, LSE, dtypes, layouts, and the backend's own modes
// (small key chunks for the online softmax, OpenBLAS threading, per-head,
// thin diagonal panels).
#include "backends/blas/blas_backend.h"

#include <cblas.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/problem_data.h"
#include "core/reference.h"
#include "gtest/gtest.h"

namespace attnkit {
namespace {

enum class Mode { kDefault, kSmallChunks, kBlasThreads, kPerHead, kThinPanels };

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kSmallChunks:
      return "chunk16";
    case Mode::kBlasThreads:
      return "blasthreads";
    case Mode::kPerHead:
      return "perhead";
    case Mode::kThinPanels:
      return "panels";
    default:
      return "default";
  }
}

// One backend per mode, shared by every case (workspaces are reused).
BlasBackend& BackendFor(Mode mode) {
  static BlasBackend* backends[5] = {};
  BlasBackend*& b = backends[static_cast<int>(mode)];
  if (b == nullptr) {
    BlasOptions o;
    o.num_threads = 2;
    if (mode == Mode::kSmallChunks) {
      o.max_key_chunk = 16;
      o.target_rows = 8;
    }
    if (mode == Mode::kBlasThreads) o.threading = BlasThreading::kBlas;
    if (mode == Mode::kPerHead) o.stack_group_heads = false;
    if (mode == Mode::kThinPanels) {  // diagonal panels of 1-3 positions, chunked keys
      o.target_rows = 48;
      o.panel_rows = 6;
      o.max_key_chunk = 16;
    }
    b = new BlasBackend(o);
  }
  return *b;
}

// Error allowed for one output element: rounding of the output storage type
// plus fp32 accumulation error growing with the reduction lengths.
double Tolerance(DType out, const AttentionProblem& p, double ref) {
  const double compute = 4e-7 * std::sqrt(double(p.kv_len + p.head_dim));
  return (compute + DTypeEpsilon(out)) * (1.0 + std::fabs(ref));
}

void ExpectMatchesReference(BlasBackend& backend, const AttentionProblem& p,
                            const ProblemData& data, const AttentionArgs& args) {
  const ReferenceResult ref = ComputeReference(p, args);
  const int64_t H = p.num_heads, Tq = p.q_len, d = p.head_dim;
  int failures = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t row = (b * H + h) * Tq + i;
        const bool blocked = std::isinf(ref.lse[row]);
        for (int64_t c = 0; c < d && failures < 10; ++c) {
          const double got = args.o.LoadF32(args.o.Offset(b, h, i, c));
          const double want = ref.o[row * d + c];
          if (std::isnan(got) || (blocked && got != 0.0) ||
              std::fabs(got - want) > Tolerance(p.dtype, p, want)) {
            ++failures;
            ADD_FAILURE() << "o[" << b << "," << h << "," << i << "," << c << "] = " << got
                          << ", reference " << want;
          }
        }
        if (p.return_lse && failures < 10) {
          const double got = static_cast<const float*>(args.lse.data)[args.lse.Offset(b, h, i)];
          const double want = ref.lse[row];
          const bool ok = blocked ? (std::isinf(got) && got < 0)
                                  : std::fabs(got - want) <= Tolerance(DType::kF32, p, want);
          if (!ok) {
            ++failures;
            ADD_FAILURE() << "lse[" << b << "," << h << "," << i << "] = " << got << ", reference "
                          << want;
          }
        }
      }
    }
  }
}

struct Case {
  AttentionProblem problem;
  Mode mode;
  std::string name;
};

std::vector<Case> MakeCases() {
  struct Shape {
    int64_t q, k;
  };
  const Shape shapes[] = {{1, 1}, {2, 7}, {7, 2}, {33, 33}, {129, 33}, {33, 129}, {1, 129}};
  struct Heads {
    int64_t h, g;
  };
  // GQA ratios 1, 2, 4, 5, 8 and MQA.
  const Heads heads[] = {{2, 2}, {4, 2}, {8, 2}, {10, 2}, {16, 2}, {5, 1}};
  const int64_t dims[] = {64, 80, 1, 96, 16, 128, 7};
  struct DTypes {
    DType q, kv;
  };
  const DTypes dtypes[] = {{DType::kF32, DType::kF32},
                           {DType::kF16, DType::kF16},
                           {DType::kBF16, DType::kBF16},
                           {DType::kF32, DType::kBF16}};
  struct MaskCase {
    MaskKind kind;
    int64_t left, right;
  };
  const MaskCase masks[] = {{MaskKind::kNone, 0, 0},
                            {MaskKind::kCausal, 0, 0},
                            {MaskKind::kSlidingWindow, 5, 0},
                            {MaskKind::kSlidingWindow, 3, 2}};
  std::vector<Case> cases;
  int n = 0;
  for (const Shape& s : shapes) {
    for (const Heads& hg : heads) {
      for (const MaskCase& m : masks) {
        for (Alignment align : {Alignment::kTopLeft, Alignment::kBottomRight}) {
          if (m.kind == MaskKind::kNone && align == Alignment::kBottomRight) continue;
          AttentionProblem p;
          p.num_heads = hg.h;
          p.num_kv_heads = hg.g;
          p.q_len = s.q;
          p.kv_len = s.k;
          p.mask = m.kind;
          p.window_left = m.left;
          p.window_right = m.right;
          p.alignment = align;
          // The extras cycle with co-prime periods so that they meet each
          // other and every shape.
          p.head_dim = dims[n % 7];
          p.model_dim = p.num_heads * p.head_dim;
          p.layout = (n / 2) % 2 == 0 ? Layout::kBHTD : Layout::kBTHD;
          p.dtype = dtypes[(n / 3) % 4].q;
          p.kv_dtype = dtypes[(n / 3) % 4].kv;
          p.scale = 1.0f / std::sqrt(float(p.head_dim)) * ((n % 5 == 0) ? 3.0f : 1.0f);
          if (n % 3 == 1) {
            p.batch = 3;
            p.kv_lengths = {s.k, 0, (s.k + 1) / 2};  // full, empty, half
          } else if (n % 3 == 2) {
            p.batch = 2;
          }
          p.blocked_mask = n % 5 == 1;
          p.additive_bias = n % 7 == 3;
          p.softcap = n % 4 == 2 ? 2.5f : 0.0f;
          p.return_lse = n % 11 != 10;
          const Mode mode = static_cast<Mode>((n / 5) % 5);
          cases.push_back({p, mode, absl::StrCat(p.Id(), "_", ModeName(mode), "_", n)});
          ++n;
        }
      }
    }
  }
  return cases;
}

class BlasGridTest : public testing::TestWithParam<Case> {};

TEST_P(BlasGridTest, MatchesReference) {
  const AttentionProblem& p = GetParam().problem;
  BlasBackend& backend = BackendFor(GetParam().mode);
  ASSERT_TRUE(ValidateProblem(p).ok()) << ValidateProblem(p);
  ASSERT_TRUE(backend.Supports(p).ok()) << backend.Supports(p);
  auto data = ProblemData::Random(p, 7);
  ASSERT_TRUE(data.ok()) << data.status();
  const AttentionArgs args = data->args();
  RunInfo info;
  ASSERT_TRUE(backend.Forward(p, args, &info).ok());
  EXPECT_EQ(info.backend, "blas");
  EXPECT_NE(info.kernel.find(openblas_get_corename()), std::string::npos) << info.kernel;
  ExpectMatchesReference(backend, p, *data, args);
}

INSTANTIATE_TEST_SUITE_P(Grid, BlasGridTest, testing::ValuesIn(MakeCases()),
                         [](const testing::TestParamInfo<Case>& info) { return info.param.name; });

AttentionProblem SmallProblem() {
  AttentionProblem p;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.q_len = 9;
  p.kv_len = 21;
  p.head_dim = 12;
  p.model_dim = 48;
  p.scale = 0.3f;
  p.return_lse = true;
  return p;
}

TEST(BlasBackendTest, DenseMaskBlockingAWholeRowGivesZerosAndNegInfLse) {
  AttentionProblem p = SmallProblem();
  p.blocked_mask = true;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  auto data = ProblemData::Random(p, 3);
  ASSERT_TRUE(data.ok());
  const AttentionArgs args = data->args();
  // Block every key of (b=0, h=1, i=4).
  for (int64_t j = 0; j < p.kv_len; ++j) {
    static_cast<uint8_t*>(args.blocked_mask.data)[args.blocked_mask.Offset(0, 1, 4, j)] = 1;
  }
  BlasBackend& backend = BackendFor(Mode::kDefault);
  ASSERT_TRUE(backend.Forward(p, args).ok());
  for (int64_t c = 0; c < p.head_dim; ++c) {
    EXPECT_EQ(args.o.LoadF32(args.o.Offset(0, 1, 4, c)), 0.0f);
  }
  EXPECT_EQ(static_cast<float*>(args.lse.data)[args.lse.Offset(0, 1, 4)],
            -std::numeric_limits<float>::infinity());
  ExpectMatchesReference(backend, p, *data, args);
}

// Views whose d axis is not unit-stride: Q is gathered, K/V are staged.
TEST(BlasBackendTest, NonUnitInnerStridesAreGatheredAndStaged) {
  const AttentionProblem p = SmallProblem();
  auto data = ProblemData::Random(p, 5);
  ASSERT_TRUE(data.ok());
  const AttentionArgs dense = data->args();
  // Every tensor again with each element two slots apart.
  std::vector<std::vector<float>> storage;
  auto spread = [&](const TensorView& t) {
    storage.emplace_back(static_cast<size_t>(2 * t.NumElements()), 0.0f);
    TensorView s = t;
    s.data = storage.back().data();
    s.strides = {2 * t.shape[1] * t.shape[2] * t.shape[3], 2 * t.shape[2] * t.shape[3],
                 2 * t.shape[3], 2};
    for (int64_t a = 0; a < t.shape[0]; ++a)
      for (int64_t b = 0; b < t.shape[1]; ++b)
        for (int64_t c = 0; c < t.shape[2]; ++c)
          for (int64_t e = 0; e < t.shape[3]; ++e)
            static_cast<float*>(s.data)[s.Offset(a, b, c, e)] = t.LoadF32(t.Offset(a, b, c, e));
    return s;
  };
  storage.reserve(4);
  AttentionArgs args = dense;
  args.q = spread(dense.q);
  args.k = spread(dense.k);
  args.v = spread(dense.v);
  args.o = spread(dense.o);
  RunInfo info;
  BlasBackend& backend = BackendFor(Mode::kDefault);
  ASSERT_TRUE(backend.Forward(p, args, &info).ok());
  EXPECT_NE(info.kernel.find("kv staged"), std::string::npos) << info.kernel;
  ExpectMatchesReference(backend, p, *data, args);
}

TEST(BlasBackendTest, DecodeStacksTheGroupsQueryHeadsAsRows) {
  AttentionProblem p = SmallProblem();
  p.num_heads = 32;
  p.num_kv_heads = 8;
  p.q_len = 1;
  p.kv_len = 1000;
  auto plan = BackendFor(Mode::kDefault).PlanFor(p);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->head_block, 4);
  EXPECT_EQ(plan->token_block, 1);
  EXPECT_EQ(plan->rows(), 4);
  EXPECT_EQ(plan->key_chunk, 1000);
}

TEST(BlasBackendTest, WorkspaceIsAllocatedOnceAndReused) {
  BlasOptions o;
  o.num_threads = 2;
  BlasBackend backend(o);
  const AttentionProblem p = SmallProblem();
  auto data = ProblemData::Random(p, 1);
  ASSERT_TRUE(data.ok());
  ASSERT_TRUE(backend.Forward(p, data->args()).ok());
  const size_t first = backend.workspace_bytes();
  EXPECT_GT(first, 0u);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(backend.Forward(p, data->args()).ok());
  EXPECT_EQ(backend.workspace_bytes(), first);
}

TEST(BlasBackendTest, ThreadCountCanChangeBetweenCalls) {
  BlasBackend backend;
  const AttentionProblem p = SmallProblem();
  auto data = ProblemData::Random(p, 2);
  ASSERT_TRUE(data.ok());
  EXPECT_FALSE(backend.SetNumThreads(0).ok());
  for (int n : {1, 3, 2}) {
    ASSERT_TRUE(backend.SetNumThreads(n).ok());
    EXPECT_EQ(backend.NumThreads(), n);
    RunInfo info;
    ASSERT_TRUE(backend.Forward(p, data->args(), &info).ok());
    EXPECT_NE(info.kernel.find(absl::StrCat(" x", n, ";")), std::string::npos) << info.kernel;
    ExpectMatchesReference(backend, p, *data, data->args());
  }
}

TEST(BlasBackendTest, BudgetBelowTheMinimumIsRejected) {
  BlasBackend backend;
  const absl::Status s = backend.SetMemoryBudget(1000);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(backend.SetMemoryBudget(size_t{8} << 20).ok());
  EXPECT_EQ(backend.memory_budget(), size_t{8} << 20);
}

}  // namespace
}  // namespace attnkit
