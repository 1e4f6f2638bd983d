#include "backends/highway/flash_test_util.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "oracle/reference.h"

namespace attnkit {

AttentionProblem MakeTestProblem(int64_t batch, int64_t heads, int64_t kv_heads, int64_t q_len,
                                 int64_t kv_len, int64_t head_dim) {
  return BasicProblem(batch, heads, kv_heads, q_len, kv_len, head_dim);
}

std::vector<AttentionProblem> TestGrid(bool small) {
  std::vector<AttentionProblem> grid;
  auto add = [&grid](AttentionProblem p) { grid.push_back(p); };
  // Plain MHA, odd sizes, several head dims (incl. 80, 96, non-multiples of 8).
  for (int64_t d : {1, 7, 16, 64, 80, 96, 130}) {
    if (small && d != 7 && d != 80) continue;
    add(MakeTestProblem(1, 2, 2, 33, 70, d));
  }
  // Causal and windows in both alignments, Tq < Tk and Tq > Tk.
  for (Alignment al : {Alignment::kTopLeft, Alignment::kBottomRight}) {
    for (auto qk : {std::pair<int64_t, int64_t>{67, 67}, {19, 150}, {150, 19}}) {
      AttentionProblem p = MakeTestProblem(1, 2, 1, qk.first, qk.second, 24);
      p.mask = MaskKind::kCausal;
      p.alignment = al;
      p.return_lse = true;
      add(p);
      if (small) continue;
      p.mask = MaskKind::kSlidingWindow;
      p.window_left = 9;
      p.window_right = 3;
      add(p);
    }
  }
  {  // Window with no right context, spanning several key tiles.
    AttentionProblem p = MakeTestProblem(1, 1, 1, 200, 200, 32);
    p.mask = MaskKind::kSlidingWindow;
    p.window_left = 70;
    p.window_right = 0;
    p.alignment = Alignment::kBottomRight;
    add(p);
  }
  {  // Padding, with a fully blocked sequence (kv_length 0) and causal rows
     // that see nothing (bottom-right with kv_length < Tq).
    AttentionProblem p = MakeTestProblem(3, 4, 2, 21, 90, 16);
    p.kv_lengths = {90, 0, 13};
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kBottomRight;
    p.return_lse = true;
    add(p);
  }
  {  // Dense mask + bias + softcap + lse, GQA, BTHD.
    AttentionProblem p = MakeTestProblem(2, 6, 2, 17, 77, 40);
    p.blocked_mask = p.additive_bias = p.return_lse = true;
    p.softcap = 5.0f;
    p.layout = Layout::kBTHD;
    add(p);
  }
  {  // Dense mask that blocks whole rows is covered by padding above; softcap
     // alone with custom scale and causal.
    AttentionProblem p = MakeTestProblem(1, 4, 4, 65, 65, 64);
    p.softcap = 2.0f;
    p.scale = 0.3f;
    p.mask = MaskKind::kCausal;
    add(p);
  }
  // GQA / MQA ratios, decode shapes (split-K), dtypes.
  for (DType qd : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType kvd : {DType::kF32, DType::kF16, DType::kBF16}) {
      if (small && qd != kvd) continue;
      AttentionProblem p = MakeTestProblem(1, 8, 2, 1, 300, 64);  // decode, splits
      p.dtype = qd;
      p.kv_dtype = kvd;
      p.return_lse = true;
      add(p);
      if (small) continue;
      AttentionProblem q = MakeTestProblem(2, 12, 1, 23, 45, 48);  // MQA
      q.dtype = qd;
      q.kv_dtype = kvd;
      q.layout = Layout::kBTHD;
      q.mask = MaskKind::kCausal;
      q.alignment = Alignment::kBottomRight;
      add(q);
    }
  }
  {  // Many heads per kv head: more than one head chunk per item.
    AttentionProblem p = MakeTestProblem(1, 70, 1, 3, 40, 8);
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kBottomRight;
    add(p);
  }
  if (!small) {
    // Large head dims, to 1024.
    for (int64_t d : {256, 300, 1024}) add(MakeTestProblem(1, 1, 1, 9, 40, d));
    AttentionProblem p = MakeTestProblem(2, 4, 4, 1, 700, 128);  // decode MHA
    p.kv_lengths = {700, 333};
    p.return_lse = true;
    add(p);
  }
  return grid;
}

std::vector<AttentionProblem> DecodeTileGrid() {
  std::vector<AttentionProblem> grid;
  const DType kv_types[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI8};
  int n = 0;
  auto next_kv = [&]() { return kv_types[n++ % 4]; };
  // Row groups: 1 to 4 (16 rows), and rows that fill no group.
  for (int64_t group : {1, 3, 4, 5, 8, 16}) {
    for (int pass = 0; pass < 2; ++pass) {
      AttentionProblem p = MakeTestProblem(2, 2 * group, 2, 1, 37, 64);
      p.kv_dtype = next_kv();
      p.return_lse = true;
      grid.push_back(p);
    }
  }
  // Several query positions per item: per-row causal ranges and windows.
  for (MaskKind mask : {MaskKind::kCausal, MaskKind::kSlidingWindow}) {
    for (int64_t q_len : {2, 3}) {
      AttentionProblem p = MakeTestProblem(1, 8, 2, q_len, 50, 32);
      p.mask = mask;
      p.alignment = Alignment::kBottomRight;
      if (mask == MaskKind::kSlidingWindow) p.window_left = 7;
      p.kv_dtype = next_kv();
      p.return_lse = true;
      grid.push_back(p);
    }
  }
  // Bias (per pair) with and without softcap.
  for (float cap : {0.0f, 4.0f}) {
    for (int i = 0; i < 2; ++i) {
      AttentionProblem p = MakeTestProblem(2, 8, 2, 1, 45, 32);
      p.additive_bias = true;
      p.softcap = cap;
      p.kv_dtype = next_kv();
      grid.push_back(p);
    }
  }
  // d = 128 (the unrolled dot products of AVX-512), and head dims whose
  // direct tiles hold 8, 4 and 2 keys.
  for (int64_t d : {128, 128, 128, 128, 256, 512, 1024}) {
    AttentionProblem p = MakeTestProblem(1, 8, 2, 1, 21, d);
    p.kv_dtype = next_kv();
    grid.push_back(p);
  }
  // Padding (an empty sequence), and paged caches with shared pages.
  for (DType kvd : kv_types) {
    AttentionProblem p = MakeTestProblem(3, 16, 2, 1, 90, 64);
    p.kv_dtype = kvd;
    p.kv_lengths = {90, 0, 19};
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kBottomRight;
    p.return_lse = true;
    grid.push_back(p);
    p.page_size = 16;
    p.num_pages = 12;  // fewer than 3 * 6: sequences share pages
    p.kv_lengths = {90, 16, 3};
    grid.push_back(p);
  }
  return grid;
}

namespace {

// Tolerance: rounding to the output dtype plus fp32 accumulation error.
double Tolerance(const AttentionProblem& p) {
  return 2.0 * DTypeEpsilon(p.dtype) + 2e-5 * std::sqrt(static_cast<double>(p.head_dim));
}

}  // namespace

absl::Status CheckAgainstReference(Backend* backend, const AttentionProblem& p,
                                   std::string* kernel) {
  ATTNKIT_ASSIGN_OR_RETURN(ProblemData data, ProblemData::Random(p, 1));
  // Poison the output so rows the backend never writes are caught.
  ForEachOffset(data.o.view(),
                [&](int64_t off) { StoreFromF32(data.o.data(), p.dtype, off, std::nanf("")); });
  RunInfo info;
  ATTNKIT_RETURN_IF_ERROR(backend->Forward(p, data.args(), &info));
  if (kernel != nullptr) *kernel = info.kernel;
  const ReferenceResult ref = ComputeReference(p, data.args());
  const double tol = Tolerance(p);
  const TensorView o = data.o.view();
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.num_heads; ++h) {
      for (int64_t i = 0; i < p.q_len; ++i) {
        const int64_t row = (b * p.num_heads + h) * p.q_len + i;
        for (int64_t c = 0; c < p.head_dim; ++c) {
          const double want = ref.o[row * p.head_dim + c];
          const double got = o.LoadF32(o.Offset(b, h, i, c));
          if (!(std::abs(got - want) <= tol * (1.0 + std::abs(want)))) {
            return absl::InternalError(
                absl::StrFormat("%s: o[%d,%d,%d,%d] = %g, reference %g (tol %g) kernel %s", p.Id(),
                                b, h, i, c, got, want, tol, info.kernel));
          }
        }
        if (p.return_lse) {
          const double want = ref.lse[row];
          const double got =
              static_cast<const float*>(data.lse.data())[data.lse.view().Offset(b, h, i)];
          const bool ok = std::isinf(want)
                              ? got == want
                              : std::abs(got - want) <= 1e-5 * (1.0 + std::abs(want)) + tol;
          if (!ok) {
            return absl::InternalError(absl::StrFormat("%s: lse[%d,%d,%d] = %g, reference %g",
                                                       p.Id(), b, h, i, got, want));
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> RunToVector(Backend* backend, const AttentionProblem& p) {
  ATTNKIT_ASSIGN_OR_RETURN(ProblemData data, ProblemData::Random(p, 1));
  ATTNKIT_RETURN_IF_ERROR(backend->Forward(p, data.args()));
  std::vector<float> out;
  ForEachOffset(data.o.view(), [&](int64_t off) { out.push_back(data.o.view().LoadF32(off)); });
  if (p.return_lse) {
    ForEachOffset(data.lse.view(),
                  [&](int64_t off) { out.push_back(data.lse.view().LoadF32(off)); });
  }
  return out;
}

}  // namespace attnkit
