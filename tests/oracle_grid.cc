#include "tests/oracle_grid.h"

#include "absl/strings/str_format.h"

namespace attnkit {

AttentionProblem OracleGridProblem(DType q_dtype, DType kv_dtype, int64_t d, int64_t tk,
                                   int64_t q_len) {
  AttentionProblem p = BasicProblem(1, 4, 2, q_len, tk, d);
  p.dtype = q_dtype;
  p.kv_dtype = kv_dtype;
  p.mask = MaskKind::kSlidingWindow;
  p.alignment = Alignment::kBottomRight;
  p.window_left = tk <= 17 ? 9 : tk / 3;
  p.window_right = 0;
  p.softcap = 4.0f;
  p.additive_bias = true;
  p.return_lse = true;
  p.name = absl::StrFormat("q%s_kv%s_d%d_tk%d", DTypeName(q_dtype), DTypeName(kv_dtype), d, tk);
  return p;
}

absl::StatusOr<ProblemData> OracleGridData(const AttentionProblem& p, uint64_t seed) {
  constexpr float kQueryGain = 6.0f;
  absl::StatusOr<ProblemData> data = ProblemData::Random(p, seed);
  if (!data.ok()) return data.status();
  const TensorView q = data->q.view();
  ForEachOffset(q, [&](int64_t off) {
    StoreFromF32(data->q.data(), q.dtype, off, kQueryGain * q.LoadF32(off));
  });
  return data;
}

}  // namespace attnkit
