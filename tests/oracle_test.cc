// The oracle proven by planted bugs. Each mutant is the fp64 reference with
// one bug planted; the oracle (oracle/compare.h) must report every mutant as
// wrong on every dtype combination (Q/O x K/V in f32, f16, bf16), head dim
// {16, 64, 128, 256} and key count {17, 257, 4096}, while every real backend
// passes the same grid. The test prints the catch matrix.
//
// Invisible by proof, and so not required: a 4-ulp perturbation of one
// output element where 4 ulp of the output dtype (less the half ulp a
// correct rounding may already be off) is within the fp32 accumulation
// bound; that is every f32 output (4 ulp of f32 is ~3e-7 relative, the
// accumulation bound ~1e-5), decided per element with ElementBound.
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/builtin.h"
#include "gtest/gtest.h"
#include "harness/execute.h"
#include "harness/problem_data.h"
#include "oracle/compare.h"
#include "oracle/reference.h"
#include "tests/oracle_grid.h"

namespace attnkit {
namespace {

// One grid problem (tests/oracle_grid.h): Tq = 3 < Tk.
AttentionProblem GridProblem(DType q_dtype, DType kv_dtype, int64_t d, int64_t tk) {
  return OracleGridProblem(q_dtype, kv_dtype, d, tk, /*q_len=*/3);
}

absl::StatusOr<ProblemData> GridData(const AttentionProblem& p) {
  return OracleGridData(p, 1234 + p.head_dim + p.kv_len);
}

// A planted bug: rewrites the problem and inputs the reference sees, and/or
// the outputs after it ran.
struct Mutant {
  std::string name;
  std::function<void(AttentionProblem* p, ProblemData* in)> before;
  std::function<void(const AttentionProblem& p, ReferenceResult* r)> after;
  bool perturb_element = false;  // 4 ulp on one output element, after rounding
};

// Blocks, for every row, the visible keys `pick` selects (index within the
// row's visible range, range size) through a dense mask.
void BlockKeys(AttentionProblem* p, ProblemData* in,
               const std::function<bool(int64_t k, int64_t n)>& pick) {
  p->blocked_mask = true;
  in->blocked_mask = *Tensor::Contiguous(DType::kU8, {p->batch, p->num_heads, p->q_len, p->kv_len});
  auto* mask = static_cast<uint8_t*>(in->blocked_mask.data());
  for (int64_t b = 0; b < p->batch; ++b) {
    for (int64_t h = 0; h < p->num_heads; ++h) {
      for (int64_t i = 0; i < p->q_len; ++i) {
        const KeyRange r = VisibleKeys(p->mask_params(), i, p->KvLength(b));
        for (int64_t j = r.begin; j < r.end; ++j) {
          const int64_t off = ((b * p->num_heads + h) * p->q_len + i) * p->kv_len + j;
          mask[off] = pick(j - r.begin, r.size()) ? 1 : 0;
        }
      }
    }
  }
}

// K and V with one head per query head, head h holding the original head
// `source(h)`: a wrong GQA map expressed as MHA.
void RemapKvHeads(AttentionProblem* p, ProblemData* in,
                  const std::function<int64_t(int64_t)>& source) {
  const int64_t H = p->num_heads, d = p->head_dim;
  for (Tensor* t : {&in->k, &in->v}) {
    Tensor out = *Tensor::Attention(p->kv_dtype, p->layout, p->batch, H, p->kv_len, d);
    const TensorView src = t->view(), dst = out.view();
    for (int64_t b = 0; b < p->batch; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t j = 0; j < p->kv_len; ++j) {
          for (int64_t c = 0; c < d; ++c) {
            StoreFromF32(out.data(), p->kv_dtype, dst.Offset(b, h, j, c),
                         src.LoadF32(src.Offset(b, source(h), j, c)));
          }
        }
      }
    }
    *t = std::move(out);
  }
  p->num_kv_heads = H;
}

std::vector<Mutant> Mutants() {
  std::vector<Mutant> m;
  auto none = [](const AttentionProblem&, ReferenceResult*) {};
  auto keep = [](AttentionProblem*, ProblemData*) {};
  m.push_back({"drop one visible key",
               [](AttentionProblem* p, ProblemData* in) {
                 BlockKeys(p, in, [](int64_t k, int64_t n) { return k == n - 1; });
               },
               none});
  m.push_back({"drop 1% of keys",
               [](AttentionProblem* p, ProblemData* in) {
                 BlockKeys(p, in, [](int64_t k, int64_t) { return k % 100 == 50 || k == 0; });
               },
               none});
  m.push_back({"scale 1/d",
               [](AttentionProblem* p, ProblemData*) { p->scale = 1.0f / p->head_dim; }, none});
  m.push_back({"scale x 1.01", [](AttentionProblem* p, ProblemData*) { p->scale *= 1.01f; }, none});
  m.push_back({"ignore softcap", [](AttentionProblem* p, ProblemData*) { p->softcap = 0; }, none});
  m.push_back(
      {"ignore bias", [](AttentionProblem* p, ProblemData*) { p->additive_bias = false; }, none});
  m.push_back({"ignore Q (uniform weights)",
               [](AttentionProblem* p, ProblemData* in) {
                 ForEachOffset(in->q.view(), [&](int64_t off) {
                   StoreFromF32(in->q.data(), p->dtype, off, 0.0f);
                 });
                 p->additive_bias = false;
                 p->softcap = 0;
               },
               none});
  m.push_back({"GQA map h % G",
               [](AttentionProblem* p, ProblemData* in) {
                 const int64_t G = p->num_kv_heads;
                 RemapKvHeads(p, in, [G](int64_t h) { return h % G; });
               },
               none});
  m.push_back({"top-left causal",
               [](AttentionProblem* p, ProblemData*) { p->alignment = Alignment::kTopLeft; },
               none});
  m.push_back({"window one key too wide",
               [](AttentionProblem* p, ProblemData*) { p->window_left += 1; }, none});
  m.push_back({"heads 0 and 1 swapped", keep, [](const AttentionProblem& p, ReferenceResult* r) {
                 const int64_t rows = p.q_len * p.head_dim;
                 for (int64_t x = 0; x < rows; ++x) std::swap(r->o[x], r->o[rows + x]);
                 for (int64_t i = 0; i < p.q_len; ++i) std::swap(r->lse[i], r->lse[p.q_len + i]);
               }});
  m.push_back({"LSE off by 1e-3", keep, [](const AttentionProblem&, ReferenceResult* r) {
                 for (double& l : r->lse) l += 1e-3;
               }});
  m.push_back({"one element + 4 ulp", keep, none, true});
  return m;
}

// Writes r into the problem's output tensors, rounded to their dtypes.
void StoreOutputs(const AttentionProblem& p, const ReferenceResult& r, const ProblemData& data) {
  const TensorView o = data.o.view();
  for (int64_t h = 0; h < p.num_heads; ++h) {
    for (int64_t i = 0; i < p.q_len; ++i) {
      for (int64_t c = 0; c < p.head_dim; ++c) {
        StoreFromF32(data.o.data(), p.dtype, o.Offset(0, h, i, c),
                     static_cast<float>(r.o[(h * p.q_len + i) * p.head_dim + c]));
      }
      static_cast<float*>(data.lse.data())[h * p.q_len + i] =
          static_cast<float>(r.lse[h * p.q_len + i]);
    }
  }
}

// Adds 4 ulp of O's dtype to the element with the largest |o| and returns
// whether the oracle can see that: 3.5 ulp (4, less the half a correct
// rounding may already be off) beyond the element's bound.
bool PerturbLargestElement(const AttentionProblem& p, const ReferenceResult& ref,
                           const ProblemData& data) {
  size_t at = 0;
  for (size_t x = 0; x < ref.o.size(); ++x) {
    if (std::fabs(ref.o[x]) > std::fabs(ref.o[at])) at = x;
  }
  const int64_t c = static_cast<int64_t>(at) % p.head_dim;
  const int64_t row = static_cast<int64_t>(at) / p.head_dim;
  const int64_t off = data.o.view().Offset(0, row / p.q_len, row % p.q_len, c);
  const float v = data.o.view().LoadF32(off);
  const double ulp = DTypeUlp(p.dtype, v);
  StoreFromF32(data.o.data(), p.dtype, off, static_cast<float>(v + std::copysign(4 * ulp, v)));
  const double bound =
      ElementBound(p.dtype, BoundForRow(p, ref.terms[row]), ref.o[at], ref.abs_o[at]);
  return 3.5 * ulp > bound;
}

struct Cell {
  int caught = 0, missed = 0, invisible = 0;
};

// One instance per Q/O x K/V dtype pair (sharded), each over every head dim
// and key count.
class OracleTest : public ::testing::TestWithParam<std::tuple<DType, DType>> {};

TEST_P(OracleTest, CatchesEveryPlantedBugAndPassesEveryBackend) {
  const auto [qd, kd] = GetParam();
  const std::vector<Mutant> mutants = Mutants();
  std::map<std::string, Cell> matrix;  // mutant -> counts
  std::map<std::string, std::string> backend_status;
  std::map<std::string, double> backend_fraction;
  for (int64_t d : {16, 64, 128, 256}) {
    for (int64_t tk : {17, 257, 4096}) {
      const AttentionProblem p = GridProblem(qd, kd, d, tk);
      absl::StatusOr<ProblemData> data = GridData(p);
      ASSERT_TRUE(data.ok()) << data.status();
      const ReferenceResult ref = ComputeReference(p, data->args());

      for (const Mutant& m : mutants) {
        AttentionProblem mp = p;
        ProblemData in = std::move(*GridData(p));
        m.before(&mp, &in);
        ReferenceResult r = ComputeReference(mp, in.args());
        m.after(mp, &r);
        StoreOutputs(p, r, *data);
        bool visible = true;
        if (m.perturb_element) visible = PerturbLargestElement(p, ref, *data);
        const Comparison c = CompareToReference(p, data->args(), ref);
        Cell& cell = matrix[m.name];
        if (!visible) {
          ++cell.invisible;
          continue;
        }
        if (c.ok()) {
          ++cell.missed;
          ADD_FAILURE() << "the oracle missed '" << m.name << "' on " << p.name
                        << " (largest error/bound " << c.max_bound_fraction << ")";
        } else {
          ++cell.caught;
        }
      }

      for (const std::string& name : GlobalRegistry().Names()) {
        Backend* b = *GlobalRegistry().Find(name);
        const absl::Status supported = b->Supports(p);
        if (!supported.ok()) {
          backend_status[name] = absl::StrCat("some cases unsupported: ", supported.message());
          continue;
        }
        PoisonOutputs(*data);
        RunInfo info;
        const absl::Status run = RunOnBackend(b, p, *data, &info);
        ASSERT_TRUE(run.ok()) << name << " on " << p.name << ": " << run;
        const Comparison c = CompareToReference(p, data->args(), ref);
        EXPECT_TRUE(c.ok()) << name << " [" << info.kernel << "] fails the oracle on " << p.name
                            << ": " << c.first_failure;
        backend_fraction[name] = std::max(backend_fraction[name], c.max_bound_fraction);
      }
    }
  }
  std::printf("\n=== catch matrix, Q/O %s, K/V %s: d {16,64,128,256} x Tk {17,257,4096} ===\n",
              std::string(DTypeName(qd)).c_str(), std::string(DTypeName(kd)).c_str());
  std::printf("%-28s %7s %7s %10s\n", "planted bug", "caught", "missed", "invisible");
  for (const Mutant& m : mutants) {
    const Cell& cell = matrix[m.name];
    std::printf("%-28s %7d %7d %10d\n", m.name.c_str(), cell.caught, cell.missed, cell.invisible);
  }
  std::printf("=== real backends on the same problems: largest error / bound ===\n");
  for (const auto& [name, fraction] : backend_fraction) {
    std::printf("%-20s %.3f%s\n", name.c_str(), fraction,
                backend_status.count(name) ? ("  (" + backend_status[name] + ")").c_str() : "");
  }
}

std::vector<std::tuple<DType, DType>> DTypePairs() {
  std::vector<std::tuple<DType, DType>> pairs;
  for (DType q : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType kv : {DType::kF32, DType::kF16, DType::kBF16}) pairs.emplace_back(q, kv);
  }
  return pairs;
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, OracleTest, ::testing::ValuesIn(DTypePairs()),
                         [](const ::testing::TestParamInfo<std::tuple<DType, DType>>& info) {
                           return absl::StrCat("q", DTypeName(std::get<0>(info.param)), "_kv",
                                               DTypeName(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace attnkit
