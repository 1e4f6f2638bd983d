// Paging and packing move K/V rows, never the arithmetic. On every backend
// that runs the case:
// - a paged problem gives the same O and LSE bits as its dense twin (the pool
//   gathered into [B, G, Tk, d], or packed [total_k, G, d] for a ragged
//   batch; int8 scales likewise). Bitwise equality is asked of backends
//   whose Caps() claim determinism; the others may reorder sums from call to
//   call.
// - each sequence of a ragged batch matches the sequence run alone as a
//   dense batch-1 problem: bit for bit, or (a backend that plans the batch
//   as a whole, e.g. split-K against the batch's total work) within the
//   oracle of the sequence alone, with the differing bits printed.
// Every paged, dense and ragged run is also held to the fp64 oracle, so a
// bug the two paths share fails although their bits agree.
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "backends/builtin.h"
#include "core/kv_rows.h"
#include "core/ragged.h"
#include "gtest/gtest.h"
#include "harness/execute.h"
#include "harness/problem_data.h"
#include "oracle/compare.h"
#include "oracle/reference.h"
#include "tests/backend_test_env.h"
#include "tests/highway_target_backends.h"

namespace attnkit {
namespace {

using testing_env::Outcome;

// Copies one element (raw bytes, any dtype) between two views' storage.
void CopyElement(const TensorView& from, int64_t from_off, const TensorView& to, int64_t to_off) {
  const size_t size = DTypeSize(from.dtype);
  std::memcpy(static_cast<char*>(to.data) + to_off * size,
              static_cast<const char*>(from.data) + from_off * size, size);
}

// Row t of KV head g of sequence b of `from` (dense, packed or paged) into the
// same row of `to`, whose K/V are dense [B, G, Tk, d] or, for a ragged
// problem, packed [total_k, G, d] at cu_seqlens_k; int8 and fp8 scales too.
void CopyKvRow(const AttentionProblem& p, const AttentionArgs& from, const AttentionProblem& q,
               const AttentionArgs& to, int64_t b, int64_t g, int64_t t, int64_t packed_base) {
  const KvRows src(p, from);
  auto dst_row = [&](const TensorView& v) {
    return q.is_ragged() ? v.Offset(packed_base + t, g, 0) : v.Offset(b, g, t, 0);
  };
  auto dst_scale = [&](const TensorView& v) {
    return q.is_ragged() ? v.Offset(packed_base + t, g) : v.Offset(b, g, t);
  };
  const int64_t last = from.k.rank - 1;  // d is the last dim: 3 dense/paged, 2 packed
  for (const auto& [f, d] : {std::make_pair(from.k, to.k), std::make_pair(from.v, to.v)}) {
    const int64_t s = src.Offset(f, b, g, t), o = dst_row(d);
    for (int64_t c = 0; c < p.head_dim; ++c) {
      CopyElement(f, s + c * f.strides[last], d, o + c * d.strides[d.rank - 1]);
    }
  }
  if (IsScaledKv(p.kv_dtype)) {
    for (const auto& [f, d] :
         {std::make_pair(from.k_scale, to.k_scale), std::make_pair(from.v_scale, to.v_scale)}) {
      CopyElement(f, src.ScaleOffset(f, b, g, t), d, dst_scale(d));
    }
  }
}

std::string Bytes(const Tensor& t) {
  if (t.view().empty()) return "";
  return std::string(static_cast<const char*>(t.data()),
                     t.view().SpanElements() * DTypeSize(t.view().dtype));
}

// "" when every element of `a` and `b` (same shape) has the same bits;
// otherwise the first that differs.
std::string FirstDifference(const std::string& what, const TensorView& a, int64_t a_off,
                            const TensorView& b, int64_t b_off) {
  const size_t size = DTypeSize(a.dtype);
  if (std::memcmp(static_cast<const char*>(a.data) + a_off * size,
                  static_cast<const char*>(b.data) + b_off * size, size) == 0) {
    return "";
  }
  return absl::StrFormat("%s: %.9g vs %.9g", what, a.LoadF32(a_off), b.LoadF32(b_off));
}

class PagedEquivalenceTest : public testing_env::BackendParamTest<std::string> {
 protected:
  Backend* backend() { return GlobalRegistry().Find(GetParam()).value(); }
  bool Runs(const AttentionProblem& p) {
    return testing_env::RunsOrRecordsSkip(GetParam(), p, &skip_reason_);
  }
  void Run(const AttentionProblem& p, const ProblemData& data, RunInfo* info) {
    PoisonOutputs(data);
    const absl::Status s = RunOnBackend(backend(), p, data, info);
    ASSERT_TRUE(s.ok()) << p.name << ": " << s;
  }
  bool Bitwise() { return backend()->Caps().deterministic; }
  // The run's O and LSE against the fp64 reference of `p`.
  void ExpectWithinOracle(const AttentionProblem& p, const ProblemData& data, const RunInfo& info) {
    const Comparison c = CompareToReference(p, data.args(), ComputeReference(p, data.args()));
    EXPECT_TRUE(c.ok()) << GetParam() << " [" << info.kernel << "] on " << p.name
                        << " misses the oracle: " << c.mismatches << " of " << c.checked
                        << " outside the bound" << (c.non_finite ? ", non-finite output" : "")
                        << "; first: " << c.first_failure;
  }
  // Failures so far in this test (gtest keeps only failed and skipped parts).
  static int Failures() {
    const ::testing::TestResult* r =
        ::testing::UnitTest::GetInstance()->current_test_info()->result();
    int n = 0;
    for (int i = 0; i < r->total_part_count(); ++i) n += r->GetTestPartResult(i).failed() ? 1 : 0;
    return n;
  }
  // Records one problem's outcome for the end-of-run summary.
  void Record(int failures_before) {
    testing_env::Record(GetParam(),
                        Failures() > failures_before ? Outcome::kFailed : Outcome::kPassed);
  }
  std::string skip_reason_;
};

AttentionProblem Named(AttentionProblem p, const std::string& tag) {
  p.return_lse = true;
  p.name = absl::StrCat(p.Id(), "_", tag);
  return p;
}

// Paged problems: f32, f16, bf16, int8 and fp8 K/V (Q in each float type);
// decode and prefill; pools with room for every sequence and pools where
// sequences share pages; one ragged batch over pages.
std::vector<AttentionProblem> PagedCases() {
  std::vector<AttentionProblem> cases;
  AttentionProblem p = BasicProblem(3, 8, 2, 1, 300, 64);
  p.page_size = 16;
  p.num_pages = 3 * p.max_pages();
  p.kv_lengths = {300, 17, 129};
  cases.push_back(Named(p, "decode_f32"));
  p = BasicProblem(2, 4, 1, 9, 100, 80);  // prefill chunk, MQA, token-major Q
  p.dtype = p.kv_dtype = DType::kBF16;
  p.layout = Layout::kBTHD;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.page_size = 32;
  p.num_pages = 8;
  p.kv_lengths = {100, 40};
  cases.push_back(Named(p, "prefill_bf16"));
  p = BasicProblem(4, 8, 2, 1, 200, 64);  // 42 pages needed, 20 in the pool
  p.dtype = p.kv_dtype = DType::kF16;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.page_size = 16;
  p.num_pages = 20;
  p.kv_lengths = {200, 200, 150, 90};
  cases.push_back(Named(p, "decode_shared_f16"));
  p = BasicProblem(3, 8, 2, 1, 1000, 128);
  p.kv_dtype = DType::kI8;
  p.page_size = 64;
  p.num_pages = 3 * p.max_pages();
  p.kv_lengths = {1000, 333, 0};
  cases.push_back(Named(p, "decode_int8"));
  p = BasicProblem(2, 8, 2, 7, 96, 64);  // 11 pages needed, 8 in the pool
  p.dtype = DType::kBF16;
  p.kv_dtype = DType::kI8;
  p.mask = MaskKind::kSlidingWindow;
  p.window_left = 20;
  p.alignment = Alignment::kBottomRight;
  p.page_size = 16;
  p.num_pages = 8;
  p.kv_lengths = {96, 70};
  cases.push_back(Named(p, "prefill_shared_int8"));
  // Decodes in 16-key pages: fp8 (scales copied as int8's are), and int8,
  // whose 64-key packed highway tiles span four pages each (tiling.h
  // kPackedInt8KeyTile).
  p = BasicProblem(2, 8, 2, 1, 300, 128);
  p.kv_dtype = DType::kF8E4M3;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.page_size = 16;
  p.num_pages = 2 * p.max_pages();
  p.kv_lengths = {300, 77};
  cases.push_back(Named(p, "decode_fp8"));
  // fp8 under FAST: highway's 64-key tiles span four pages, a Q.K call
  // (Fp8FmaQDotK4 or Fp8QDotK4) per page.
  p.compute = ComputeMode::kFast;
  cases.push_back(Named(p, "decode_fp8_fast"));
  p.compute = ComputeMode::kExact;
  p.kv_dtype = DType::kI8;
  cases.push_back(Named(p, "decode_int8_pages16"));
  // bf16 decode under FAST in 16-key pages: highway's 32-key tiles
  // (kPackedBF16KeyTile) span two pages, and a sliding window starts the
  // first sequence's keys at 98, so runs end between multiples of 4 keys.
  p.kv_dtype = DType::kBF16;
  p.compute = ComputeMode::kFast;
  p.mask = MaskKind::kSlidingWindow;
  p.window_left = 201;
  cases.push_back(Named(p, "decode_bf16_fast_window"));
  p.compute = ComputeMode::kExact;
  p = BasicProblem(1, 4, 1, 1, 2049, 80);  // one long decode: split-K paths
  p.page_size = 256;
  p.num_pages = 9;
  cases.push_back(Named(p, "decode_long_f32"));
  p = BasicProblem(5, 8, 2, 16, 600, 64);  // ragged over pages: packed twin
  p.layout = Layout::kBTHD;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.q_lengths = {16, 1, 0, 1, 1};
  p.kv_lengths = {80, 600, 9, 0, 255};
  p.kv_dtype = DType::kI8;
  p.page_size = 32;
  p.num_pages = 30;
  cases.push_back(Named(p, "ragged_int8"));
  return cases;
}

TEST_P(PagedEquivalenceTest, PagedEqualsDenseBitwise) {
  int ran = 0;
  for (const AttentionProblem& p : PagedCases()) {
    SCOPED_TRACE(p.name);
    ASSERT_TRUE(ValidateProblem(p).ok()) << ValidateProblem(p);
    if (!Runs(p)) continue;
    const int failures_before = Failures();
    AttentionProblem dense = p;
    dense.page_size = dense.num_pages = 0;
    dense.name = absl::StrCat(p.name, "_dense");
    ASSERT_TRUE(Runs(dense)) << GetParam() << " runs " << p.name << " but not its dense twin";
    ++ran;
    auto paged_data = ProblemData::Random(p, 17);
    auto dense_data = ProblemData::Allocate(dense);
    ASSERT_TRUE(paged_data.ok() && dense_data.ok());
    const AttentionArgs pa = paged_data->args(), da = dense_data->args();
    // Same Q; K/V rows gathered from the pool (padding stays zero: unread).
    ASSERT_EQ(Bytes(paged_data->q).size(), Bytes(dense_data->q).size());
    std::memcpy(dense_data->q.data(), paged_data->q.data(), Bytes(paged_data->q).size());
    int64_t packed_base = 0;
    for (int64_t b = 0; b < p.batch; ++b) {
      for (int64_t g = 0; g < p.num_kv_heads; ++g) {
        for (int64_t t = 0; t < p.KvLength(b); ++t) {
          CopyKvRow(p, pa, dense, da, b, g, t, packed_base);
        }
      }
      packed_base += p.KvLength(b);
    }
    RunInfo paged_info, dense_info;
    Run(p, *paged_data, &paged_info);
    Run(dense, *dense_data, &dense_info);
    if (HasFatalFailure()) return;
    ExpectWithinOracle(p, *paged_data, paged_info);
    ExpectWithinOracle(dense, *dense_data, dense_info);
    if (!Bitwise()) {
      std::printf("%s on %s: paged and dense O %s bitwise\n", GetParam().c_str(), p.name.c_str(),
                  Bytes(paged_data->o) == Bytes(dense_data->o) ? "agree" : "differ");
      Record(failures_before);
      continue;
    }
    // O and LSE have the same shapes and layouts in both problems.
    for (const auto& [name, x, y] : {std::make_tuple("o", &paged_data->o, &dense_data->o),
                                     std::make_tuple("lse", &paged_data->lse, &dense_data->lse)}) {
      const TensorView xv = x->view(), yv = y->view();
      std::string diff;
      ForEachOffset(xv, [&](int64_t off) {
        if (!diff.empty()) return;
        diff = FirstDifference(name, xv, off, yv, off);
        if (!diff.empty()) absl::StrAppend(&diff, " at element offset ", off);
      });
      EXPECT_EQ(diff, "") << GetParam() << " [" << paged_info.kernel << " vs " << dense_info.kernel
                          << "]: " << p.name << " differs from its dense twin";
    }
    Record(failures_before);
  }
  if (ran == 0) GTEST_SKIP() << skip_reason_;
}

// Ragged batches: packed and paged K/V, every mask, f32, f16, bf16 and
// int8, sequences without queries or keys.
std::vector<AttentionProblem> RaggedCases() {
  std::vector<AttentionProblem> cases;
  AttentionProblem p = BasicProblem(6, 8, 2, 64, 1000, 64);
  p.layout = Layout::kBTHD;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.q_lengths = {64, 1, 1, 0, 1, 1};
  p.kv_lengths = {264, 1000, 1, 37, 0, 513};
  cases.push_back(Named(p, "mix_f32"));
  p.mask = MaskKind::kSlidingWindow;
  p.window_left = 128;
  p.dtype = p.kv_dtype = DType::kBF16;
  cases.push_back(Named(p, "mix_window_bf16"));
  p.mask = MaskKind::kNone;
  p.window_left = 0;
  p.dtype = DType::kF16;
  p.kv_dtype = DType::kI8;
  p.page_size = 16;
  p.num_pages = 70;  // 113 pages needed: shared
  cases.push_back(Named(p, "mix_paged_int8"));
  p = BasicProblem(4, 4, 1, 1, 999, 128);  // decodes only, MQA
  p.layout = Layout::kBTHD;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.q_lengths = {1, 1, 1, 1};
  p.kv_lengths = {1, 999, 0, 250};
  p.dtype = p.kv_dtype = DType::kF16;
  cases.push_back(Named(p, "decodes_f16"));
  p = BasicProblem(3, 8, 2, 33, 100, 80);  // prefill chunks
  p.layout = Layout::kBTHD;
  p.mask = MaskKind::kCausal;
  p.alignment = Alignment::kBottomRight;
  p.q_lengths = {33, 7, 0};
  p.kv_lengths = {33, 100, 5};
  p.page_size = 32;
  p.num_pages = 3 * p.max_pages();
  cases.push_back(Named(p, "chunks_paged_f32"));
  return cases;
}

// Bits of a sequence of a ragged batch against the same sequence run alone
// (the reference runs each sequence by itself, so it agrees). A backend may
// plan a ragged batch as a whole (split-K chosen against the batch's total
// work), which reorders a sequence's sums, and no capability promises batch
// invariance: where the bits differ, the ragged run's rows must still meet
// the oracle of the sequence alone, and the difference is printed.
TEST_P(PagedEquivalenceTest, RaggedMatchesPerSequenceRuns) {
  int ran = 0;
  for (const AttentionProblem& p : RaggedCases()) {
    SCOPED_TRACE(p.name);
    ASSERT_TRUE(ValidateProblem(p).ok()) << ValidateProblem(p);
    if (!Runs(p)) continue;
    ++ran;
    const int failures_before = Failures();
    auto data = ProblemData::Random(p, 23);
    ASSERT_TRUE(data.ok()) << data.status();
    RunInfo ragged_info;
    Run(p, *data, &ragged_info);
    if (HasFatalFailure()) return;
    ExpectWithinOracle(p, *data, ragged_info);
    int64_t sequences = 0;
    std::vector<std::string> differing;
    for (const SequenceCall& s : RaggedSequences(p, data->args())) {
      // Sequence s.index alone: its problem from RaggedSequences (batch 1,
      // q_len = its queries) with K/V made dense, [1, G, kv_len, d].
      AttentionProblem one = s.problem;
      one.page_size = one.num_pages = 0;
      one.name = absl::StrCat(p.name, "_seq", s.index);
      ASSERT_TRUE(Runs(one)) << GetParam() << " runs " << p.name << " but not " << one.name;
      auto one_data = ProblemData::Allocate(one);
      ASSERT_TRUE(one_data.ok()) << one_data.status();
      const AttentionArgs oa = one_data->args();
      for (int64_t h = 0; h < p.num_heads; ++h) {
        for (int64_t i = 0; i < one.q_len; ++i) {
          for (int64_t c = 0; c < p.head_dim; ++c) {
            CopyElement(s.args.q, s.args.q.Offset(0, h, i, c), oa.q, oa.q.Offset(0, h, i, c));
          }
        }
      }
      for (int64_t g = 0; g < p.num_kv_heads; ++g) {
        for (int64_t t = 0; t < s.problem.KvLength(0); ++t) {
          CopyKvRow(s.problem, s.args, one, oa, 0, g, t, 0);
        }
      }
      RunInfo one_info;
      Run(one, *one_data, &one_info);
      if (HasFatalFailure()) return;
      ++sequences;
      // O [1, H, nq, d] and LSE [1, H, nq] against the packed rows.
      std::string diff;
      for (int64_t h = 0; h < p.num_heads && diff.empty(); ++h) {
        for (int64_t i = 0; i < one.q_len && diff.empty(); ++i) {
          for (int64_t c = 0; c < p.head_dim && diff.empty(); ++c) {
            diff = FirstDifference(absl::StrFormat("o[%d, %d, %d]", s.q_offset + i, h, c), s.args.o,
                                   s.args.o.Offset(0, h, i, c), oa.o, oa.o.Offset(0, h, i, c));
          }
          if (diff.empty()) {
            diff = FirstDifference(absl::StrFormat("lse[%d, %d]", h, s.q_offset + i), s.args.lse,
                                   s.args.lse.Offset(0, h, i), oa.lse, oa.lse.Offset(0, h, i));
          }
        }
      }
      if (diff.empty()) continue;
      differing.push_back(absl::StrCat("sequence ", s.index, " (", diff, ")"));
      // The ragged run's rows in place of the lone run's, against the fp64
      // reference of the sequence alone.
      for (int64_t h = 0; h < p.num_heads; ++h) {
        for (int64_t i = 0; i < one.q_len; ++i) {
          for (int64_t c = 0; c < p.head_dim; ++c) {
            CopyElement(s.args.o, s.args.o.Offset(0, h, i, c), oa.o, oa.o.Offset(0, h, i, c));
          }
          CopyElement(s.args.lse, s.args.lse.Offset(0, h, i), oa.lse, oa.lse.Offset(0, h, i));
        }
      }
      const Comparison c = CompareToReference(one, oa, ComputeReference(one, oa));
      EXPECT_TRUE(c.ok()) << GetParam() << " [" << ragged_info.kernel << "]: sequence " << s.index
                          << " of " << p.name
                          << " misses the oracle of the sequence alone: " << c.first_failure;
    }
    // Not vacuous: every sequence with queries was compared.
    int64_t with_queries = 0;
    for (int64_t b = 0; b < p.batch; ++b) with_queries += p.QLength(b) > 0 ? 1 : 0;
    EXPECT_EQ(sequences, with_queries);
    if (!differing.empty()) {
      std::printf("%s [%s] on %s: bits differ from the lone runs (within the oracle): %s\n",
                  GetParam().c_str(), ragged_info.kernel.c_str(), p.name.c_str(),
                  absl::StrJoin(differing, "; ").c_str());
    }
    Record(failures_before);
  }
  if (ran == 0) GTEST_SKIP() << skip_reason_;
}

// Every backend, and highway once more on each other Highway target.
std::vector<std::string> BackendsAndHighwayTargets() {
  testing_env::ReducedGridBackends();  // registers them
  return testing_env::BackendNames();
}

INSTANTIATE_TEST_SUITE_P(AllBackends, PagedEquivalenceTest,
                         ::testing::ValuesIn(BackendsAndHighwayTargets()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return testing_env::SafeName(info.param);
                         });

}  // namespace
}  // namespace attnkit
