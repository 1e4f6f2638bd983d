// CompareSampledRows (oracle/compare.h), the check of `verify`, `compare` and
// the GPU torch comparison, proven by planted bugs: outputs built from the
// fp64 reference with one bug each must be rejected, the correct outputs
// accepted. Problems: causal GQA (the conformance suite's kind), the oracle
// grid's window + softcap + bias, and a ragged batch (sampled per sequence);
// data: U(-1, 1) (the conformance suite's) and the oracle grid's (Q x 6);
// Q/O and K/V in f32, f16 and bf16.
//
// Sampling: CompareSampledRows checks `max_rows` rows spread over the
// problem, the first and the last always among them (a ragged batch: each
// sequence its share, at least its last row). A bug planted in every row
// cannot be missed. A bug in one row (a row never written) is planted where
// sampling must look: the first and the last row (of a ragged batch, each
// sequence's last), and a middle row with max_rows = every row.
// SamplesTheRowsItPromises proves those rows are sampled.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/mask.h"
#include "core/ragged.h"
#include "gtest/gtest.h"
#include "harness/problem_data.h"
#include "oracle/compare.h"
#include "oracle/reference.h"
#include "tests/oracle_grid.h"

namespace attnkit {
namespace {

constexpr int64_t kSampleRows = 8;

// A query row, addressed in the tensors of its problem (a ragged batch: of
// its sequence, whose b is 0), in ComputeReference's order.
struct Row {
  AttentionProblem p;
  AttentionArgs a;
  int64_t b, h, i;
  bool last_of_sequence;
};

std::vector<Row> Rows(const AttentionProblem& p, const AttentionArgs& a) {
  std::vector<Row> rows;
  auto add = [&rows](const AttentionProblem& q, const AttentionArgs& qa) {
    for (int64_t b = 0; b < q.batch; ++b) {
      for (int64_t h = 0; h < q.num_heads; ++h) {
        for (int64_t i = 0; i < q.q_len; ++i) {
          rows.push_back({q, qa, b, h, i, h == q.num_heads - 1 && i == q.q_len - 1});
        }
      }
    }
  };
  if (!p.is_ragged()) {
    add(p, a);
  } else {
    for (const SequenceCall& s : RaggedSequences(p, a)) add(s.problem, s.args);
  }
  return rows;
}

// Writes `r` into a's o (rounded to its dtype) and lse, as a backend would.
void Store(const AttentionProblem& p, const AttentionArgs& a, const ReferenceResult& r) {
  const std::vector<Row> rows = Rows(p, a);
  ASSERT_EQ(rows.size(), r.lse.size());
  const int64_t d = p.head_dim;
  for (size_t n = 0; n < rows.size(); ++n) {
    const Row& x = rows[n];
    for (int64_t c = 0; c < d; ++c) {
      StoreFromF32(x.a.o.data, x.a.o.dtype, x.a.o.Offset(x.b, x.h, x.i, c),
                   static_cast<float>(r.o[n * d + c]));
    }
    static_cast<float*>(x.a.lse.data)[x.a.lse.Offset(x.b, x.h, x.i)] = static_cast<float>(r.lse[n]);
  }
}

double RoundTo(DType t, double x) {
  float stored = 0;  // room for any float dtype
  StoreFromF32(&stored, t, 0, static_cast<float>(x));
  return LoadAsF32(&stored, t, 0);
}

// A planted bug: the outputs it gives, from the case and its reference.
struct Mutant {
  std::string name;
  std::function<bool(const AttentionProblem&)> applies;
  bool lse_only;  // else O is wrong too, and the bug is caught without the LSE
  std::function<ReferenceResult(const AttentionProblem&, const ProblemData&,
                                const ReferenceResult&)>
      outputs;
};

bool Always(const AttentionProblem&) { return true; }

AttentionProblem WithoutLse(AttentionProblem p) {
  p.return_lse = false;  // CompareSampledRows then reads no LSE
  return p;
}

std::vector<Mutant> Mutants() {
  std::vector<Mutant> m;
  m.push_back({"scores x 1.02", Always, false,
               [](const AttentionProblem& p, const ProblemData& in, const ReferenceResult&) {
                 AttentionProblem mp = p;
                 mp.scale *= 1.02f;
                 return ComputeReference(mp, in.args());
               }});
  m.push_back({"output x 1.02", Always, false,
               [](const AttentionProblem&, const ProblemData&, const ReferenceResult& ref) {
                 ReferenceResult r = ref;
                 for (double& o : r.o) o *= 1.02;
                 return r;
               }});
  // A ragged batch takes no dense mask, which is how the key is dropped.
  m.push_back(
      {"drop the last visible key", [](const AttentionProblem& p) { return !p.is_ragged(); }, false,
       [](const AttentionProblem& p, const ProblemData& in, const ReferenceResult&) {
         AttentionProblem mp = p;
         mp.blocked_mask = true;
         Tensor mask = *Tensor::Contiguous(DType::kU8, {p.batch, p.num_heads, p.q_len, p.kv_len});
         auto* blocked = static_cast<uint8_t*>(mask.data());
         for (int64_t b = 0; b < p.batch; ++b) {
           for (int64_t h = 0; h < p.num_heads; ++h) {
             for (int64_t i = 0; i < p.q_len; ++i) {
               const KeyRange keys = VisibleKeys(p.mask_params(b), i, p.KvLength(b));
               for (int64_t j = 0; j < p.kv_len; ++j) {
                 blocked[((b * p.num_heads + h) * p.q_len + i) * p.kv_len + j] =
                     j == keys.end - 1 ? 1 : 0;
               }
             }
           }
         }
         AttentionArgs a = in.args();
         a.blocked_mask = mask.view();
         return ComputeReference(mp, a);
       }});
  // Each row sees one key past its diagonal (causal: j <= i + 1).
  m.push_back({"causal diagonal off by one", Always, false,
               [](const AttentionProblem& p, const ProblemData& in, const ReferenceResult&) {
                 AttentionProblem mp = p;
                 if (p.mask != MaskKind::kSlidingWindow) mp.window_left = -1;
                 mp.mask = MaskKind::kSlidingWindow;
                 mp.window_right = 1;
                 return ComputeReference(mp, in.args());
               }});
  m.push_back({"LSE + 1e-3", Always, true,
               [](const AttentionProblem&, const ProblemData&, const ReferenceResult& ref) {
                 ReferenceResult r = ref;
                 for (double& l : r.lse) l += 1e-3;
                 return r;
               }});
  m.push_back({"LSE in base 2", Always, true,
               [](const AttentionProblem&, const ProblemData&, const ReferenceResult& ref) {
                 ReferenceResult r = ref;
                 for (double& l : r.lse) l /= std::log(2.0);
                 return r;
               }});
  // 16-bit O rounded twice: the unnormalised sum stored in O's dtype, then
  // divided by the row sum l = sum_j exp(s_j - max s) and rounded again.
  m.push_back({"16-bit O rounded twice",
               [](const AttentionProblem& p) { return p.dtype != DType::kF32; }, false,
               [](const AttentionProblem& p, const ProblemData& in, const ReferenceResult& ref) {
                 ReferenceResult r = ref;
                 const std::vector<Row> rows = Rows(p, in.args());
                 std::vector<double> scores(static_cast<size_t>(p.kv_len)),
                     o(static_cast<size_t>(p.head_dim));
                 for (size_t n = 0; n < rows.size(); ++n) {
                   const Row& x = rows[n];
                   std::fill(scores.begin(), scores.end(), -INFINITY);
                   const double lse = ReferenceRow(x.p, x.a, x.b, x.h, x.i, &scores, o.data());
                   if (!std::isfinite(lse)) continue;
                   const double l = std::exp(lse - *std::max_element(scores.begin(), scores.end()));
                   for (int64_t c = 0; c < p.head_dim; ++c) {
                     double& v = r.o[n * p.head_dim + c];
                     v = RoundTo(p.dtype, RoundTo(p.dtype, v * l) / l);
                   }
                 }
                 return r;
               }});
  return m;
}

struct Case {
  std::string name;
  AttentionProblem p;
  bool grid_data;  // the oracle grid's (Q x 6), else U(-1, 1)
};

// Causal GQA over a batch of 2; the oracle grid's problem with 33 queries;
// a ragged batch of 3 (5, 0 and 17 queries over 20, 9 and 40 keys).
std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    AttentionProblem causal = BasicProblem(2, 4, 2, 65, 65, 64);
    causal.dtype = causal.kv_dtype = t;
    causal.mask = MaskKind::kCausal;
    causal.alignment = Alignment::kBottomRight;
    causal.return_lse = true;
    causal.name = absl::StrCat("causal_gqa_", DTypeName(t));
    AttentionProblem grid = OracleGridProblem(t, t, 64, 257, 33);
    AttentionProblem ragged = BasicProblem(3, 4, 2, 17, 40, 32);
    ragged.dtype = ragged.kv_dtype = t;
    ragged.layout = Layout::kBTHD;  // packed [tokens, heads, d]
    ragged.q_lengths = {5, 0, 17};
    ragged.kv_lengths = {20, 9, 40};
    ragged.mask = MaskKind::kCausal;
    ragged.alignment = Alignment::kBottomRight;
    ragged.return_lse = true;
    ragged.name = absl::StrCat("ragged_", DTypeName(t));
    for (const AttentionProblem& p : {causal, grid, ragged}) {
      EXPECT_TRUE(ValidateProblem(p).ok()) << p.name << ": " << ValidateProblem(p);
      cases.push_back({p.name + "_uniform", p, false});
      cases.push_back({p.name + "_gridq6", p, true});
    }
  }
  return cases;
}

absl::StatusOr<ProblemData> CaseData(const Case& c) {
  const uint64_t seed = 77 + c.p.head_dim;
  return c.grid_data ? OracleGridData(c.p, seed) : ProblemData::Random(c.p, seed);
}

// The rows where a one-row bug is planted, each with the max_rows that must
// sample it (file comment).
std::vector<std::pair<size_t, int64_t>> PlantedRows(const AttentionProblem& p,
                                                    const std::vector<Row>& rows) {
  const int64_t all = static_cast<int64_t>(rows.size());
  std::vector<std::pair<size_t, int64_t>> at = {{rows.size() / 2, all},
                                                {rows.size() - 1, kSampleRows}};
  if (!p.is_ragged()) at.push_back({0, kSampleRows});
  for (size_t n = 0; n < rows.size(); ++n) {
    if (p.is_ragged() && rows[n].last_of_sequence) at.push_back({n, kSampleRows});
  }
  return at;
}

TEST(SampledRowsTest, RejectsEveryPlantedBugAndPassesTheReference) {
  const std::vector<Mutant> mutants = Mutants();
  int planted = 0, caught = 0;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    const AttentionProblem& p = c.p;
    absl::StatusOr<ProblemData> data = CaseData(c);
    ASSERT_TRUE(data.ok()) << data.status();
    const AttentionArgs a = data->args();
    const ReferenceResult ref = ComputeReference(p, a);
    const std::vector<Row> rows = Rows(p, a);
    const int64_t all = static_cast<int64_t>(rows.size());

    Store(p, a, ref);
    for (int64_t max_rows : {kSampleRows, all}) {
      const Comparison ok = CompareSampledRows(p, a, max_rows);
      EXPECT_TRUE(ok.ok()) << "the reference's own outputs fail (max_rows " << max_rows
                           << "): " << ok.first_failure;
      EXPECT_GE(ok.checked, std::min<int64_t>(max_rows, all) * p.head_dim / 2) << "rows checked";
    }

    for (const Mutant& m : mutants) {
      if (!m.applies(p)) continue;
      Store(p, a, m.outputs(p, *data, ref));
      const Comparison cmp = CompareSampledRows(p, a, kSampleRows);
      ++planted;
      EXPECT_FALSE(cmp.ok()) << "missed '" << m.name << "' (largest error/bound "
                             << cmp.max_bound_fraction << ")";
      caught += cmp.ok() ? 0 : 1;
      if (m.lse_only) continue;
      // And in O alone: `verify` and `compare` run problems without the LSE.
      const Comparison o_only = CompareSampledRows(WithoutLse(p), a, kSampleRows);
      ++planted;
      EXPECT_FALSE(o_only.ok()) << "missed '" << m.name << "' in O alone (largest error/bound "
                                << o_only.max_bound_fraction << ")";
      caught += o_only.ok() ? 0 : 1;
    }

    // A row never written: the NaN of a poisoned buffer, or the 0 of a fresh one.
    for (double left : {std::numeric_limits<double>::quiet_NaN(), 0.0}) {
      for (const auto& [row, max_rows] : PlantedRows(p, rows)) {
        ReferenceResult r = ref;
        for (int64_t x = 0; x < p.head_dim; ++x) r.o[row * p.head_dim + x] = left;
        r.lse[row] = left;
        Store(p, a, r);
        for (const AttentionProblem& checked : {p, WithoutLse(p)}) {
          const Comparison cmp = CompareSampledRows(checked, a, max_rows);
          ++planted;
          EXPECT_FALSE(cmp.ok()) << "missed row " << row << " of " << all << " left at " << left
                                 << " (max_rows " << max_rows
                                 << (checked.return_lse ? ")" : ", O alone)");
          caught += cmp.ok() ? 0 : 1;
        }
      }
    }
  }
  EXPECT_EQ(caught, planted);
  EXPECT_GE(planted, 400) << "not vacuous";
}

// The rows the file comment relies on are sampled: leave one row at NaN at a
// time and see which CompareSampledRows rejects with max_rows = 8. Dense:
// exactly 8 rows, the first and the last among them, evenly spread. Ragged:
// each sequence's last row.
TEST(SampledRowsTest, SamplesTheRowsItPromises) {
  for (const Case& c : Cases()) {
    if (c.grid_data || c.p.dtype != DType::kF32 || c.p.mask == MaskKind::kSlidingWindow) continue;
    SCOPED_TRACE(c.name);
    const AttentionProblem& p = c.p;
    absl::StatusOr<ProblemData> data = CaseData(c);
    ASSERT_TRUE(data.ok()) << data.status();
    const AttentionArgs a = data->args();
    const ReferenceResult ref = ComputeReference(p, a);
    const std::vector<Row> rows = Rows(p, a);
    std::vector<size_t> sampled;
    for (size_t row = 0; row < rows.size(); ++row) {
      ReferenceResult r = ref;
      r.lse[row] = std::numeric_limits<double>::quiet_NaN();
      Store(p, a, r);
      if (!CompareSampledRows(p, a, kSampleRows).ok()) sampled.push_back(row);
    }
    if (!p.is_ragged()) {
      ASSERT_EQ(sampled.size(), static_cast<size_t>(kSampleRows));
      EXPECT_EQ(sampled.front(), 0u);
      EXPECT_EQ(sampled.back(), rows.size() - 1);
      for (size_t k = 1; k < sampled.size(); ++k) {
        EXPECT_LE(sampled[k] - sampled[k - 1], (rows.size() - 1) / (kSampleRows - 1) + 1);
      }
    } else {
      for (size_t row = 0; row < rows.size(); ++row) {
        if (!rows[row].last_of_sequence) continue;
        EXPECT_TRUE(std::find(sampled.begin(), sampled.end(), row) != sampled.end())
            << "the last row of a sequence, " << row << ", is not sampled";
      }
    }
  }
}

}  // namespace
}  // namespace attnkit
