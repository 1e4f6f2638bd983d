#include "tests/grad_conformance_grid.h"

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace attnkit {
namespace {

struct Shape {
  int64_t batch, heads, kv_heads, q_len, kv_len, head_dim;
};

// Small enough that the fp64 reference backward of the largest (Tq 300 x Tk
// 101, 4 heads, d 80) takes a few tens of milliseconds.
constexpr Shape kShapes[] = {
    {1, 1, 1, 1, 1, 16},      // the smallest problem
    {2, 4, 4, 37, 37, 64},    // MHA, batch 2 (kv_lengths 0 in the second)
    {1, 8, 2, 37, 101, 80},   // GQA 8/2, Tq < Tk
    {1, 4, 1, 101, 37, 128},  // MQA, Tq > Tk
    {2, 8, 2, 1, 300, 64},    // decode over 300 keys, GQA 4, batch 2
    {1, 2, 1, 37, 300, 16},   // MQA, a long Tk
    {1, 4, 4, 300, 101, 80},  // Tq 300 > Tk
    {1, 4, 2, 37, 1, 64},     // one key: bottom-right masks block most rows
};

// The shape index (into kShapes) whose every case also runs in f32 when its
// rotating dtype pair is another: the GQA shape meets every feature in f32.
constexpr int kF32TwinShape = 2;

// One feature combination applied to a shape.
struct Variant {
  const char* tag;
  MaskKind mask = MaskKind::kNone;
  Alignment alignment = Alignment::kBottomRight;
  int64_t window_right = -1;  // >= 0: a sliding window, left Tk/4 + 1
  bool padding = false;       // kv_lengths: Tk/2 + 1 and 0 (batch 2), (Tk+1)/2 (batch 1)
  bool dense = false;
  bool bias = false;
  bool softcap = false;
  bool custom_scale = false;
  Layout layout = Layout::kBHTD;
  Broadcast broadcast = Broadcast::kNone;
  bool block_last_row = false;
  bool dbias = false;
  bool dbias_on_even_shapes = false;  // dBias asked on every other shape only
  bool sinks = false;                 // attention sinks: dsinks too
  bool alibi = false;                 // ALiBi slopes (constants)
  bool shapes_of_parity = false;      // on every other shape only (parity below)
  size_t parity = 0;
};

std::vector<Variant> Variants() {
  std::vector<Variant> v(14);
  v[0].tag = "plain";
  v[1] = {"causal_tl", MaskKind::kCausal, Alignment::kTopLeft};
  v[2] = {"causal_br", MaskKind::kCausal, Alignment::kBottomRight};
  v[3] = {"window_br", MaskKind::kSlidingWindow, Alignment::kBottomRight, 0};
  v[4] = {"window_tl", MaskKind::kSlidingWindow, Alignment::kTopLeft, 3};
  v[5] = {"padded", MaskKind::kCausal, Alignment::kBottomRight};
  v[5].padding = true;
  v[6] = {"dense"};
  v[6].dense = true;
  v[6].block_last_row = true;
  v[7] = {"bias", MaskKind::kCausal, Alignment::kTopLeft};
  v[7].bias = v[7].dbias = true;
  v[7].dbias_on_even_shapes = true;  // gradients through a bias without dBias too
  // A [1, 1, Tq, Tk] bias whose last row is -inf: that row of every
  // sequence and head sees nothing.
  v[8] = {"bias_bcast"};
  v[8].bias = v[8].dbias = v[8].block_last_row = true;
  v[8].broadcast = Broadcast::kBatchAndHeads;
  v[9] = {"cap_bthd", MaskKind::kCausal, Alignment::kBottomRight};
  v[9].softcap = v[9].custom_scale = true;
  v[9].layout = Layout::kBTHD;
  v[10] = {"scale_bthd"};
  v[10].custom_scale = true;
  v[10].layout = Layout::kBTHD;
  // Everything at once; the mask and bias shared across heads.
  v[11] = {"all", MaskKind::kSlidingWindow, Alignment::kBottomRight, 2, true, true, true, true};
  v[11].layout = Layout::kBTHD;
  v[11].broadcast = Broadcast::kHeads;
  v[11].block_last_row = v[11].dbias = true;
  // Sinks (gpt-oss): padding leaves rows with no key (their lse is the sink).
  v[12] = {"sinks", MaskKind::kCausal, Alignment::kBottomRight};
  v[12].padding = v[12].sinks = true;
  v[12].shapes_of_parity = true;  // the even shapes (the suite stays small)
  v[12].parity = 0;
  // ALiBi with softcap and a bias (the term comes after the cap, with it),
  // keys on both sides of the diagonal.
  v[13] = {"alibi", MaskKind::kSlidingWindow, Alignment::kBottomRight, 3};
  v[13].alibi = v[13].softcap = v[13].bias = v[13].dbias = true;
  v[13].shapes_of_parity = true;  // the odd shapes
  v[13].parity = 1;
  return v;
}

// (Q/O, K/V) storage types, rotated over shapes and variants so that each
// variant meets every pair.
constexpr std::pair<DType, DType> kDTypes[] = {{DType::kF32, DType::kF32},
                                               {DType::kBF16, DType::kBF16},
                                               {DType::kF16, DType::kF16},
                                               {DType::kF32, DType::kBF16},
                                               {DType::kBF16, DType::kF32}};
constexpr size_t kNumDTypes = sizeof(kDTypes) / sizeof(kDTypes[0]);

AttentionProblem MakeProblem(const Shape& s, const Variant& v, DType dtype, DType kv_dtype) {
  AttentionProblem p = BasicProblem(s.batch, s.heads, s.kv_heads, s.q_len, s.kv_len, s.head_dim);
  p.dtype = dtype;
  p.kv_dtype = kv_dtype;
  p.layout = v.layout;
  p.mask = v.mask;
  p.alignment = v.alignment;
  if (v.window_right >= 0) {
    p.mask = MaskKind::kSlidingWindow;
    p.window_left = s.kv_len / 4 + 1;
    p.window_right = v.window_right;
  }
  if (v.padding) {
    for (int64_t b = 0; b < s.batch; ++b) {
      p.kv_lengths.push_back(s.batch == 1 ? (s.kv_len + 1) / 2 : b == 0 ? s.kv_len / 2 + 1 : 0);
    }
  }
  p.blocked_mask = v.dense;
  p.additive_bias = v.bias;
  p.softcap = v.softcap ? 1.5f : 0.0f;
  p.sinks = v.sinks;
  p.alibi = v.alibi;
  if (v.custom_scale) p.scale = 0.3f;
  p.return_lse = true;
  return p;
}

// Saturated soft-caps (issue 33): scores several caps past 0, where tanh
// rounds to within a few ulps of +-1 and 1 - tanh^2 taken from it loses its
// digits. Tiny problems, so one key's term of dK is not lost in a sum. Each
// failed the gradient oracle with that derivative (highway and blas, up to
// 32x the bound); the first is the differential fuzzer's find.
struct SaturatedCap {
  const char* tag;
  int64_t heads, kv_heads, head_dim, q_len, kv_len;
  float scale;
  MaskKind mask;
  Alignment alignment;
  DType dtype;
  uint64_t seed;
};
constexpr SaturatedCap kSaturatedCaps[] = {
    {"capsat_fuzz", 1, 1, 23, 1, 2, 1.67865014f, MaskKind::kNone, Alignment::kTopLeft, DType::kF32,
     807620},
    {"capsat_mqa", 2, 1, 23, 1, 3, 3.0f, MaskKind::kNone, Alignment::kBottomRight, DType::kF32, 1},
    {"capsat_gqa_causal", 4, 2, 16, 3, 5, 3.0f, MaskKind::kCausal, Alignment::kBottomRight,
     DType::kF32, 7},
    {"capsat_d40", 2, 1, 40, 1, 3, 1.7f, MaskKind::kNone, Alignment::kBottomRight, DType::kF32, 58},
    {"capsat_bf16", 2, 1, 23, 1, 3, 3.0f, MaskKind::kNone, Alignment::kBottomRight, DType::kBF16,
     22},
};

}  // namespace

std::vector<GradCase> GradConformanceGrid() {
  std::vector<GradCase> grid;
  std::set<std::string> names;
  uint64_t seed = 1001;
  const std::vector<Variant> variants = Variants();
  for (size_t si = 0; si < sizeof(kShapes) / sizeof(kShapes[0]); ++si) {
    for (size_t vi = 0; vi < variants.size(); ++vi) {
      const Variant& v = variants[vi];
      if (v.shapes_of_parity && si % 2 != v.parity) continue;
      std::vector<std::pair<DType, DType>> dtypes = {kDTypes[(si + vi) % kNumDTypes]};
      if (si == kF32TwinShape && dtypes[0].first != DType::kF32) {
        dtypes.push_back({DType::kF32, DType::kF32});
      }
      // Every third variant's all-bf16 case also runs under FAST
      // (core/fast_compute.h FastRoundsGradOperands: P and dX rounded to
      // bf16 in the backward).
      std::vector<std::tuple<DType, DType, ComputeMode>> cells;
      for (const auto& [dtype, kv_dtype] : dtypes) {
        cells.emplace_back(dtype, kv_dtype, ComputeMode::kExact);
        if (dtype == DType::kBF16 && kv_dtype == DType::kBF16 && vi % 3 == 0) {
          cells.emplace_back(dtype, kv_dtype, ComputeMode::kFast);
        }
      }
      for (const auto& [dtype, kv_dtype, compute] : cells) {
        GradCase c;
        c.problem = MakeProblem(kShapes[si], v, dtype, kv_dtype);
        c.problem.compute = compute;
        // A FAST cell takes its EXACT twin's seed (the same data), so the
        // other cases keep theirs.
        if (compute == ComputeMode::kFast) --seed;
        c.broadcast = v.broadcast;
        c.block_last_row = v.block_last_row;
        c.with_dbias = v.dbias && !(v.dbias_on_even_shapes && si % 2 == 1);
        c.problem.seed = seed++;
        c.problem.name = absl::StrCat(c.problem.Id(), "_", v.tag);
        for (int n = 2; !names.insert(c.problem.name).second; ++n) {
          c.problem.name = absl::StrCat(c.problem.Id(), "_", v.tag, n);
        }
        grid.push_back(std::move(c));
      }
    }
  }
  for (const SaturatedCap& sc : kSaturatedCaps) {
    GradCase c;
    c.problem = BasicProblem(1, sc.heads, sc.kv_heads, sc.q_len, sc.kv_len, sc.head_dim);
    c.problem.dtype = c.problem.kv_dtype = sc.dtype;
    c.problem.mask = sc.mask;
    c.problem.alignment = sc.alignment;
    c.problem.scale = sc.scale;
    c.problem.softcap = 1.0f;
    c.problem.return_lse = true;
    c.problem.seed = sc.seed;
    c.problem.name = absl::StrCat(c.problem.Id(), "_", sc.tag);
    grid.push_back(std::move(c));
  }
  // NaN and Inf at random elements of Q, K, V (and the bias): a row that
  // reads one has NaN gradients, as have the keys it sees, and nothing else:
  // 0 * NaN must not reach the dQ of a row that does not see a poisoned K or
  // V row, nor the dK of a key that a poisoned Q row does not see. Causal
  // masks make most poisoned keys seen by some rows and not by others.
  struct NonFinite {
    int64_t heads, kv_heads, len, d;
    MaskKind mask;
    bool bias, blocked;
    int64_t count;
    bool sinks = false, alibi = false;  // poisoned sinks / slopes among the draws
  };
  const NonFinite nonfinite[] = {
      {4, 2, 97, 64, MaskKind::kCausal, false, false, 4},
      {4, 1, 70, 40, MaskKind::kSlidingWindow, true, false, 4},
      {2, 2, 65, 16, MaskKind::kCausal, false, true, 3},
      {4, 2, 40, 64, MaskKind::kCausal, false, false, 4, /*sinks=*/true},
      {4, 2, 40, 64, MaskKind::kSlidingWindow, true, false, 4, false, /*alibi=*/true},
  };
  for (const NonFinite& n : nonfinite) {
    GradCase c;
    c.problem = BasicProblem(1, n.heads, n.kv_heads, n.len, n.len, n.d);
    c.problem.mask = n.mask;
    c.problem.alignment = Alignment::kBottomRight;
    if (n.mask == MaskKind::kSlidingWindow) c.problem.window_left = n.len / 3;
    c.problem.additive_bias = n.bias;
    c.problem.blocked_mask = n.blocked;
    c.with_dbias = n.bias;
    c.problem.nonfinite_inputs = n.count;
    c.problem.sinks = n.sinks;
    c.problem.alibi = n.alibi;
    c.problem.return_lse = true;
    c.problem.seed = seed++;
    c.problem.name = absl::StrCat(c.problem.Id(), "_nonfinite");
    grid.push_back(std::move(c));
  }
  // A value head dim of its own (Ev != E; dO, dV have Ev, dQ, dK E): above E
  // under causal GQA with sinks, below it with a window, padding and a bias (dBias),
  // MLA's 192 / 128 prefill in bf16 with softcap and BTHD, and NaN/Inf
  // inputs.
  auto add_value_dim = [&](AttentionProblem p, int64_t dv, bool with_dbias, const char* tag) {
    GradCase c;
    c.problem = std::move(p);
    c.problem.value_head_dim = dv;
    c.problem.return_lse = true;
    c.with_dbias = with_dbias;
    c.problem.seed = seed++;
    c.problem.name = absl::StrCat(c.problem.Id(), "_", tag);
    grid.push_back(std::move(c));
  };
  {
    AttentionProblem p = BasicProblem(2, 4, 2, 33, 33, 24);
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kBottomRight;
    p.sinks = true;  // dsinks = -sum P_sink dO.O runs over Ev
    add_value_dim(p, 40, false, "dv_above");
    p = BasicProblem(2, 4, 4, 20, 45, 64);
    p.mask = MaskKind::kSlidingWindow;
    p.alignment = Alignment::kBottomRight;
    p.window_left = 12;
    p.window_right = 2;
    p.kv_lengths = {30, 0};
    p.additive_bias = true;
    add_value_dim(p, 16, true, "dv_below");
    p = BasicProblem(1, 4, 1, 40, 40, 192);
    p.dtype = p.kv_dtype = DType::kBF16;
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kBottomRight;
    p.softcap = 1.5f;
    p.layout = Layout::kBTHD;
    add_value_dim(p, 128, false, "dv_mla");
    p = BasicProblem(1, 4, 2, 40, 40, 32);
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kBottomRight;
    p.nonfinite_inputs = 4;
    add_value_dim(p, 56, false, "dv_nonfinite");
  }
  return grid;
}

absl::StatusOr<ProblemData> GradCaseData(const GradCase& c) {
  const AttentionProblem& p = c.problem;
  ATTNKIT_ASSIGN_OR_RETURN(ProblemData data, ProblemData::Random(p, p.seed));
  const bool batch = c.broadcast == Broadcast::kBatch || c.broadcast == Broadcast::kBatchAndHeads;
  const bool heads = c.broadcast == Broadcast::kHeads || c.broadcast == Broadcast::kBatchAndHeads;
  // [B, H, Tq, Tk] views over their own first slices: stride 0 in B and/or H.
  for (Tensor* t : {&data.bias, &data.blocked_mask}) {
    if (t->view().empty() || (!batch && !heads)) continue;
    TensorView view = t->view();
    if (batch) view.strides[0] = 0;
    if (heads) view.strides[1] = 0;
    ATTNKIT_RETURN_IF_ERROR(t->SetView(view));
  }
  if (c.block_last_row) {
    const int64_t b = p.batch - 1, h = p.num_heads - 1, i = p.q_len - 1;
    if (p.blocked_mask) {
      const TensorView& m = data.blocked_mask.view();
      for (int64_t j = 0; j < p.kv_len; ++j) {
        static_cast<uint8_t*>(m.data)[m.Offset(b, h, i, j)] = 1;
      }
    } else if (p.additive_bias) {
      const TensorView& bias = data.bias.view();
      for (int64_t j = 0; j < p.kv_len; ++j) {
        StoreFromF32(bias.data, DType::kF32, bias.Offset(b, h, i, j),
                     -std::numeric_limits<float>::infinity());
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          p.name, ": block_last_row needs a dense mask or a bias to block the row with"));
    }
  }
  return data;
}

}  // namespace attnkit
