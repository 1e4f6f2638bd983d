#include "ops/cost.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace attnkit {
namespace {

std::string Bytes(int64_t bytes) {
  const double b = double(bytes);
  if (b >= double(int64_t{1} << 30))
    return absl::StrFormat("%d B (%.4g GiB)", bytes, b / (1 << 30));
  if (b >= double(1 << 20)) return absl::StrFormat("%d B (%.4g MiB)", bytes, b / (1 << 20));
  if (b >= 1024) return absl::StrFormat("%d B (%.4g KiB)", bytes, b / 1024);
  return absl::StrFormat("%d B", bytes);
}

}  // namespace

CostReport ComputeCost(const AttentionProblem& p) {
  CostReport c;
  const int64_t B = p.batch, H = p.num_heads, d = p.head_dim, dv = p.value_dim();
  const int64_t qsize = DTypeSize(p.dtype);
  const int64_t q_tokens = p.TotalQ();  // B * Tq, or sum(q_lengths) when ragged
  c.visible_pairs = CountVisiblePairs(p);
  c.total_pairs = q_tokens * H * p.kv_len;
  c.useful_flops = UsefulFlops(p);
  c.dense_flops = 2.0 * double(d + dv) * double(c.total_pairs);
  c.bytes_q = q_tokens * H * d * qsize;
  c.bytes_o = q_tokens * H * dv * qsize;
  // The key rows some query sees, per sequence (padding and rows outside
  // every mask are not read), with their int8 scales: K's E and V's Ev
  // columns of each.
  const int64_t kv_bytes = KvBytesRead(p);
  const int64_t scale_bytes = IsScaledKv(p.kv_dtype) ? 4 : 0;
  const int64_t kv_size = DTypeSize(p.kv_dtype);
  c.bytes_k = kv_bytes * (d * kv_size + scale_bytes) / ((d + dv) * kv_size + 2 * scale_bytes);
  c.bytes_v = kv_bytes - c.bytes_k;
  if (p.return_lse) c.bytes_extra += q_tokens * H * 4;
  if (p.has_kv_lengths()) c.bytes_extra += B * 4;
  if (p.is_paged()) c.bytes_extra += B * p.max_pages() * 4;                  // the block table
  if (p.is_ragged()) c.bytes_extra += (p.is_paged() ? 1 : 2) * (B + 1) * 4;  // cu_seqlens
  if (p.blocked_mask) c.bytes_extra += c.total_pairs;
  if (p.additive_bias) c.bytes_extra += c.total_pairs * 4;
  if (p.backward) {
    // The backward pass alone (core/problem.h UsefulBackwardFlops): it reads
    // Q, K, V, O, the lse and dO, and writes dQ, dK, dV (and dBias).
    c.useful_flops = UsefulBackwardFlops(p);
    c.dense_flops = 2.0 * double(3 * d + 2 * dv) * double(c.total_pairs);
    c.bytes_extra += c.bytes_q + c.bytes_o + c.bytes_k + c.bytes_v;  // dO, dQ, dK, dV
    if (p.additive_bias) c.bytes_extra += c.total_pairs * 4;
  }
  c.bytes_moved = c.bytes_q + c.bytes_k + c.bytes_v + c.bytes_o + c.bytes_extra;
  c.score_entries = c.total_pairs;
  c.kv_cache_bytes = c.bytes_k + c.bytes_v;
  // Wq [D, H E], Wk [D, G E], Wv [D, G Ev], Wo [H Ev, D].
  c.projection_params = p.model_dim * (d * (H + p.num_kv_heads) + dv * (H + p.num_kv_heads));
  return c;
}

std::string FormatCost(const AttentionProblem& p, const CostReport& c) {
  std::string out;
  absl::StrAppendFormat(&out, "problem            %s (%s, %d query heads share %d kv heads)\n",
                        p.Id(), p.Variant(), p.num_heads, p.num_kv_heads);
  absl::StrAppendFormat(&out, "visible pairs      %d of %d (%.2f%%)\n", c.visible_pairs,
                        c.total_pairs, c.total_pairs ? 100.0 * c.visible_pairs / c.total_pairs : 0);
  absl::StrAppendFormat(
      &out, "useful FLOPs       %.6g (%s)\n", c.useful_flops,
      p.backward ? "backward pass: 10 * d * visible pairs" : "4 * d * visible pairs");
  absl::StrAppendFormat(&out, "dense FLOPs        %.6g (4 * d * B * H * Tq * Tk)\n", c.dense_flops);
  absl::StrAppendFormat(&out, "bytes moved        %s (q %d, k %d, v %d, o %d, other %d)\n",
                        Bytes(c.bytes_moved), c.bytes_q, c.bytes_k, c.bytes_v, c.bytes_o,
                        c.bytes_extra);
  absl::StrAppendFormat(&out, "arith. intensity   %.3g FLOP/byte\n",
                        c.bytes_moved ? c.useful_flops / c.bytes_moved : 0);
  absl::StrAppendFormat(&out, "score tensor       %d entries (B * H * Tq * Tk; %s as f32)\n",
                        c.score_entries, Bytes(c.score_entries * 4));
  absl::StrAppendFormat(&out, "kv cache           %s per layer (%d tokens, %s%s%s)\n",
                        Bytes(c.kv_cache_bytes), p.kv_len, DTypeName(p.kv_dtype),
                        IsScaledKv(p.kv_dtype) ? " + f32 scale per token and head" : "",
                        p.is_paged() ? absl::StrCat(", pages of ", p.page_size) : "");
  absl::StrAppendFormat(&out, "projection params  %d (model_dim %d: Wq, Wk, Wv, Wo)\n",
                        c.projection_params, p.model_dim);
  return out;
}

}  // namespace attnkit
