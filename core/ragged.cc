#include "core/ragged.h"

#include <algorithm>

namespace attnkit {
namespace {

// Element `offset` of `t` onwards, as the logical [1, heads, n, d] view of a
// packed token-major [tokens, heads, d] tensor (rank 3) or [1, heads, n] of
// a [tokens, heads] one (rank 2, the int8 scales).
TensorView SequenceView(const TensorView& t, int64_t token, int64_t n) {
  TensorView v = t;
  char* base = static_cast<char*>(t.data);
  v.data = base + token * t.strides[0] * static_cast<int64_t>(DTypeSize(t.dtype));
  if (t.rank == 3) {
    v.rank = 4;
    v.shape = {1, t.shape[1], n, t.shape[2]};
    v.strides = {0, t.strides[1], t.strides[0], t.strides[2]};
  } else {
    v.rank = 3;
    v.shape = {1, t.shape[1], n, 0};
    v.strides = {0, t.strides[1], t.strides[0], 0};
  }
  return v;
}

// Row b of a [B, n] tensor as [1, n'] (block table) or element b of [B]
// as [1] (kv_lengths).
TensorView RowView(const TensorView& t, int64_t b, int64_t n) {
  TensorView v = t;
  v.data = static_cast<char*>(t.data) + b * t.strides[0] * static_cast<int64_t>(DTypeSize(t.dtype));
  v.shape[0] = 1;
  if (t.rank == 2) v.shape[1] = n;
  return v;
}

}  // namespace

std::vector<SequenceCall> RaggedSequences(const AttentionProblem& p, const AttentionArgs& a) {
  std::vector<SequenceCall> calls;
  int64_t q_offset = 0, k_offset = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t nq = p.QLength(b), nk = p.KvLength(b);
    if (nq > 0) {
      SequenceCall c;
      c.index = b;
      c.q_offset = q_offset;
      AttentionProblem& s = c.problem;
      s = p;
      s.batch = 1;
      s.q_len = nq;
      s.q_lengths.clear();
      s.kv_len = std::max<int64_t>(1, nk);
      s.kv_lengths.clear();
      if (nk == 0) s.kv_lengths = {0};
      AttentionArgs& sa = c.args;
      sa.sinks = a.sinks;  // [H]: every sequence's
      sa.alibi_slopes = a.alibi_slopes;
      sa.q = SequenceView(a.q, q_offset, nq);
      sa.o = SequenceView(a.o, q_offset, nq);
      if (p.return_lse) {  // [H, total_q] -> [1, H, nq]
        sa.lse = a.lse;
        sa.lse.data = static_cast<float*>(a.lse.data) + q_offset * a.lse.strides[1];
        sa.lse.rank = 3;
        sa.lse.shape = {1, a.lse.shape[0], nq, 0};
        sa.lse.strides = {0, a.lse.strides[0], a.lse.strides[1], 0};
      }
      if (nk == 0) sa.kv_lengths = RowView(a.kv_lengths, b, 1);
      if (p.is_paged()) {
        sa.k = a.k;
        sa.v = a.v;
        sa.k_scale = a.k_scale;
        sa.v_scale = a.v_scale;
        sa.block_table = RowView(a.block_table, b, s.max_pages());
      } else {
        // A sequence without keys reads none: its one-row view starts at row
        // 0 (which exists: packed K/V hold at least one key), never past the
        // end of the packed tensor.
        const int64_t first = nk == 0 ? 0 : k_offset;
        sa.k = SequenceView(a.k, first, s.kv_len);
        sa.v = SequenceView(a.v, first, s.kv_len);
        if (!a.k_scale.empty()) {
          sa.k_scale = SequenceView(a.k_scale, first, s.kv_len);
          sa.v_scale = SequenceView(a.v_scale, first, s.kv_len);
        }
      }
      calls.push_back(std::move(c));
    }
    q_offset += nq;
    k_offset += nk;
  }
  return calls;
}

}  // namespace attnkit
