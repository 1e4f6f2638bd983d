#include "backends/highway/flash_params.h"

#include "absl/strings/str_format.h"
#include "core/alibi.h"
#include "core/fast_compute.h"
#include "hwy/targets.h"

namespace attnkit {

FlashParams MakeFlashParams(const AttentionProblem& p, const AttentionArgs& a) {
  FlashParams f;
  f.batch = p.batch;
  f.num_heads = p.num_heads;
  f.num_kv_heads = p.num_kv_heads;
  f.group = p.group_size();
  f.head_dim = p.head_dim;
  f.value_dim = p.value_dim();
  f.q_len = p.q_len;
  f.kv_len = p.kv_len;
  f.q = a.q;
  f.k = a.k;
  f.v = a.v;
  f.o = a.o;
  f.kv_rows = KvRows(p, a);
  f.k_row_stride = KvRows::RowStride(a.k, p.is_paged());
  f.v_row_stride = KvRows::RowStride(a.v, p.is_paged());
  if (IsScaledKv(p.kv_dtype)) {
    f.k_scale = static_cast<const float*>(a.k_scale.data);
    f.v_scale = static_cast<const float*>(a.v_scale.data);
    f.k_scale_view = a.k_scale;
    f.v_scale_view = a.v_scale;
  }
  if (p.return_lse) {
    f.lse = static_cast<float*>(a.lse.data);
    f.lse_view = a.lse;
  }
  if (p.blocked_mask) {
    f.blocked = static_cast<const uint8_t*>(a.blocked_mask.data);
    f.blocked_view = a.blocked_mask;
  }
  if (p.additive_bias) {
    f.bias = static_cast<const float*>(a.bias.data);
    f.bias_view = a.bias;
  }
  if (p.sinks) {
    f.sinks = static_cast<const float*>(a.sinks.data);
    f.sinks_view = a.sinks;
  }
  if (p.alibi) {
    f.alibi_slopes = static_cast<const float*>(a.alibi_slopes.data);
    f.alibi_view = a.alibi_slopes;
    // The longest distance from a diagonal is below kv_len + q_len.
    f.alibi_vector = true;
    for (int64_t h = 0; h < p.num_heads; ++h) {
      f.alibi_vector = f.alibi_vector && AlibiTermsAreFinite(f.AlibiSlope(h), p.kv_len + p.q_len);
    }
  }
  if (p.has_kv_lengths()) f.kv_lengths = p.kv_lengths.data();
  f.mask = p.mask_params();
  f.scale = p.scale;
  f.softcap = p.softcap;
  f.round_q = FastRoundsQuery(p);
  f.fast = p.fast();
  return f;
}

std::string FlashRunInfo::Describe() const {
  std::string s = absl::StrFormat("flash/%s q%dxk%d pv%dx%d rows=%d ktile=%d split-k=%d threads=%d",
                                  hwy::TargetName(target), score_rows, score_keys, value_rows,
                                  value_cols, q_rows, key_tile, splits, threads);
  if (!products.empty()) s += " " + products;
  if (sequences > 1) {
    s += absl::StrFormat(" ragged seqs=%d items=%d util=%.2f", sequences, items, utilisation);
  }
  return s;
}

}  // namespace attnkit
