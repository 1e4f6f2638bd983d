#include "backends/highway/flash_params.h"

#include "absl/strings/str_format.h"
#include "hwy/targets.h"

namespace attnkit {

FlashParams MakeFlashParams(const AttentionProblem& p, const AttentionArgs& a) {
  FlashParams f;
  f.batch = p.batch;
  f.num_heads = p.num_heads;
  f.num_kv_heads = p.num_kv_heads;
  f.group = p.group_size();
  f.head_dim = p.head_dim;
  f.q_len = p.q_len;
  f.kv_len = p.kv_len;
  f.q = a.q;
  f.k = a.k;
  f.v = a.v;
  f.o = a.o;
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
  if (p.has_kv_lengths()) f.kv_lengths = p.kv_lengths.data();
  f.mask = p.mask_params();
  f.scale = p.scale;
  f.softcap = p.softcap;
  return f;
}

std::string FlashRunInfo::Describe() const {
  return absl::StrFormat("flash/%s q%dxk%d pv%dx%d rows=%d ktile=%d split-k=%d threads=%d",
                         hwy::TargetName(target), score_rows, score_keys, value_rows,
                         value_cols, q_rows, key_tile, splits, threads);
}

}  // namespace attnkit
