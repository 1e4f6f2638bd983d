#include "backends/cuda/bwd_test_cases.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace attnkit {
namespace cuda {

std::vector<BwdTestCase> BackwardTestCases() {
  std::vector<BwdTestCase> out;
  auto add = [&](AttentionProblem p, DType dt, DType kv, bool dbias = false, bool block = false) {
    p.dtype = dt;
    p.kv_dtype = kv;
    p.return_lse = true;
    p.name = absl::StrCat(p.Id(), dbias ? "_dbias" : "", block ? "_blockrow" : "");
    out.push_back(BwdTestCase{p, dbias, block});
  };
  add(BasicProblem(1, 1, 1, 1, 1, 16), DType::kF32, DType::kF32);    // one query, one key
  add(BasicProblem(2, 4, 4, 37, 37, 64), DType::kF32, DType::kF32);  // MHA
  for (Alignment a : {Alignment::kTopLeft, Alignment::kBottomRight}) {
    AttentionProblem causal = BasicProblem(1, 8, 2, 101, 67, 128);  // GQA 4, Tq > Tk
    causal.mask = MaskKind::kCausal;
    causal.alignment = a;
    add(causal, DType::kBF16, DType::kBF16);
    AttentionProblem mqa = BasicProblem(2, 4, 1, 33, 150, 64);  // MQA, Tq < Tk
    mqa.mask = MaskKind::kCausal;
    mqa.alignment = a;
    add(mqa, DType::kF32, DType::kF32);
  }
  AttentionProblem mha_tl = BasicProblem(2, 4, 4, 37, 101, 64);  // MHA, Tq < Tk
  mha_tl.mask = MaskKind::kCausal;
  mha_tl.alignment = Alignment::kTopLeft;
  add(mha_tl, DType::kBF16, DType::kBF16);
  AttentionProblem gqa_br = BasicProblem(1, 8, 2, 101, 37, 80);  // d padded to 128
  gqa_br.mask = MaskKind::kCausal;
  gqa_br.alignment = Alignment::kBottomRight;  // the first 64 rows see no key
  add(gqa_br, DType::kF16, DType::kF16);
  AttentionProblem window_mqa = BasicProblem(1, 4, 1, 70, 300, 128);
  window_mqa.mask = MaskKind::kSlidingWindow;
  window_mqa.alignment = Alignment::kBottomRight;
  window_mqa.window_left = 40;
  window_mqa.window_right = 2;
  add(window_mqa, DType::kF32, DType::kBF16);
  AttentionProblem window = BasicProblem(1, 4, 2, 70, 300, 80);
  window.mask = MaskKind::kSlidingWindow;
  window.alignment = Alignment::kBottomRight;
  window.window_left = 40;
  window.window_right = 2;
  add(window, DType::kF16, DType::kF16);
  AttentionProblem padded = BasicProblem(2, 8, 2, 45, 129, 128);
  padded.mask = MaskKind::kCausal;
  padded.alignment = Alignment::kBottomRight;
  padded.kv_lengths = {70, 0};
  add(padded, DType::kBF16, DType::kF32);
  AttentionProblem dense = BasicProblem(1, 4, 2, 37, 101, 16);
  dense.blocked_mask = true;
  add(dense, DType::kF32, DType::kBF16, false, /*block=*/true);
  // Causal, top-left, with an additive bias: d 80 with dBias and a -inf row, d 64 without.
  auto bias = [](int64_t head_dim) {
    AttentionProblem p = BasicProblem(2, 4, 1, 40, 130, head_dim);
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kTopLeft;
    p.additive_bias = true;
    return p;
  };
  add(bias(80), DType::kF32, DType::kF32, /*dbias=*/true, /*block=*/true);
  add(bias(64), DType::kBF16, DType::kBF16);
  // Softcap, BTHD: d 256 exactly and d 200 padded to 256.
  auto cap = [](int64_t head_dim) {
    AttentionProblem p = BasicProblem(1, 6, 3, 45, 200, head_dim);
    p.mask = MaskKind::kCausal;
    p.alignment = Alignment::kBottomRight;
    p.softcap = 1.5f;
    p.scale = 0.3f;
    p.layout = Layout::kBTHD;
    return p;
  };
  add(cap(256), DType::kF16, DType::kF16);
  add(cap(200), DType::kF32, DType::kF32);
  AttentionProblem all = BasicProblem(2, 4, 2, 50, 140, 128);
  all.mask = MaskKind::kSlidingWindow;
  all.alignment = Alignment::kBottomRight;
  all.window_left = 36;
  all.window_right = 2;
  all.kv_lengths = {71, 140};
  all.blocked_mask = all.additive_bias = true;
  all.softcap = 1.5f;
  all.layout = Layout::kBTHD;
  add(all, DType::kBF16, DType::kBF16, true, true);
  add(BasicProblem(1, 8, 2, 1, 300, 64), DType::kBF16, DType::kBF16);  // decode shape
  AttentionProblem longer = BasicProblem(1, 4, 2, 300, 700, 64);  // 11 key blocks, 19 row tiles
  longer.mask = MaskKind::kCausal;
  longer.alignment = Alignment::kBottomRight;
  add(longer, DType::kBF16, DType::kBF16);
  // Sinks (dsinks) and ALiBi: a gpt-oss-like sliding window with sinks over
  // several key blocks; sinks with a causal mask and a row that sees only
  // its sink; ALiBi causal (MHA, slopes of the paper); and all three of
  // sinks, ALiBi and softcap at once.
  AttentionProblem sinks_window = BasicProblem(2, 8, 2, 70, 200, 64);
  sinks_window.mask = MaskKind::kSlidingWindow;
  sinks_window.alignment = Alignment::kBottomRight;
  sinks_window.window_left = 50;
  sinks_window.window_right = 0;
  sinks_window.sinks = true;
  add(sinks_window, DType::kBF16, DType::kBF16);
  AttentionProblem sinks_causal = BasicProblem(1, 4, 2, 40, 90, 80);
  sinks_causal.mask = MaskKind::kCausal;
  sinks_causal.alignment = Alignment::kBottomRight;
  sinks_causal.blocked_mask = true;
  sinks_causal.sinks = true;
  add(sinks_causal, DType::kF32, DType::kF32, false, /*block=*/true);
  AttentionProblem alibi = BasicProblem(2, 4, 4, 60, 130, 64);
  alibi.mask = MaskKind::kCausal;
  alibi.alignment = Alignment::kBottomRight;
  alibi.alibi = true;
  add(alibi, DType::kBF16, DType::kBF16);
  AttentionProblem every = BasicProblem(1, 8, 2, 45, 150, 128);
  every.mask = MaskKind::kCausal;
  every.alignment = Alignment::kTopLeft;
  every.sinks = every.alibi = true;
  every.softcap = 2.0f;
  every.additive_bias = true;
  add(every, DType::kF32, DType::kF32, /*dbias=*/true);
  return out;
}

absl::Status BlockLastRow(const AttentionProblem& p, ProblemData* data) {
  if (!p.blocked_mask && !p.additive_bias) {
    return absl::InvalidArgumentError(absl::StrCat("BlockLastRow: problem ", p.name,
                                                   " has neither blocked_mask nor additive_bias"));
  }
  const int64_t b = p.batch - 1, h = p.num_heads - 1, i = p.q_len - 1;
  for (int64_t j = 0; j < p.kv_len; ++j) {
    if (p.blocked_mask) {
      const TensorView& m = data->blocked_mask.view();
      static_cast<uint8_t*>(m.data)[m.Offset(b, h, i, j)] = 1;
    } else {
      const TensorView& bias = data->bias.view();
      StoreFromF32(bias.data, DType::kF32, bias.Offset(b, h, i, j),
                   -std::numeric_limits<float>::infinity());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ProblemData> BackwardTestData(const BwdTestCase& c, uint64_t seed) {
  auto data = ProblemData::Random(c.problem, seed);
  if (!data.ok() || !c.block_last_row) return data;
  const absl::Status blocked = BlockLastRow(c.problem, &*data);
  if (!blocked.ok()) return blocked;
  return data;
}

::testing::AssertionResult LastRowDqIsZero(const AttentionProblem& p, const GradData& grads) {
  const TensorView& dq = grads.dq.view();
  for (int64_t e = 0; e < p.head_dim; ++e) {
    const float got = dq.LoadF32(dq.Offset(p.batch - 1, p.num_heads - 1, p.q_len - 1, e));
    if (got != 0.0f) {
      return ::testing::AssertionFailure()
             << p.name << ": dQ[" << e << "] of the last row, which sees no key, is " << got;
    }
  }
  return ::testing::AssertionSuccess();
}

std::string GradientBits(const GradData& grads) {
  std::string out;
  for (const Tensor* t : {&grads.dq, &grads.dk, &grads.dv, &grads.dbias}) {
    if (t->view().empty()) continue;
    out.append(static_cast<const char*>(t->data()),
               t->view().SpanElements() * DTypeSize(t->view().dtype));
  }
  return out;
}

}  // namespace cuda
}  // namespace attnkit
