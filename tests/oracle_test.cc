// The oracle proven by planted bugs. Each mutant is the fp64 reference with
// one bug planted; the oracle (oracle/compare.h) must report every mutant as
// wrong on every dtype combination (Q/O x K/V in f32, f16, bf16), head dim
// {16, 64, 128, 256} and key count {17, 257, 4096}, while every real backend
// passes the same grid. The test prints the catch matrix.
//
// FAST (config.proto compute) runs the grid too, on 16-bit and int8 K/V:
// the reference consumes the rounded Q, a legal FAST computation (P rounded
// to V's type before P.V, or with int8 V quantized to u8 per 64-key
// block, the row sum of the unrounded weights) must pass,
// and the same bugs plus FAST's own (P rounded twice: P.V summed in V's
// type; int8 Q quantized with the wrong scale) must be caught.
//
// Invisible by proof, and so not required: a 4-ulp perturbation of one
// output element where 4 ulp of the output dtype (less the half ulp a
// correct rounding may already be off) is within the fp32 accumulation
// bound; that is every f32 output (4 ulp of f32 is ~3e-7 relative, the
// accumulation bound ~1e-5), decided per element with ElementBound.
#include <algorithm>
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
#include "core/fast_compute.h"
#include "core/mask.h"
#include "gtest/gtest.h"
#include "harness/execute.h"
#include "harness/problem_data.h"
#include "oracle/compare.h"
#include "oracle/reference.h"
#include "tests/oracle_grid.h"

namespace attnkit {
namespace {

// One grid problem (tests/oracle_grid.h): Tq = 3 < Tk.
AttentionProblem GridProblem(DType q_dtype, DType kv_dtype, int64_t d, int64_t tk,
                             ComputeMode compute) {
  AttentionProblem p = OracleGridProblem(q_dtype, kv_dtype, d, tk, /*q_len=*/3);
  p.compute = compute;
  if (p.fast()) p.name += "_fast";
  return p;
}

absl::StatusOr<ProblemData> GridData(const AttentionProblem& p) {
  return OracleGridData(p, 1234 + p.head_dim + p.kv_len);
}

// A planted bug: rewrites the problem and inputs the reference sees, and/or
// the outputs after it ran.
struct Mutant {
  std::string name;
  std::function<void(AttentionProblem* p, ProblemData* in)> before;
  std::function<void(const AttentionProblem& p, const ProblemData& in, ReferenceResult* r)> after;
  bool perturb_element = false;  // 4 ulp on one output element, after rounding
  // FAST only, and only where `applies` (a bug that is no bug elsewhere).
  bool fast_only = false;
  std::function<bool(const AttentionProblem& p)> applies = [](const AttentionProblem&) {
    return true;
  };
};

// Row (b, h, i)'s unnormalised weights as a FAST kernel forms them:
// (*e)[j] = exp(s_j - max s) for the keys of `range` with a finite score
// ((*s)[j] > -inf), summing to l. l = 0 for a row the reference gives as
// non-finite (fully blocked, or reading a NaN): callers leave it as it is.
struct RowWeights {
  KeyRange range;
  double l = 0;
};
RowWeights UnnormalisedWeights(const AttentionProblem& p, const AttentionArgs& a, int64_t b,
                               int64_t h, int64_t i, std::vector<double>* s, std::vector<double>* o,
                               std::vector<double>* e) {
  std::fill(s->begin(), s->end(), -INFINITY);
  RowWeights w;
  w.range = VisibleKeys(p.mask_params(b), i, p.KvLength(b));
  if (!std::isfinite(ReferenceRow(p, a, b, h, i, s, o->data()))) return w;
  double max_s = -INFINITY;
  for (int64_t j = w.range.begin; j < w.range.end; ++j) max_s = std::max(max_s, (*s)[j]);
  for (int64_t j = w.range.begin; j < w.range.end; ++j) {
    if ((*s)[j] == -INFINITY) continue;
    (*e)[j] = std::exp((*s)[j] - max_s);
    w.l += (*e)[j];
  }
  return w;
}

// Rewrites r->o as a FAST kernel computes it: each weight e_j = exp(s_j -
// max s) rounded by round_weight, the products summed (each partial sum
// rounded by round_sum), divided by the sum of the unrounded weights. fp8
// V: the weight times V's row scale is rounded, and meets the codes' values.
void RoundedWeightsOutput(const AttentionProblem& p, const ProblemData& in,
                          const std::function<double(double)>& round_weight,
                          const std::function<double(double)>& round_sum, ReferenceResult* r) {
  const AttentionArgs a = in.args();
  const int64_t d = p.head_dim;
  std::vector<double> s(static_cast<size_t>(p.kv_len)), o(static_cast<size_t>(d));
  std::vector<double> e(static_cast<size_t>(p.kv_len)), acc(static_cast<size_t>(d));
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.num_heads; ++h) {
      for (int64_t i = 0; i < p.q_len; ++i) {
        const RowWeights w = UnnormalisedWeights(p, a, b, h, i, &s, &o, &e);
        if (w.l == 0) continue;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = w.range.begin; j < w.range.end; ++j) {
          if (s[j] == -INFINITY) continue;
          const int64_t g = p.KvHead(h);
          const double v_scale =
              IsFp8(p.kv_dtype)
                  ? double(static_cast<const float*>(a.v_scale.data)[a.v_scale.Offset(b, g, j, 0)])
                  : 1.0;
          const double rounded = round_weight(e[j] * v_scale);
          for (int64_t c = 0; c < d; ++c) {
            const double v = a.v.LoadF32(a.v.Offset(b, g, j, c));  // fp8: the code's value
            acc[c] = round_sum(acc[c] + rounded * v);
          }
        }
        const int64_t row = (b * p.num_heads + h) * p.q_len + i;
        for (int64_t c = 0; c < d; ++c) r->o[row * d + c] = acc[c] / w.l;
      }
    }
  }
}

// Rewrites r->o as a FAST kernel with int8 V may compute it
// (FastQuantizesWeights): each weight e_j = exp(s_j - max s) times V's row
// scale quantized to u8 (kFastWeightSteps) per aligned block of
// kFastWeightBlock keys, the coarsest blocks the permission allows, and the
// integer sums scaled back.
// Batch 0 of a dense layout: the grid's problems (batch 1, dense).
void U8WeightsOutput(const AttentionProblem& p, const ProblemData& in, ReferenceResult* r) {
  const AttentionArgs a = in.args();
  const int64_t d = p.value_dim();
  std::vector<double> s(static_cast<size_t>(p.kv_len)), o(static_cast<size_t>(d));
  std::vector<double> e(static_cast<size_t>(p.kv_len)), u(static_cast<size_t>(p.kv_len));
  std::vector<double> acc(static_cast<size_t>(d));
  for (int64_t h = 0; h < p.num_heads; ++h) {
    const int64_t g = p.KvHead(h);
    for (int64_t i = 0; i < p.q_len; ++i) {
      const RowWeights rw = UnnormalisedWeights(p, a, 0, h, i, &s, &o, &e);
      if (rw.l == 0) continue;
      std::fill(u.begin(), u.end(), 0.0);
      for (int64_t j = rw.range.begin; j < rw.range.end; ++j) {
        if (s[j] == -INFINITY) continue;
        u[j] = e[j] * static_cast<const float*>(a.v_scale.data)[a.v_scale.Offset(0, g, j, 0)];
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j0 = 0; j0 < p.kv_len; j0 += kFastWeightBlock) {
        const int64_t j1 = std::min(p.kv_len, j0 + kFastWeightBlock);
        double m = 0;
        for (int64_t j = j0; j < j1; ++j) m = std::max(m, std::fabs(u[j]));
        if (m == 0) continue;
        for (int64_t j = j0; j < j1; ++j) {
          const double w = std::nearbyint(u[j] * kFastWeightSteps / m) * (m / kFastWeightSteps);
          for (int64_t c = 0; c < d; ++c) acc[c] += w * a.v.LoadF32(a.v.Offset(0, g, j, c));
        }
      }
      const int64_t row = h * p.q_len + i;
      for (int64_t c = 0; c < d; ++c) r->o[row * d + c] = acc[c] / rw.l;
    }
  }
}

double RoundToStorage(double x, DType t) {
  return RoundQueryValue(static_cast<float>(x), t);  // bf16 / f16, nearest even
}

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
  const int64_t H = p->num_heads;
  std::vector<Tensor*> tensors = {&in->k, &in->v};
  if (IsScaledKv(p->kv_dtype)) {  // int8 or fp8: and their row scales, [B, G, Tk, 1]
    tensors.push_back(&in->k_scale);
    tensors.push_back(&in->v_scale);
  }
  for (Tensor* t : tensors) {
    const DType type = t->view().dtype;
    const bool scales = t->view().rank == 3;  // [B, G, Tk] (harness/problem_data.cc)
    const int64_t d = scales ? 1 : p->head_dim;
    Tensor out = *Tensor::Attention(type, p->layout, p->batch, H, p->kv_len, d);
    const TensorView src = t->view(), dst = out.view();
    for (int64_t b = 0; b < p->batch; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t j = 0; j < p->kv_len; ++j) {
          for (int64_t c = 0; c < d; ++c) {
            StoreFromF32(out.data(), type, dst.Offset(b, h, j, c),
                         src.LoadF32(src.Offset(b, source(h), j, c)));
          }
        }
      }
    }
    if (scales) {
      TensorView v = out.view();
      v.rank = 3;
      v.shape = {p->batch, H, p->kv_len, 0};
      v.strides[3] = 0;
      ASSERT_TRUE(out.SetView(v).ok());
    }
    *t = std::move(out);
  }
  p->num_kv_heads = H;
}

std::vector<Mutant> Mutants() {
  std::vector<Mutant> m;
  auto none = [](const AttentionProblem&, const ProblemData&, ReferenceResult*) {};
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
  m.push_back({"heads 0 and 1 swapped", keep,
               [](const AttentionProblem& p, const ProblemData&, ReferenceResult* r) {
                 const int64_t rows = p.q_len * p.head_dim;
                 for (int64_t x = 0; x < rows; ++x) std::swap(r->o[x], r->o[rows + x]);
                 for (int64_t i = 0; i < p.q_len; ++i) std::swap(r->lse[i], r->lse[p.q_len + i]);
               }});
  m.push_back({"LSE off by 1e-3", keep,
               [](const AttentionProblem&, const ProblemData&, ReferenceResult* r) {
                 for (double& l : r->lse) l += 1e-3;
               }});
  m.push_back({"one element + 4 ulp", keep, none, true});

  // FAST's own bugs. 16-bit V: P rounded twice, as a weight and again in
  // every partial sum of P.V (summed in V's type instead of f32). Not
  // required, because no sound bound sees them at thousands of keys: P
  // rounded more coarsely than V's type (its errors, of random sign, grow as
  // sqrt(n) against the bound's n, and a probabilistic bound would fail
  // correct kernels on clustered weights, whose roundings share a sign), and
  // Q left unrounded under FAST (an f16 Q error of 2^-12 hides under P's
  // 2^-11 allowance on short rows).
  // fp8 V too (its P is rounded to bf16, and the mutant sums in bf16), with
  // an f32 output: a bf16 output's own rounding hides the sums of a short
  // row (E5M2 with bf16 Q/O, d 16, 17 keys: 0.96 of the bound).
  auto v16 = [](const AttentionProblem& p) {
    return p.kv_dtype == DType::kBF16 || p.kv_dtype == DType::kF16 ||
           (IsFp8(p.kv_dtype) && p.dtype == DType::kF32);
  };
  Mutant summed{"P.V summed in V's type", keep,
                [](const AttentionProblem& p, const ProblemData& in, ReferenceResult* r) {
                  const DType t = p.kv_dtype;
                  RoundedWeightsOutput(
                      p, in, [t](double e) { return RoundToStorage(e, t); },
                      [t](double x) { return RoundToStorage(x, t); }, r);
                }};
  summed.fast_only = true;
  summed.applies = v16;
  m.push_back(summed);
  // int8 K: Q quantized with a scale 2 % too large.
  Mutant wrong_scale{"Q quantized, scale x 1.02",
                     [](AttentionProblem* p, ProblemData* in) {
                       const int64_t d = p->head_dim;
                       std::vector<float> row(static_cast<size_t>(d));
                       std::vector<int8_t> qi(static_cast<size_t>(d));
                       const TensorView q = in->q.view();
                       for (int64_t h = 0; h < p->num_heads; ++h) {
                         for (int64_t i = 0; i < p->q_len; ++i) {
                           for (int64_t c = 0; c < d; ++c) row[c] = q.LoadF32(q.Offset(0, h, i, c));
                           const double s = 1.02 * QuantizeQueryRow(row.data(), d, qi.data());
                           for (int64_t c = 0; c < d; ++c) {
                             const double qc = std::nearbyint(row[c] / s) * s;
                             StoreFromF32(in->q.data(), p->dtype, q.Offset(0, h, i, c),
                                          static_cast<float>(qc));
                           }
                         }
                       }
                       p->compute = ComputeMode::kExact;  // Q already holds the values
                     },
                     none};
  wrong_scale.fast_only = true;
  wrong_scale.applies = [](const AttentionProblem& p) { return p.kv_dtype == DType::kI8; };
  m.push_back(wrong_scale);
  return m;
}

// Writes r into the problem's output tensors, rounded to their dtypes.
void StoreOutputs(const AttentionProblem& p, const ReferenceResult& r, const ProblemData& data) {
  const TensorView o = data.o.view();
  for (int64_t h = 0; h < p.num_heads; ++h) {
    for (int64_t i = 0; i < p.q_len; ++i) {
      for (int64_t c = 0; c < p.value_dim(); ++c) {
        StoreFromF32(data.o.data(), p.dtype, o.Offset(0, h, i, c),
                     static_cast<float>(r.o[(h * p.q_len + i) * p.value_dim() + c]));
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
  const int64_t c = static_cast<int64_t>(at) % p.value_dim();
  const int64_t row = static_cast<int64_t>(at) / p.value_dim();
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
class OracleTest : public ::testing::TestWithParam<std::tuple<DType, DType, ComputeMode>> {};

TEST_P(OracleTest, CatchesEveryPlantedBugAndPassesEveryBackend) {
  const auto [qd, kd, compute] = GetParam();
  const std::vector<Mutant> mutants = Mutants();
  std::map<std::string, Cell> matrix;  // mutant -> counts
  std::map<std::string, std::string> backend_status;
  std::map<std::string, double> backend_fraction;
  for (int64_t d : {16, 64, 128, 256}) {
    for (int64_t tk : {17, 257, 4096}) {
      const AttentionProblem p = GridProblem(qd, kd, d, tk, compute);
      absl::StatusOr<ProblemData> data = GridData(p);
      ASSERT_TRUE(data.ok()) << data.status();
      const ReferenceResult ref = ComputeReference(p, data->args());

      if (FastWeightRoundoff(p) > 0) {  // a legal FAST computation passes
        ReferenceResult r = ref;
        const bool u8 = FastQuantizesWeights(p);
        if (u8) {
          U8WeightsOutput(p, *data, &r);
        } else {
          RoundedWeightsOutput(
              p, *data, [&](double e) { return RoundToStorage(e, p.kv_dtype); },
              [](double x) { return x; }, &r);
        }
        StoreOutputs(p, r, *data);
        const Comparison c = CompareToReference(p, data->args(), ref);
        EXPECT_TRUE(c.ok()) << (u8 ? "P quantized to u8" : "P rounded to V's type")
                            << " fails the FAST oracle on " << p.name << ": " << c.first_failure;
        const std::string legal = u8 ? "(legal FAST u8 P)" : "(legal FAST P rounding)";
        backend_fraction[legal] = std::max(backend_fraction[legal], c.max_bound_fraction);
      }

      for (const Mutant& m : mutants) {
        if (m.fast_only && (!p.fast() || !m.applies(p))) continue;
        AttentionProblem mp = p;
        ProblemData in = std::move(*GridData(p));
        m.before(&mp, &in);
        ReferenceResult r = ComputeReference(mp, in.args());
        m.after(mp, in, &r);
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
  std::printf("\n=== catch matrix, Q/O %s, K/V %s, %s: d {16,64,128,256} x Tk {17,257,4096} ===\n",
              std::string(DTypeName(qd)).c_str(), std::string(DTypeName(kd)).c_str(),
              std::string(ComputeModeName(compute)).c_str());
  std::printf("%-28s %7s %7s %10s\n", "planted bug", "caught", "missed", "invisible");
  for (const Mutant& m : mutants) {
    if (!matrix.count(m.name)) continue;  // FAST's own, not on this grid
    const Cell& cell = matrix[m.name];
    std::printf("%-28s %7d %7d %10d\n", m.name.c_str(), cell.caught, cell.missed, cell.invisible);
  }
  std::printf("=== real backends on the same problems: largest error / bound ===\n");
  for (const auto& [name, fraction] : backend_fraction) {
    std::printf("%-20s %.3f%s\n", name.c_str(), fraction,
                backend_status.count(name) ? ("  (" + backend_status[name] + ")").c_str() : "");
  }
}

// Runs every registered backend whose capabilities claim `claim` on `p`
// and holds it to the oracle; a backend that does not claim it must refuse
// `p`. At least highway, blas and reference must run it.
void ExpectEveryClaimingBackendPasses(const AttentionProblem& p, const ProblemData& data,
                                      const ReferenceResult& ref, bool Capabilities::*claim,
                                      const char* what) {
  int ran = 0;
  for (const std::string& name : GlobalRegistry().Names()) {
    Backend* b = *GlobalRegistry().Find(name);
    if (!(b->Caps().*claim)) {
      EXPECT_FALSE(b->Supports(p).ok()) << name << " claims no " << what << " yet accepts it";
      continue;
    }
    if (!b->Supports(p).ok()) continue;
    PoisonOutputs(data);
    RunInfo info;
    ASSERT_TRUE(RunOnBackend(b, p, data, &info).ok()) << name << " on " << p.name;
    const Comparison c = CompareToReference(p, data.args(), ref);
    EXPECT_TRUE(c.ok()) << name << " [" << info.kernel << "] fails the oracle on " << p.name << ": "
                        << c.first_failure;
    ++ran;
  }
  EXPECT_GE(ran, 3) << "highway, blas and reference take " << what;
}

// Sinks (config.proto sinks): the grid with a sink per head. Every backend
// that claims sinks passes, and each sink bug is caught in every cell: the
// sink left out, scaled like a score, counted in the lse but not in O, and
// read from the next head.
TEST(OracleSinksTest, CatchesEverySinkBugAndPassesEveryBackend) {
  using Bug = std::function<void(const AttentionProblem& p, const ReferenceResult& ref,
                                 ReferenceResult* r)>;
  // Recomputes the reference on inputs (or a problem) rewritten by `edit`.
  auto rerun = [](std::function<void(AttentionProblem*, float* sinks)> edit) -> Bug {
    return [edit](const AttentionProblem& p, const ReferenceResult&, ReferenceResult* r) {
      AttentionProblem mp = p;
      ProblemData in = std::move(*GridData(p));
      edit(&mp, static_cast<float*>(in.sinks.data()));
      *r = ComputeReference(mp, in.args());
    };
  };
  const std::vector<std::pair<std::string, Bug>> bugs = {
      {"sink ignored", rerun([](AttentionProblem* p, float*) { p->sinks = false; })},
      {"sink scaled like a score", rerun([](AttentionProblem* p, float* s) {
         for (int64_t h = 0; h < p->num_heads; ++h) s[h] *= p->scale;
       })},
      {"sink in the lse, not in O",
       [](const AttentionProblem& p, const ReferenceResult& ref, ReferenceResult* r) {
         AttentionProblem mp = p;
         mp.sinks = false;
         ProblemData in = std::move(*GridData(p));
         *r = ComputeReference(mp, in.args());
         r->lse = ref.lse;
       }},
      {"sink of the next head", rerun([](AttentionProblem* p, float* s) {
         const float first = s[0];
         for (int64_t h = 0; h + 1 < p->num_heads; ++h) s[h] = s[h + 1];
         s[p->num_heads - 1] = first;
       })},
  };
  for (DType t : {DType::kF32, DType::kBF16}) {
    for (int64_t d : {16, 128}) {
      for (int64_t tk : {17, 257, 4096}) {
        AttentionProblem p = GridProblem(t, t, d, tk, ComputeMode::kExact);
        p.sinks = true;
        p.name += "_sinks";
        absl::StatusOr<ProblemData> data = GridData(p);
        ASSERT_TRUE(data.ok()) << data.status();
        const ReferenceResult ref = ComputeReference(p, data->args());
        for (const auto& [name, bug] : bugs) {
          ReferenceResult r;
          bug(p, ref, &r);
          StoreOutputs(p, r, *data);
          EXPECT_FALSE(CompareToReference(p, data->args(), ref).ok())
              << "the oracle missed '" << name << "' on " << p.name;
        }
        ASSERT_NO_FATAL_FAILURE(
            ExpectEveryClaimingBackendPasses(p, *data, ref, &Capabilities::sinks, "sinks"));
      }
    }
  }
}

// ALiBi (config.proto alibi): the grid with a slope per head and keys on both
// sides of the diagonal. Every backend that claims ALiBi passes, and each
// ALiBi bug is caught in every cell. A bug is the reference run without ALiBi
// and its (wrong) term added to the grid's bias: the sign flipped, the
// distance one-sided, the diagonal one key off, measured from the top-left
// corner, the slope of the next head, the term scaled like a score.
TEST(OracleAlibiTest, CatchesEveryAlibiBugAndPassesEveryBackend) {
  // term(p, slope of head h, slope of head h + 1, diagonal, key): the bug's
  // ALiBi term for one pair.
  using Term = std::function<double(const AttentionProblem& p, double slope, double next_slope,
                                    int64_t diag, int64_t i, int64_t j)>;
  auto dist = [](int64_t a, int64_t b) { return static_cast<double>(a > b ? a - b : b - a); };
  const std::vector<std::pair<std::string, Term>> bugs = {
      {"slope sign flipped", [&](const AttentionProblem&, double s, double, int64_t diag, int64_t,
                                 int64_t j) { return s * dist(diag, j); }},
      {"distance one-sided",
       [&](const AttentionProblem&, double s, double, int64_t diag, int64_t, int64_t j) {
         return -s * static_cast<double>(std::max<int64_t>(diag - j, 0));
       }},
      {"diagonal one key off", [&](const AttentionProblem&, double s, double, int64_t diag, int64_t,
                                   int64_t j) { return -s * dist(diag + 1, j); }},
      {"distance from the top-left corner", [&](const AttentionProblem&, double s, double, int64_t,
                                                int64_t i, int64_t j) { return -s * dist(i, j); }},
      {"slope of the next head", [&](const AttentionProblem&, double, double next, int64_t diag,
                                     int64_t, int64_t j) { return -next * dist(diag, j); }},
      {"term scaled like a score",
       [&](const AttentionProblem& p, double s, double, int64_t diag, int64_t, int64_t j) {
         return -s * double(p.scale) * dist(diag, j);
       }},
  };
  for (DType t : {DType::kF32, DType::kBF16}) {
    for (int64_t d : {16, 128}) {
      for (int64_t tk : {17, 257, 4096}) {
        AttentionProblem p = GridProblem(t, t, d, tk, ComputeMode::kExact);
        p.alibi = true;
        p.window_right = 5;  // keys after the diagonal too
        p.name += "_alibi";
        absl::StatusOr<ProblemData> data = GridData(p);
        ASSERT_TRUE(data.ok()) << data.status();
        const ReferenceResult ref = ComputeReference(p, data->args());
        const auto* slopes = static_cast<const float*>(data->alibi_slopes.data());
        for (const auto& [name, term] : bugs) {
          AttentionProblem mp = p;
          mp.alibi = false;
          ProblemData in = std::move(*GridData(p));
          auto* bias = static_cast<float*>(in.bias.data());
          const TensorView bv = in.bias.view();
          for (int64_t h = 0; h < p.num_heads; ++h) {
            for (int64_t i = 0; i < p.q_len; ++i) {
              const int64_t diag = Diagonal(p.mask_params(0), i, p.kv_len);
              for (int64_t j = 0; j < p.kv_len; ++j) {
                bias[bv.Offset(0, h, i, j)] += static_cast<float>(
                    term(p, slopes[h], slopes[(h + 1) % p.num_heads], diag, i, j));
              }
            }
          }
          ReferenceResult r = ComputeReference(mp, in.args());
          StoreOutputs(p, r, *data);
          EXPECT_FALSE(CompareToReference(p, data->args(), ref).ok())
              << "the oracle missed '" << name << "' on " << p.name;
        }
        ASSERT_NO_FATAL_FAILURE(
            ExpectEveryClaimingBackendPasses(p, *data, ref, &Capabilities::alibi, "ALiBi"));
      }
    }
  }
}

// A value head dim of its own (config.proto value_head_dim, Ev != E), below
// and above E, and MLA's 576 / 512. Every backend that claims it passes, and
// each Ev bug is caught: V read with K's head dim (its rows E elements apart
// in V's buffer), O written with K's head dim (rows E apart in O's), only
// the first min(E, Ev) columns of O computed, and V's columns past E
// dropped from the product.
TEST(OracleValueHeadDimTest, CatchesEveryValueDimBugAndPassesEveryBackend) {
  using Bug = std::function<void(const AttentionProblem& p, ProblemData* in, ReferenceResult* r)>;
  // Element x of a [rows, n] array read (or written) as if its rows were
  // `stride` apart: what lands at flat offset row * stride + c; 0 past the
  // end of the buffer (a kernel would read whatever lies there).
  auto restride = [](const std::vector<double>& from, int64_t n, int64_t stride) {
    std::vector<double> to(from.size(), 0.0);
    for (size_t x = 0; x < from.size(); ++x) {
      const int64_t row = static_cast<int64_t>(x) / n, c = static_cast<int64_t>(x) % n;
      const int64_t at = row * stride + c;
      if (at < static_cast<int64_t>(from.size())) to[x] = from[static_cast<size_t>(at)];
    }
    return to;
  };
  const std::vector<std::pair<std::string, Bug>> bugs = {
      {"V read with K's head dim",
       [&](const AttentionProblem& p, ProblemData* in, ReferenceResult* r) {
         const TensorView v = in->v.view();  // dense BHTD: rows Ev apart
         std::vector<double> flat(static_cast<size_t>(v.NumElements()));
         for (size_t x = 0; x < flat.size(); ++x) flat[x] = v.LoadF32(static_cast<int64_t>(x));
         flat = restride(flat, p.value_dim(), p.head_dim);
         for (size_t x = 0; x < flat.size(); ++x) {
           StoreFromF32(in->v.data(), v.dtype, static_cast<int64_t>(x),
                        static_cast<float>(flat[x]));
         }
         *r = ComputeReference(p, in->args());
       }},
      {"O written with K's head dim",
       [&](const AttentionProblem& p, ProblemData* in, ReferenceResult* r) {
         *r = ComputeReference(p, in->args());
         // Row q of the kernel's output lands at q * E: what O row x shows.
         std::vector<double> shown(r->o.size(), 0.0);
         const int64_t dv = p.value_dim(), d = p.head_dim;
         for (size_t x = 0; x < r->o.size(); ++x) {
           const int64_t at = static_cast<int64_t>(x);  // the written element's offset...
           const int64_t row = at / dv, c = at % dv;
           const int64_t to = row * d + c;  // ...lands here
           if (to < static_cast<int64_t>(shown.size())) shown[static_cast<size_t>(to)] = r->o[x];
         }
         r->o = shown;
       }},
      {"O's columns past min(E, Ev) left at 0",
       [&](const AttentionProblem& p, ProblemData* in, ReferenceResult* r) {
         *r = ComputeReference(p, in->args());
         const int64_t dv = p.value_dim(), keep = std::min(p.head_dim, dv);
         for (size_t x = 0; x < r->o.size(); ++x) {
           if (static_cast<int64_t>(x) % dv >= keep) r->o[x] = 0.0;
         }
       }},
      {"V's columns past E dropped",
       [&](const AttentionProblem& p, ProblemData* in, ReferenceResult* r) {
         const TensorView v = in->v.view();
         for (int64_t x = 0; x < v.NumElements(); ++x) {
           if (x % p.value_dim() >= p.head_dim) StoreFromF32(in->v.data(), v.dtype, x, 0.0f);
         }
         *r = ComputeReference(p, in->args());
       }},
  };
  for (DType t : {DType::kF32, DType::kBF16}) {
    for (const auto& [d, dv] :
         std::vector<std::pair<int64_t, int64_t>>{{16, 40}, {128, 64}, {192, 128}, {576, 512}}) {
      for (int64_t tk : {17, 257}) {
        AttentionProblem p = GridProblem(t, t, d, tk, ComputeMode::kExact);
        p.value_head_dim = dv;
        p.name += absl::StrFormat("_dv%d", dv);
        absl::StatusOr<ProblemData> data = GridData(p);
        ASSERT_TRUE(data.ok()) << data.status();
        const ReferenceResult ref = ComputeReference(p, data->args());
        for (const auto& [name, bug] : bugs) {
          // A bug that is no bug here: nothing past E when Ev <= E.
          if (name == "V's columns past E dropped" && dv <= d) continue;
          if (name == "O's columns past min(E, Ev) left at 0" && dv <= d) continue;
          ProblemData in = std::move(*GridData(p));
          ReferenceResult r;
          bug(p, &in, &r);
          StoreOutputs(p, r, *data);
          EXPECT_FALSE(CompareToReference(p, data->args(), ref).ok())
              << "the oracle missed '" << name << "' on " << p.name;
        }
        ASSERT_NO_FATAL_FAILURE(ExpectEveryClaimingBackendPasses(
            p, *data, ref, &Capabilities::value_head_dim, "value_head_dim"));
      }
    }
  }
}

// fp8 K/V (config.proto FP8_E4M3 and FP8_E5M2): codes times a scale per row.
// Every backend that takes the format passes, per-row and per-tensor
// (stride-0) scales alike, in both compute modes (FAST: Q and P rounded to
// bf16), and each fp8 bug is caught: the scale applied twice, the scale
// ignored, the codes read in the other format, V read with K's scales.
TEST(OracleFp8Test, CatchesEveryFp8BugAndPassesEveryBackend) {
  using Bug = std::function<void(AttentionProblem * p, AttentionArgs * a, ProblemData * in)>;
  auto scales = [](ProblemData* in, const std::function<float(float)>& f) {
    for (Tensor* t : {&in->k_scale, &in->v_scale}) {
      float* x = static_cast<float*>(t->data());
      for (int64_t i = 0; i < t->view().NumElements(); ++i) x[i] = f(x[i]);
    }
  };
  const std::vector<std::pair<std::string, Bug>> bugs = {
      {"scale applied twice", [&](AttentionProblem*, AttentionArgs*,
                                  ProblemData* in) { scales(in, [](float x) { return x * x; }); }},
      {"scale ignored", [&](AttentionProblem*, AttentionArgs*,
                            ProblemData* in) { scales(in, [](float) { return 1.0f; }); }},
      {"codes read in the other format",
       [](AttentionProblem* p, AttentionArgs* a, ProblemData*) {
         p->kv_dtype = p->kv_dtype == DType::kF8E4M3 ? DType::kF8E5M2 : DType::kF8E4M3;
         a->k.dtype = a->v.dtype = p->kv_dtype;
       }},
      {"V read with K's scales",
       [](AttentionProblem*, AttentionArgs* a, ProblemData*) { a->v_scale = a->k_scale; }},
  };
  for (DType kv : {DType::kF8E4M3, DType::kF8E5M2}) {
    for (int64_t d : {16, 128}) {
      for (int64_t tk : {17, 257}) {
        for (bool per_tensor : {false, true}) {
          for (ComputeMode mode : {ComputeMode::kExact, ComputeMode::kFast}) {
            AttentionProblem p = GridProblem(DType::kF32, kv, d, tk, mode);
            p.name += per_tensor ? "_tensor_scale" : "_row_scales";
            absl::StatusOr<ProblemData> data = GridData(p);
            ASSERT_TRUE(data.ok()) << data.status();
            // One scale per tensor: every row reads element 0 (a stride-0 view).
            auto per_tensor_scales = [&](ProblemData* d) {
              if (!per_tensor) return;
              for (Tensor* t : {&d->k_scale, &d->v_scale}) {
                TensorView v = t->view();
                v.strides = {0, 0, 0, 0};
                ASSERT_TRUE(t->SetView(v).ok());
              }
            };
            per_tensor_scales(&*data);
            const ReferenceResult ref = ComputeReference(p, data->args());
            // FAST grants each weight 2^-8 (P rounded to bf16) against A_c and
            // |o_c| (compare.h): V read with K's scale, one per tensor, scales
            // O by their ratio, which that hides within 2^-7 (random K and V
            // have nearly the same largest value, so nearly the same scale).
            const float ks = static_cast<const float*>(data->k_scale.data())[0];
            const float vs = static_cast<const float*>(data->v_scale.data())[0];
            const bool scales_apart = std::fabs(ks / vs - 1.0f) > 0x1p-7f;
            for (const auto& [name, bug] : bugs) {
              if (mode == ComputeMode::kFast && per_tensor && name == "V read with K's scales" &&
                  !scales_apart) {
                continue;
              }
              AttentionProblem mp = p;
              ProblemData in = std::move(*GridData(p));
              per_tensor_scales(&in);
              AttentionArgs args = in.args();
              bug(&mp, &args, &in);
              const ReferenceResult r = ComputeReference(mp, args);
              StoreOutputs(p, r, *data);
              EXPECT_FALSE(CompareToReference(p, data->args(), ref).ok())
                  << "the oracle missed '" << name << "' on " << p.name;
            }
            int ran = 0;
            for (const std::string& backend : GlobalRegistry().Names()) {
              Backend* b = *GlobalRegistry().Find(backend);
              if (!b->Supports(p).ok()) continue;
              PoisonOutputs(*data);
              RunInfo info;
              ASSERT_TRUE(RunOnBackend(b, p, *data, &info).ok()) << backend << " on " << p.name;
              const Comparison c = CompareToReference(p, data->args(), ref);
              EXPECT_TRUE(c.ok()) << backend << " [" << info.kernel << "] fails the oracle on "
                                  << p.name << ": " << c.first_failure;
              ++ran;
            }
            if (mode == ComputeMode::kExact) {
              EXPECT_GE(ran, 3) << "highway, blas and reference take " << DTypeName(kv);
            } else {
              EXPECT_GE(ran, 2) << "highway and reference take " << DTypeName(kv) << " FAST";
            }
          }
        }
      }
    }
  }
}

std::vector<std::tuple<DType, DType, ComputeMode>> DTypePairs() {
  std::vector<std::tuple<DType, DType, ComputeMode>> pairs;
  for (DType q : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType kv : {DType::kF32, DType::kF16, DType::kBF16}) {
      pairs.emplace_back(q, kv, ComputeMode::kExact);
    }
  }
  // FAST on every K/V type it rounds to: Q in f32 (rounded) and in K's type.
  for (DType kv : {DType::kBF16, DType::kF16}) {
    pairs.emplace_back(DType::kF32, kv, ComputeMode::kFast);
    pairs.emplace_back(kv, kv, ComputeMode::kFast);
  }
  pairs.emplace_back(DType::kF32, DType::kI8, ComputeMode::kFast);
  pairs.emplace_back(DType::kBF16, DType::kI8, ComputeMode::kFast);
  // fp8 under FAST: Q (and P) rounded to bf16.
  pairs.emplace_back(DType::kF32, DType::kF8E4M3, ComputeMode::kFast);
  pairs.emplace_back(DType::kBF16, DType::kF8E5M2, ComputeMode::kFast);
  return pairs;
}

INSTANTIATE_TEST_SUITE_P(
    AllDTypes, OracleTest, ::testing::ValuesIn(DTypePairs()),
    [](const ::testing::TestParamInfo<std::tuple<DType, DType, ComputeMode>>& info) {
      return absl::StrCat("q", DTypeName(std::get<0>(info.param)), "_kv",
                          DTypeName(std::get<1>(info.param)), "_",
                          ComputeModeName(std::get<2>(info.param)));
    });

}  // namespace
}  // namespace attnkit
