// The oracle proven by planted bugs on the conformance suite's own problems
// and data (issue 33), where //tests:oracle_test plants them on a grid of
// dense problems with queries scaled x6. Plain U(-1, 1) data hides some bugs
// (its scores are small), so each planted bug here is required to be caught
// only where it visibly changes the outputs (more than 1e-3 of the row's
// largest |o| in f32 outputs, 2e-2 in 16-bit ones, or the LSE by 1e-4);
// the test prints how often that held. The problems: a sample of every
// family of the conformance grid (tests/conformance_grid.h): dense f32 and
// 16-bit, FAST, paged, ragged, int8 K/V, padded (per-sequence lengths) and
// NaN/Inf inputs.
//
// A mutant's outputs are what the reference backend computes on the planted
// problem (so every layout the backend supports, paged and ragged included,
// is written as a backend writes it), then compared, as the conformance
// suite compares a backend, with CompareToReference against the unplanted
// reference. Bugs confined to one code path are planted on the keys that
// path alone sees: the last, partial, key tile of a row (64 keys, the wide
// tiles' size), and the second half of each row's keys (a split-K merge that
// rescales one partial 5 % wrong is V x 1.05 on that partial's keys).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/reference/reference_backend.h"
#include "core/kv_rows.h"
#include "core/mask.h"
#include "gtest/gtest.h"
#include "harness/execute.h"
#include "harness/problem_data.h"
#include "oracle/compare.h"
#include "oracle/reference.h"
#include "tests/conformance_grid.h"

namespace attnkit {
namespace {

constexpr int64_t kTile = 64;  // the wide tiles' keys (backends/highway/tiling.h)

// Multiplies K (which = k) or V rows [lo(b), hi(b)) of every (b, g) by
// `factor`: the stored values (rounded to their type), or an int8 row's scale.
void ScaleRows(const AttentionProblem& p, ProblemData* in, bool keys,
               const std::function<int64_t(int64_t)>& lo, const std::function<int64_t(int64_t)>& hi,
               float factor) {
  const AttentionArgs a = in->args();
  const KvRows rows(p, a);
  Tensor& t = keys ? in->k : in->v;
  const TensorView view = keys ? a.k : a.v;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t g = 0; g < p.num_kv_heads; ++g) {
      for (int64_t j = std::max<int64_t>(0, lo(b)); j < hi(b); ++j) {
        if (p.kv_dtype == DType::kI8) {
          const TensorView& sv = keys ? a.k_scale : a.v_scale;
          float* scale = static_cast<float*>(keys ? in->k_scale.data() : in->v_scale.data());
          scale[rows.ScaleOffset(sv, b, g, j)] *= factor;
          continue;
        }
        const int64_t row = rows.Offset(view, b, g, j);
        for (int64_t c = 0; c < p.head_dim; ++c) {
          const int64_t off = row + c * view.strides[3];
          StoreFromF32(t.data(), view.dtype, off, factor * view.LoadF32(off));
        }
      }
    }
  }
}

struct Mutant {
  std::string name;
  // Plants the bug in the problem and inputs the reference backend runs on.
  std::function<void(AttentionProblem* p, ProblemData* in)> before;
  // Plants it in the outputs after (o, lse as the backend stored them).
  std::function<void(const AttentionProblem& p, ProblemData* out)> after;
  bool needs_lse = false;
  bool dense_rows = false;  // plants in K/V rows: not on ragged batches
};

std::vector<Mutant> Mutants() {
  const auto keep = [](AttentionProblem*, ProblemData*) {};
  const auto none = [](const AttentionProblem&, ProblemData*) {};
  std::vector<Mutant> m;
  m.push_back({"scale x 1.01", [](AttentionProblem* p, ProblemData*) { p->scale *= 1.01f; }, none});
  m.push_back({"LSE off by 1e-3", keep,
               [](const AttentionProblem&, ProblemData* out) {
                 float* lse = static_cast<float*>(out->lse.data());
                 const int64_t n = out->lse.view().SpanElements();
                 for (int64_t x = 0; x < n; ++x) lse[x] += 1e-3f;
               },
               /*needs_lse=*/true});
  // The last tile of each sequence's keys, when it is partial, scored 2 % too
  // high (its K rows x 1.02): a bug of the tail path alone.
  m.push_back({"last partial tile's scores x 1.02",
               [](AttentionProblem* p, ProblemData* in) {
                 auto lo = [p](int64_t b) {
                   const int64_t n = p->KvLength(b);
                   return n % kTile == 0 ? n : n / kTile * kTile;
                 };
                 ScaleRows(
                     *p, in, /*keys=*/true, lo, [p](int64_t b) { return p->KvLength(b); }, 1.02f);
               },
               none, false, /*dense_rows=*/true});
  // A split-K merge that rescales its second partial 5 % too much.
  m.push_back({"split-K: second half's partial x 1.05",
               [](AttentionProblem* p, ProblemData* in) {
                 ScaleRows(
                     *p, in, /*keys=*/false, [p](int64_t b) { return p->KvLength(b) / 2; },
                     [p](int64_t b) { return p->KvLength(b); }, 1.05f);
               },
               none, false, /*dense_rows=*/true});
  // One output row never written (left as NaN).
  m.push_back({"first row left NaN", keep, [](const AttentionProblem& p, ProblemData* out) {
                 const TensorView o = out->o.view();
                 for (int64_t c = 0; c < p.head_dim; ++c) {
                   StoreFromF32(out->o.data(), p.dtype, o.Offset(0, 0, 0, c), NAN);
                 }
               }});
  return m;
}

// Copies the elements of `from` into `to` (same dtype and view).
void CopyStorage(const Tensor& from, Tensor* to) {
  const TensorView& v = from.view();
  std::memcpy(to->data(), from.data(), static_cast<size_t>(v.SpanElements()) * DTypeSize(v.dtype));
}

// Whether some query row of p sees no key at all (its output must be 0).
bool HasBlockedRows(const AttentionProblem& p) {
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t i = 0; i < p.QLength(b); ++i) {
      const KeyRange r = VisibleKeys(p.mask_params(b), i, p.KvLength(b));
      if (r.begin >= r.end) return true;
    }
  }
  return false;
}

// A sample of every family of the conformance grid, of modest size.
std::vector<AttentionProblem> SampleOfTheGrid() {
  std::map<std::string, int> taken;
  std::vector<AttentionProblem> out;
  for (const AttentionProblem& p : ConformanceGrid()) {
    // Past one key tile (the grid starts with one-key problems, where a
    // row's only weight is 1 whatever the scores), and of modest size.
    if (p.backward || p.kv_len < 17 ||
        p.batch * p.num_heads * p.q_len * p.kv_len > (int64_t{1} << 20)) {
      continue;
    }
    std::string family = HasBlockedRows(p)           ? "blocked rows"
                         : p.is_ragged()             ? "ragged"
                         : p.page_size > 0           ? "paged"
                         : p.kv_dtype == DType::kI8  ? "int8"
                         : p.nonfinite_inputs > 0    ? "nonfinite"
                         : !p.kv_lengths.empty()     ? "padded"
                         : p.fast()                  ? "fast"
                         : p.dtype != DType::kF32    ? "16-bit"
                         : p.kv_dtype != DType::kF32 ? "16-bit kv"
                                                     : "f32";
    if (++taken[family] <= 3) out.push_back(p);
  }
  return out;
}

// Whether `got` (the mutant's stored outputs) differs visibly from the
// reference: see the file comment.
bool Visible(const AttentionProblem& p, const ProblemData& got, const ReferenceResult& ref) {
  const double tol = p.dtype == DType::kF32 ? 1e-3 : 2e-2;
  const TensorView o = got.o.view();
  const int64_t d = p.head_dim;
  const int64_t rows = static_cast<int64_t>(ref.lse.size());
  // Rows in the reference's order: ragged sequences one after the other.
  int64_t row = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.num_heads; ++h) {
      for (int64_t i = 0; i < p.QLength(b); ++i, ++row) {
        if (row >= rows) return false;
        double peak = 0;
        for (int64_t c = 0; c < d; ++c) peak = std::max(peak, std::fabs(ref.o[row * d + c]));
        const bool finite_ref = std::isfinite(ref.lse[row]) || ref.lse[row] == -INFINITY;
        for (int64_t c = 0; c < d; ++c) {
          const int64_t off = p.is_ragged() ? -1 : o.Offset(b, h, i, c);
          if (off < 0) break;  // ragged outputs: judged by the LSE below
          const double v = o.LoadF32(off), want = ref.o[row * d + c];
          if (finite_ref && std::isfinite(want) &&
              (!std::isfinite(v) || std::fabs(v - want) > tol * peak + 1e-30)) {
            return true;
          }
        }
      }
    }
  }
  if (got.lse.data() != nullptr && !p.is_ragged()) {
    const float* lse = static_cast<const float*>(got.lse.data());
    for (int64_t r = 0; r < rows; ++r) {
      if (std::isfinite(ref.lse[r]) && std::fabs(lse[r] - ref.lse[r]) > 1e-4) return true;
    }
  }
  return p.is_ragged();  // ragged: every planted bug here changes some row
}

TEST(OracleSuiteDataTest, CatchesPlantedBugsOnTheConformanceData) {
  std::unique_ptr<Backend> reference = MakeReferenceBackend();
  struct Cell {
    int caught = 0, missed = 0, invisible = 0, not_applicable = 0;
  };
  std::map<std::string, Cell> matrix;
  const std::vector<Mutant> mutants = Mutants();
  const std::vector<AttentionProblem> problems = SampleOfTheGrid();
  ASSERT_GE(problems.size(), 20u);
  for (const AttentionProblem& p : problems) {
    absl::StatusOr<ProblemData> data = ProblemData::Random(p, p.seed);
    ASSERT_TRUE(data.ok()) << p.name << ": " << data.status();
    const ReferenceResult ref = ComputeReference(p, data->args());
    for (const Mutant& m : mutants) {
      Cell& cell = matrix[m.name];
      if ((m.needs_lse && !p.return_lse) || (m.dense_rows && p.is_ragged())) {
        ++cell.not_applicable;
        continue;
      }
      AttentionProblem mp = p;
      absl::StatusOr<ProblemData> in = ProblemData::Random(p, p.seed);
      ASSERT_TRUE(in.ok());
      m.before(&mp, &*in);
      PoisonOutputs(*in);
      RunInfo info;
      ASSERT_TRUE(RunOnBackend(reference.get(), mp, *in, &info).ok()) << m.name << " " << p.name;
      m.after(mp, &*in);
      // The planted outputs in place of the problem's own.
      CopyStorage(in->o, &data->o);
      if (p.return_lse) CopyStorage(in->lse, &data->lse);
      if (!Visible(p, *data, ref)) {
        ++cell.invisible;
        continue;
      }
      const Comparison c = CompareToReference(p, data->args(), ref);
      if (c.ok()) {
        ++cell.missed;
        ADD_FAILURE() << "the oracle missed '" << m.name << "' on " << p.name
                      << " (largest error/bound " << c.max_bound_fraction << ")";
      } else {
        ++cell.caught;
      }
    }
  }
  std::printf("\n=== catch matrix on %zu conformance problems (U(-1,1) data) ===\n",
              problems.size());
  for (const AttentionProblem& p : problems) std::printf("  %s\n", p.name.c_str());
  std::printf("%-40s %7s %7s %10s %6s\n", "planted bug", "caught", "missed", "invisible", "n/a");
  for (const Mutant& m : mutants) {
    const Cell& c = matrix[m.name];
    std::printf("%-40s %7d %7d %10d %6d\n", m.name.c_str(), c.caught, c.missed, c.invisible,
                c.not_applicable);
    // Each bug is seen somewhere: a sample that never shows it proves nothing.
    EXPECT_GT(c.caught, 0) << m.name;
  }
}

}  // namespace
}  // namespace attnkit
