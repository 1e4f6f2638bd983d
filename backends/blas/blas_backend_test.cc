// The blas backend against the fp64 reference over a grid of problems: odd
// sizes, head dims, GQA ratios, every mask and alignment, padding, dense
// mask, bias, softcap, LSE, dtypes, layouts, and the backend's own modes
// (small key chunks for the online softmax, OpenBLAS threading, per-head,
// thin diagonal panels); then paged, int8 and ragged K/V against the fp64
// oracle (oracle/compare.h), and paged == dense bit for bit.
#include "backends/blas/blas_backend.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/blas/scalar_engine.h"
#include "core/kv_rows.h"
#include "core/ragged.h"
#include "gtest/gtest.h"
#include "harness/problem_data.h"
#include "oracle/compare.h"
#include "oracle/reference.h"

namespace attnkit {
namespace {

// kOddChunks: 40-key chunks, which straddle 16- and 64-row pages.
enum class Mode { kDefault, kSmallChunks, kBlasThreads, kPerHead, kThinPanels, kOddChunks };
constexpr int kNumModes = 6;

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
    case Mode::kOddChunks:
      return "chunk40";
    default:
      return "default";
  }
}

// One backend per mode, shared by every case (workspaces are reused).
BlasBackend& BackendFor(Mode mode) {
  static BlasBackend* backends[kNumModes] = {};
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
    if (mode == Mode::kOddChunks) {
      o.max_key_chunk = 40;
      o.target_rows = 16;
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

// An engine with every product type multiplies in the storage type where the
// compute mode allows it, matches the reference, and the kernel name says so.
TEST(BlasBackendTest, ProductsInTheStorageTypeAreNamedInTheKernel) {
  BlasOptions o;
  o.engine = blas::MakeScalarEngine();
  BlasBackend backend(o);
  struct Want {
    DType dtype, kv_dtype;
    ComputeMode compute;
    const char* products;  // nullptr: f32 products
  };
  const Want wants[] = {
      {DType::kF32, DType::kI8, ComputeMode::kFast, "products qk=i8 pv=u8"},
      {DType::kF32, DType::kI8, ComputeMode::kExact, nullptr},
      {DType::kBF16, DType::kBF16, ComputeMode::kExact, "products qk=bf16 pv=f32"},
      {DType::kF32, DType::kBF16, ComputeMode::kExact, nullptr},
      {DType::kF32, DType::kF16, ComputeMode::kFast, "products qk=f16 pv=f16"},
  };
  for (const Want& w : wants) {
    AttentionProblem p = SmallProblem();
    p.dtype = w.dtype;
    p.kv_dtype = w.kv_dtype;
    p.compute = w.compute;
    auto data = ProblemData::Random(p, 3);
    ASSERT_TRUE(data.ok()) << data.status();
    const AttentionArgs args = data->args();
    RunInfo info;
    ASSERT_TRUE(backend.Forward(p, args, &info).ok()) << p.Id();
    if (w.products != nullptr) {
      EXPECT_NE(info.kernel.find(w.products), std::string::npos) << p.Id() << ": " << info.kernel;
    } else {
      EXPECT_EQ(info.kernel.find("products"), std::string::npos) << p.Id() << ": " << info.kernel;
    }
    // The oracle's bound (FAST's rounding of P is a term of it).
    const Comparison c = CompareToReference(p, args, ComputeReference(p, args));
    EXPECT_TRUE(c.ok()) << p.Id() << ": " << c.first_failure;
  }
}

// The scalar engine behind a GemmEngine that tests extend.
class ScalarForwardingEngine : public blas::GemmEngine {
 public:
  std::string BackendName() const override { return inner_->BackendName(); }
  std::string Library() const override { return inner_->Library(); }
  std::string KernelTag() const override { return inner_->KernelTag(); }
  void SetGemmThreads(int n) override { inner_->SetGemmThreads(n); }
  int GemmThreads() const override { return inner_->GemmThreads(); }
  void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
             const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
             int64_t ldc) override {
    inner_->Sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  bool HasInt8Dot() const override { return inner_->HasInt8Dot(); }
  void Int8DotTransB(int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda, const int8_t* b,
                     int64_t ldb, int32_t* c, int64_t ldc) override {
    inner_->Int8DotTransB(m, n, k, a, lda, b, ldb, c, ldc);
  }
  bool HasU8S8Dot() const override { return inner_->HasU8S8Dot(); }
  void U8S8DotBatch(int64_t batch, int64_t m, int64_t n, int64_t k, const uint8_t* a,
                    const int8_t* b, int64_t ldb, int64_t stride_b, int32_t* c) override {
    inner_->U8S8DotBatch(batch, m, n, k, a, b, ldb, stride_b, c);
  }
  bool HasGemm16(DType type) const override { return inner_->HasGemm16(type); }
  void Gemm16(DType type, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
              int64_t ldc) override {
    inner_->Gemm16(type, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }

 private:
  std::shared_ptr<blas::GemmEngine> inner_ = blas::MakeScalarEngine();
};

// The scalar engine, counting the u8 x s8 products it is asked for.
class CountingU8Engine : public ScalarForwardingEngine {
 public:
  void U8S8DotBatch(int64_t batch, int64_t m, int64_t n, int64_t k, const uint8_t* a,
                    const int8_t* b, int64_t ldb, int64_t stride_b, int32_t* c) override {
    u8_calls_ += 1;
    ScalarForwardingEngine::U8S8DotBatch(batch, m, n, k, a, b, ldb, stride_b, c);
  }
  int64_t TakeU8Calls() { return u8_calls_.exchange(0); }

 private:
  std::atomic<int64_t> u8_calls_{0};
};

// FAST with int8 V on an engine with a u8 x s8 GEMM: u8 weights in blocks
// of 64 keys from each chunk's start (full blocks in batches, a partial
// last one), within the oracle's bound. A chunk holding a refused weight (a
// negative V scale times a visible key's P) takes the f32 product for all
// its rows, within the bound too; a NaN scale poisons exactly the rows that
// see its key. Key 70 is seen by every row; key 145 (kv_len 150, q_len 9,
// causal from the bottom right: position i sees keys [0, 142 + i)) only by
// positions 4-8, so rows before them were quantized when the chunk is
// refused.
TEST(BlasBackendTest, U8WeightsTimesInt8VMatchTheOracleOrFallBack) {
  for (const int64_t max_key_chunk : {0, 100}) {  // one chunk of 150 keys, or 100 + 50
    auto engine = std::make_shared<CountingU8Engine>();
    BlasOptions o;
    o.engine = engine;
    o.max_key_chunk = max_key_chunk;
    o.num_threads = 1;
    BlasBackend backend(o);
    AttentionProblem p = SmallProblem();
    p.kv_len = 150;
    p.kv_dtype = DType::kI8;
    p.compute = ComputeMode::kFast;
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kBottomRight;
    auto data = ProblemData::Random(p, 5);
    ASSERT_TRUE(data.ok()) << data.status();
    const AttentionArgs args = data->args();
    float* v_scale = static_cast<float*>(args.v_scale.data);
    // Calls per Forward with nothing refused: 2 kv heads x chunks x (full
    // block batches + partial blocks).
    RunInfo info;
    ASSERT_TRUE(backend.Forward(p, args, &info).ok());
    EXPECT_NE(info.kernel.find("pv=u8"), std::string::npos) << info.kernel;
    const int64_t clean_calls = engine->TakeU8Calls();
    EXPECT_EQ(clean_calls, max_key_chunk == 0 ? 2 * 2 : 2 * (2 + 1)) << max_key_chunk;
    EXPECT_TRUE(CompareToReference(p, args, ComputeReference(p, args)).ok());
    for (const int64_t key : {70, 145}) {
      for (const float bad_scale : {-1.0f, std::numeric_limits<float>::quiet_NaN()}) {
        const int64_t at = args.v_scale.Offset(0, 1, key);  // batch 0, kv head 1
        const float saved = v_scale[at];
        v_scale[at] = bad_scale * std::fabs(saved);
        ASSERT_TRUE(backend.Forward(p, args, &info).ok());
        // Kv head 1's chunk holding the key takes the f32 product.
        EXPECT_EQ(engine->TakeU8Calls(), clean_calls - (max_key_chunk == 0 ? 2
                                                        : key < 100        ? 2
                                                                           : 1))
            << "key " << key << " scale " << bad_scale << " chunk " << max_key_chunk;
        const Comparison c = CompareToReference(p, args, ComputeReference(p, args));
        EXPECT_TRUE(c.ok()) << "key " << key << " scale " << bad_scale << " chunk " << max_key_chunk
                            << ": " << c.first_failure;
        if (std::isnan(bad_scale)) {         // the rows that see the key, and only they, are NaN
          for (int64_t h = 2; h < 4; ++h) {  // kv head 1's query heads
            for (int64_t i = 0; i < p.q_len; ++i) {
              const bool sees = key < 142 + i;
              EXPECT_EQ(std::isnan(args.o.LoadF32(args.o.Offset(0, h, i, 0))), sees)
                  << "key " << key << " head " << h << " position " << i;
            }
          }
        }
        v_scale[at] = saved;
      }
    }
  }
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

// The scalar engine (bf16 and f16 GEMMs included), preferring blocks of
// `rows16` stacked rows where Q.K is a 16-bit GEMM (as oneDNN on AMX does).
class Rows16Engine : public ScalarForwardingEngine {
 public:
  explicit Rows16Engine(int64_t rows16) : rows16_(rows16) {}
  int64_t PreferredRows16() const override { return rows16_; }

 private:
  int64_t rows16_;
};

// The engine's preferred rows set the default block height where Q.K is a
// 16-bit GEMM (bf16 K/V with bf16 Q, or under FAST), and only there; a
// target_rows asked for wins. The blocks still match the oracle.
TEST(BlasBackendTest, EnginesPreferredRowsAreTheDefaultFor16BitProducts) {
  AttentionProblem p = SmallProblem();
  p.num_heads = 8;
  p.num_kv_heads = 2;  // groups of 4 rows a position
  p.q_len = p.kv_len = 100;
  p.mask = MaskKind::kCausal;
  struct Case {
    DType dtype, kv_dtype;
    ComputeMode compute;
    int64_t target_rows, want_rows;
  };
  const Case cases[] = {
      {DType::kBF16, DType::kBF16, ComputeMode::kExact, 0, 16},
      {DType::kF32, DType::kBF16, ComputeMode::kFast, 0, 16},
      {DType::kF32, DType::kBF16, ComputeMode::kExact, 0, 256},  // f32 products
      {DType::kF32, DType::kF32, ComputeMode::kFast, 0, 256},
      {DType::kBF16, DType::kBF16, ComputeMode::kFast, 40, 40},  // asked for
  };
  for (const Case& c : cases) {
    BlasOptions o;
    o.engine = std::make_shared<Rows16Engine>(16);
    o.target_rows = c.target_rows;
    o.num_threads = 1;
    BlasBackend backend(o);
    p.dtype = c.dtype;
    p.kv_dtype = c.kv_dtype;
    p.compute = c.compute;
    auto plan = backend.PlanFor(p);
    ASSERT_TRUE(plan.ok()) << plan.status();
    // Whole positions of 4 rows, at most q_len of them.
    EXPECT_EQ(plan->rows(), 4 * std::min<int64_t>(p.q_len, c.want_rows / 4)) << p.Id();
    auto data = ProblemData::Random(p, 3);
    ASSERT_TRUE(data.ok()) << data.status();
    const AttentionArgs args = data->args();
    ASSERT_TRUE(backend.Forward(p, args).ok()) << p.Id();
    const Comparison cmp = CompareToReference(p, args, ComputeReference(p, args));
    EXPECT_TRUE(cmp.ok()) << p.Id() << ": " << cmp.first_failure;
  }
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

// ---------------------------------------------------------------------------
// Paged K/V, int8 K/V and ragged batches.

// Runs `p` on random data from `seed` and holds o and lse to the fp64 oracle.
void ExpectPassesOracle(const AttentionProblem& p, Mode mode, uint64_t seed) {
  ASSERT_TRUE(ValidateProblem(p).ok()) << ValidateProblem(p);
  BlasBackend& backend = BackendFor(mode);
  ASSERT_TRUE(backend.Supports(p).ok()) << backend.Supports(p);
  auto data = ProblemData::Random(p, seed);
  ASSERT_TRUE(data.ok()) << data.status();
  const AttentionArgs args = data->args();
  RunInfo info;
  const absl::Status run = backend.Forward(p, args, &info);
  ASSERT_TRUE(run.ok()) << run;
  const Comparison c = CompareToReference(p, args, ComputeReference(p, args));
  EXPECT_TRUE(c.ok()) << p.Id() << " [" << info.kernel << "]: " << c.first_failure;
  EXPECT_EQ(c.poisoned_rows, 0);  // unread pool rows hold NaN: none may leak in
}

// Pool pages for `p`'s kv_lengths: `needed` - 1 (so sequences share pages)
// or a spare few (pages no sequence reads, NaN throughout).
int64_t PoolPages(const AttentionProblem& p, bool share) {
  int64_t needed = 0;
  for (int64_t b = 0; b < p.batch; ++b) needed += (p.KvLength(b) + p.page_size - 1) / p.page_size;
  return share ? std::max<int64_t>(1, needed - 1) : needed + 3;
}

void MakePaged(AttentionProblem* p, int64_t page_size, bool share) {
  p->page_size = page_size;
  p->num_pages = 1;  // placeholder so that PoolPages sees a paged problem
  p->num_pages = PoolPages(*p, share);
}

struct FeatureCase {
  AttentionProblem problem;
  Mode mode;
  std::string name;
};
// gtest prints a failing case's parameter: its name, not its bytes.
void PrintTo(const FeatureCase& c, std::ostream* os) { *os << c.name; }

void AddCase(std::vector<FeatureCase>* cases, AttentionProblem p, Mode mode) {
  p.model_dim = p.num_heads * p.head_dim;
  p.scale = 1.0f / std::sqrt(float(p.head_dim));
  p.return_lse = true;
  const std::string name =
      absl::StrCat(p.Id(), "_", ModeName(mode), "_", static_cast<int>(cases->size()));
  cases->push_back({p, mode, name});
}

struct MaskChoice {
  MaskKind kind;
  Alignment align;
  int64_t left, right;
};
const MaskChoice kMasks[] = {{MaskKind::kCausal, Alignment::kBottomRight, 0, 0},
                             {MaskKind::kNone, Alignment::kTopLeft, 0, 0},
                             {MaskKind::kCausal, Alignment::kTopLeft, 0, 0},
                             {MaskKind::kSlidingWindow, Alignment::kBottomRight, 20, 3}};

void SetMask(AttentionProblem* p, const MaskChoice& m) {
  p->mask = m.kind;
  p->alignment = m.align;
  p->window_left = m.left;
  p->window_right = m.right;
}

// Paged pools of 16- and 64-row pages, every K/V dtype, with kv_lengths
// (an empty sequence included) and pools that share pages or hold spare ones.
void AddPagedCases(std::vector<FeatureCase>* cases) {
  struct Shape {
    int64_t q, k;
  };
  const Shape shapes[] = {{1, 200}, {37, 150}, {64, 64}};
  const DType q_dtypes[] = {DType::kF32, DType::kBF16, DType::kF16};
  const DType kv_dtypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kI8};
  const int64_t heads[][2] = {{4, 2}, {8, 1}, {3, 3}};
  const int64_t dims[] = {64, 16, 80, 7};
  int n = 0;
  for (int64_t page : {16, 64}) {
    for (DType kv : kv_dtypes) {
      for (const Shape& s : shapes) {
        AttentionProblem p;
        p.batch = 3;
        p.q_len = s.q;
        p.kv_len = s.k;
        p.kv_lengths = n % 2 == 0 ? std::vector<int64_t>{s.k, s.k / 2 + 3, 1}
                                  : std::vector<int64_t>{0, s.k, 17};
        p.num_heads = heads[n % 3][0];
        p.num_kv_heads = heads[n % 3][1];
        p.head_dim = dims[n % 4];
        p.dtype = q_dtypes[n % 3];
        p.kv_dtype = kv;
        p.layout = (n / 2) % 2 == 0 ? Layout::kBHTD : Layout::kBTHD;
        SetMask(&p, kMasks[n % 4]);
        MakePaged(&p, page, n % 3 != 2);
        AddCase(cases, p, static_cast<Mode>(n % kNumModes));
        ++n;
      }
    }
  }
}

// Dense int8 K/V under f32 and bf16 Q, both layouts, with padding.
void AddInt8DenseCases(std::vector<FeatureCase>* cases) {
  int n = 0;
  for (DType q : {DType::kF32, DType::kBF16}) {
    for (Layout layout : {Layout::kBHTD, Layout::kBTHD}) {
      for (int shape = 0; shape < 2; ++shape) {
        AttentionProblem p;
        p.batch = 2;
        p.q_len = shape == 0 ? 33 : 1;
        p.kv_len = shape == 0 ? 129 : 300;
        p.kv_lengths = {p.kv_len, p.kv_len / 3};
        p.num_heads = 4;
        p.num_kv_heads = n % 2 == 0 ? 2 : 1;
        p.head_dim = n % 3 == 0 ? 64 : 24;
        p.dtype = q;
        p.kv_dtype = DType::kI8;
        p.layout = layout;
        SetMask(&p, kMasks[n % 4]);
        AddCase(cases, p, static_cast<Mode>(n % kNumModes));
        ++n;
      }
    }
  }
}

// A mixed ragged batch: a chunked prefill of 40 queries against 100 keys,
// single-query decodes against 1, 57 and 100 keys, a sequence with no
// queries and a decode with no keys (fully blocked), K/V packed or paged.
AttentionProblem MixedRaggedBatch() {
  AttentionProblem p;
  p.batch = 6;
  p.q_lengths = {40, 1, 1, 0, 1, 1};
  p.kv_lengths = {100, 1, 57, 30, 0, 100};
  p.q_len = 40;
  p.kv_len = 100;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.head_dim = 32;
  p.layout = Layout::kBTHD;
  SetMask(&p, kMasks[0]);
  return p;
}

void AddRaggedCases(std::vector<FeatureCase>* cases) {
  const DType q_dtypes[] = {DType::kF32, DType::kBF16, DType::kF16};
  int n = 0;
  for (int64_t page : {0, 16, 64}) {
    for (DType kv : {DType::kF32, DType::kBF16, DType::kI8}) {
      AttentionProblem p = MixedRaggedBatch();
      p.dtype = q_dtypes[n % 3];
      p.kv_dtype = kv;
      if (n % 4 == 3) SetMask(&p, kMasks[3]);  // sliding window, bottom right
      if (n % 3 == 1) {
        p.num_heads = 8;
        p.num_kv_heads = 1;
        p.head_dim = 80;
      }
      if (page > 0) MakePaged(&p, page, n % 2 == 0);
      AddCase(cases, p, static_cast<Mode>(n % kNumModes));
      ++n;
    }
  }
}

std::vector<FeatureCase> MakeFeatureCases() {
  std::vector<FeatureCase> cases;
  AddPagedCases(&cases);
  AddInt8DenseCases(&cases);
  AddRaggedCases(&cases);
  return cases;
}

class BlasFeatureTest : public testing::TestWithParam<FeatureCase> {};

TEST_P(BlasFeatureTest, PassesTheOracle) {
  ExpectPassesOracle(GetParam().problem, GetParam().mode, 11);
}

INSTANTIATE_TEST_SUITE_P(PagedInt8Ragged, BlasFeatureTest, testing::ValuesIn(MakeFeatureCases()),
                         [](const testing::TestParamInfo<FeatureCase>& info) {
                           return info.param.name;
                         });

TEST(BlasBackendTest, ClaimsPagedInt8AndRagged) {
  const Capabilities c = BackendFor(Mode::kDefault).Caps();
  EXPECT_TRUE(c.paged_kv);
  EXPECT_TRUE(c.ragged);
  EXPECT_NE(std::find(c.kv_dtypes.begin(), c.kv_dtypes.end(), DType::kI8), c.kv_dtypes.end());
}

// Copies `n` elements of `size` bytes, `from_stride` / `to_stride` elements apart.
void CopyElements(const TensorView& from, int64_t from_at, const TensorView& to, int64_t to_at,
                  int64_t n, int64_t from_stride, int64_t to_stride) {
  const size_t size = DTypeSize(from.dtype);
  for (int64_t c = 0; c < n; ++c) {
    std::memcpy(static_cast<char*>(to.data) + (to_at + c * to_stride) * size,
                static_cast<const char*>(from.data) + (from_at + c * from_stride) * size, size);
  }
}

// Copies every K/V row (and int8 scale) the batch-1-or-more problem `p`
// reads from `from` to `to`, each read through its own KvRows (a pool and
// block table, or dense).
void CopyReadKvRows(const AttentionProblem& from_p, const AttentionArgs& from,
                    const AttentionProblem& to_p, const AttentionArgs& to) {
  const KvRows src(from_p, from), dst(to_p, to);
  const int64_t d = from_p.head_dim;
  for (int64_t b = 0; b < from_p.batch; ++b) {
    for (int64_t g = 0; g < from_p.num_kv_heads; ++g) {
      for (int64_t t = 0; t < from_p.KvLength(b); ++t) {
        CopyElements(from.k, src.Offset(from.k, b, g, t), to.k, dst.Offset(to.k, b, g, t), d,
                     from.k.strides[3], to.k.strides[3]);
        CopyElements(from.v, src.Offset(from.v, b, g, t), to.v, dst.Offset(to.v, b, g, t), d,
                     from.v.strides[3], to.v.strides[3]);
        if (from_p.kv_dtype != DType::kI8) continue;
        CopyElements(from.k_scale, src.ScaleOffset(from.k_scale, b, g, t), to.k_scale,
                     dst.ScaleOffset(to.k_scale, b, g, t), 1, 1, 1);
        CopyElements(from.v_scale, src.ScaleOffset(from.v_scale, b, g, t), to.v_scale,
                     dst.ScaleOffset(to.v_scale, b, g, t), 1, 1, 1);
      }
    }
  }
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  const size_t bytes = static_cast<size_t>(a.view().NumElements()) * DTypeSize(a.view().dtype);
  return std::memcmp(a.data(), b.data(), bytes) == 0;
}

// `paged` run on its random data, and the same values laid out densely (a
// [B, G, Tk, d] tensor, or packed for a ragged batch): O and LSE must be
// equal bit for bit.
void ExpectPagedEqualsDense(const AttentionProblem& paged, Mode mode) {
  SCOPED_TRACE(absl::StrCat(paged.Id(), " ", ModeName(mode)));
  AttentionProblem dense = paged;
  dense.page_size = dense.num_pages = 0;
  auto pd = ProblemData::Random(paged, 21);
  auto dd = ProblemData::Allocate(dense);
  ASSERT_TRUE(pd.ok() && dd.ok());
  const AttentionArgs pa = pd->args(), da = dd->args();
  std::memcpy(dd->q.data(), pd->q.data(),
              static_cast<size_t>(pa.q.NumElements()) * DTypeSize(pa.q.dtype));
  if (paged.is_ragged()) {
    const std::vector<SequenceCall> ps = RaggedSequences(paged, pa);
    const std::vector<SequenceCall> ds = RaggedSequences(dense, da);
    ASSERT_EQ(ps.size(), ds.size());
    for (size_t s = 0; s < ps.size(); ++s) {
      CopyReadKvRows(ps[s].problem, ps[s].args, ds[s].problem, ds[s].args);
    }
  } else {
    CopyReadKvRows(paged, pa, dense, da);
  }
  BlasBackend& backend = BackendFor(mode);
  RunInfo paged_info, dense_info;
  ASSERT_TRUE(backend.Forward(paged, pa, &paged_info).ok());
  ASSERT_TRUE(backend.Forward(dense, da, &dense_info).ok());
  EXPECT_TRUE(SameBytes(pd->o, dd->o)) << paged_info.kernel << " vs " << dense_info.kernel;
  EXPECT_TRUE(SameBytes(pd->lse, dd->lse));
  const Comparison c = CompareToReference(paged, pa, ComputeReference(paged, pa));
  EXPECT_TRUE(c.ok()) << c.first_failure;
}

TEST(BlasBackendTest, PagedGivesTheBitsOfTheDenseLayout) {
  for (DType kv : {DType::kF32, DType::kBF16, DType::kI8}) {
    for (Mode mode : {Mode::kDefault, Mode::kSmallChunks, Mode::kOddChunks, Mode::kBlasThreads}) {
      for (int64_t page : {16, 64}) {
        AttentionProblem p;
        p.batch = 3;
        p.q_len = 20;
        p.kv_len = 150;
        p.kv_lengths = {150, 70, 9};
        p.num_heads = 4;
        p.num_kv_heads = 2;
        p.head_dim = 64;
        p.model_dim = 256;
        p.scale = 0.125f;
        p.kv_dtype = kv;
        p.layout = page == 16 ? Layout::kBHTD : Layout::kBTHD;
        p.return_lse = true;
        SetMask(&p, kMasks[0]);
        MakePaged(&p, page, true);
        ExpectPagedEqualsDense(p, mode);
      }
    }
  }
}

TEST(BlasBackendTest, PagedRaggedGivesTheBitsOfThePackedLayout) {
  for (DType kv : {DType::kF32, DType::kI8}) {
    for (Mode mode : {Mode::kDefault, Mode::kOddChunks}) {
      AttentionProblem p = MixedRaggedBatch();
      p.kv_dtype = kv;
      p.model_dim = p.num_heads * p.head_dim;
      p.scale = 0.2f;
      p.return_lse = true;
      MakePaged(&p, 16, true);
      ExpectPagedEqualsDense(p, mode);
    }
  }
}

// A batch of decodes: one work list over all sequences, spread over the
// threads (per sequence, one KV head's item could not use them), and the
// workspace sized on the first call is reused.
TEST(BlasBackendTest, RaggedDecodesShareOneWorkListAndTheWorkspace) {
  BlasOptions o;
  o.num_threads = 2;
  BlasBackend backend(o);
  AttentionProblem p;
  p.batch = 8;
  p.q_lengths = std::vector<int64_t>(8, 1);
  p.kv_lengths = {300, 1, 77, 128, 5, 256, 0, 200};
  p.q_len = 1;
  p.kv_len = 300;
  p.num_heads = 4;
  p.num_kv_heads = 1;
  p.head_dim = 64;
  p.model_dim = 256;
  p.scale = 0.125f;
  p.layout = Layout::kBTHD;
  p.kv_dtype = DType::kI8;
  p.return_lse = true;
  MakePaged(&p, 16, true);
  ASSERT_TRUE(ValidateProblem(p).ok()) << ValidateProblem(p);
  auto data = ProblemData::Random(p, 4);
  ASSERT_TRUE(data.ok()) << data.status();
  RunInfo info;
  ASSERT_TRUE(backend.Forward(p, data->args(), &info).ok());
  EXPECT_NE(info.kernel.find("blocks-over-threads"), std::string::npos) << info.kernel;
  EXPECT_NE(info.kernel.find("ragged, 8 sequences"), std::string::npos) << info.kernel;
  const size_t first = backend.workspace_bytes();
  EXPECT_GT(first, 0u);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(backend.Forward(p, data->args()).ok());
  EXPECT_EQ(backend.workspace_bytes(), first);
  const Comparison c = CompareToReference(p, data->args(), ComputeReference(p, data->args()));
  EXPECT_TRUE(c.ok()) << c.first_failure;
}

// With the threading fixed (kAuto would give a lone decode OpenBLAS's
// threads, whose split of a GEMM may round differently), each sequence of a
// ragged batch gives the bits it gives run alone as a batch-1 problem.
TEST(BlasBackendTest, RaggedSequencesGiveTheBitsOfLoneRunsUnderItemsThreading) {
  BlasOptions o;
  o.num_threads = 2;
  o.threading = BlasThreading::kItems;
  BlasBackend backend(o);
  for (DType kv : {DType::kF16, DType::kI8}) {
    AttentionProblem p = MixedRaggedBatch();
    p.kv_dtype = kv;
    p.model_dim = p.num_heads * p.head_dim;
    p.scale = 0.2f;
    p.return_lse = true;
    auto data = ProblemData::Random(p, 9);
    ASSERT_TRUE(data.ok()) << data.status();
    const AttentionArgs args = data->args();
    ASSERT_TRUE(backend.Forward(p, args).ok());
    const auto bytes = [](const Tensor& t) {
      const char* at = static_cast<const char*>(t.data());
      return std::string(at,
                         static_cast<size_t>(t.view().NumElements()) * DTypeSize(t.view().dtype));
    };
    const std::string batch_o = bytes(data->o), batch_lse = bytes(data->lse);
    std::memset(data->o.data(), 0, batch_o.size());
    std::memset(data->lse.data(), 0, batch_lse.size());
    for (const SequenceCall& s : RaggedSequences(p, args)) {  // writes its rows of o, lse
      const absl::Status run = backend.Forward(s.problem, s.args);
      ASSERT_TRUE(run.ok()) << run;
    }
    EXPECT_EQ(bytes(data->o), batch_o) << DTypeName(kv);
    EXPECT_EQ(bytes(data->lse), batch_lse) << DTypeName(kv);
  }
}

}  // namespace
}  // namespace attnkit
