#include "distributed/block_plan.h"

#include <algorithm>

#include "core/mask.h"

namespace attnkit {
namespace dist {
namespace {

int64_t Clamp(int64_t x, int64_t lo, int64_t hi) { return std::min(std::max(x, lo), hi); }

// The keys of local row i (global query q0 + i) in the chunk, as a local
// range [begin, end) inside [0, local_len); empty rows are [0, 0).
KeyRange LocalRow(const MaskParams& m, int64_t kv_length, int64_t q, int64_t k0,
                  int64_t local_len) {
  const KeyRange r = VisibleKeys(m, q, kv_length);
  const int64_t b = Clamp(r.begin - k0, 0, local_len), e = Clamp(r.end - k0, 0, local_len);
  return e > b ? KeyRange{b, e} : KeyRange{0, 0};
}

}  // namespace

BlockPlan PlanBlock(const AttentionProblem& p, int64_t q0, int64_t cq, int64_t k0, int64_t ck,
                    bool build_dense) {
  BlockPlan plan;
  plan.kv_lengths.assign(static_cast<size_t>(p.batch), 0);
  bool any = false, all_none = true, all_causal = true;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t kv_length = p.KvLength(b);
    const int64_t local_len = Clamp(kv_length - k0, 0, ck);
    const MaskParams m = p.mask_params(b);
    bool seen = false, none = true, causal = true;
    for (int64_t i = 0; i < cq && local_len > 0; ++i) {
      const KeyRange r = LocalRow(m, kv_length, q0 + i, k0, local_len);
      seen |= !r.empty();
      none &= r.begin == 0 && r.end == local_len;
      causal &= r.begin == 0 && r.end == std::min(i + 1, local_len);
    }
    if (!seen) continue;  // kv_lengths[b] stays 0: the sequence sees nothing here
    any = true;
    plan.kv_lengths[static_cast<size_t>(b)] = local_len;
    all_none &= none;
    all_causal &= causal;
  }
  if (!any) {
    plan.mask = BlockMask::kHidden;
  } else if (all_none) {
    plan.mask = BlockMask::kNone;
  } else if (all_causal) {
    plan.mask = BlockMask::kCausal;
  } else {
    plan.mask = BlockMask::kDense;
  }
  if (plan.mask != BlockMask::kDense || !build_dense) return plan;
  plan.dense.assign(static_cast<size_t>(p.batch * cq * ck), 1);
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t local_len = plan.kv_lengths[static_cast<size_t>(b)];
    const MaskParams m = p.mask_params(b);
    for (int64_t i = 0; i < cq && local_len > 0; ++i) {
      const KeyRange r = LocalRow(m, p.KvLength(b), q0 + i, k0, local_len);
      uint8_t* row = plan.dense.data() + (b * cq + i) * ck;
      std::fill(row + r.begin, row + r.end, uint8_t{0});
    }
  }
  return plan;
}

AttentionProblem BlockProblem(const AttentionProblem& p, const BlockPlan& plan, int64_t cq,
                              int64_t ck) {
  AttentionProblem sp = BasicProblem(p.batch, p.num_heads, p.num_kv_heads, cq, ck, p.head_dim);
  sp.name = p.name + "_block";
  sp.dtype = DType::kF32;
  sp.kv_dtype = p.kv_dtype;
  sp.scale = p.scale;
  sp.softcap = p.softcap;
  sp.return_lse = true;
  sp.memory_budget_bytes = p.memory_budget_bytes;
  sp.backend = p.backend;
  sp.mask = plan.mask == BlockMask::kCausal ? MaskKind::kCausal : MaskKind::kNone;
  sp.alignment = Alignment::kTopLeft;
  sp.blocked_mask = plan.mask == BlockMask::kDense;
  for (int64_t len : plan.kv_lengths) {
    if (len < ck) {
      sp.kv_lengths = plan.kv_lengths;
      break;
    }
  }
  return sp;
}

int RingSteps(const AttentionProblem& p, const ShardLayout& q_layout,
              const ShardLayout& kv_layout) {
  const int n = q_layout.num_ranks;
  for (int s = n - 1; s > 0; --s) {
    for (int r = 0; r < n; ++r) {
      const int src = ((r - s) % n + n) % n;
      for (const RowRange& qc : q_layout.Ranges(r)) {
        for (const RowRange& kc : kv_layout.Ranges(src)) {
          if (PlanBlock(p, qc.begin, qc.rows, kc.begin, kc.rows, /*build_dense=*/false).mask !=
              BlockMask::kHidden) {
            return s + 1;
          }
        }
      }
    }
  }
  return 1;
}

}  // namespace dist
}  // namespace attnkit
