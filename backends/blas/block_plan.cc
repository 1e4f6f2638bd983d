#include "backends/blas/block_plan.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "core/fast_compute.h"

namespace attnkit {
namespace blas {
namespace {

constexpr size_t kAlign = 64;
constexpr int64_t kMinKeyChunk = 16;
// Below this the S block no longer amortises the per-chunk O rescale, so rows
// are given up before keys.
constexpr int64_t kPreferredMinKeyChunk = 512;

size_t AlignedFloats(int64_t n) {
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int64_t BlockPlan::NumItems(const AttentionProblem& p) const {
  return p.batch * p.num_kv_heads * CeilDiv(p.group_size(), head_block) *
         CeilDiv(p.q_len, token_block);
}

int64_t U8SumInts(int64_t rows, int64_t value_dim) {
  return std::max<int64_t>(16384, rows * value_dim);
}

size_t WorkerBytes(int64_t rows, int64_t key_chunk, int64_t head_dim, int64_t value_dim,
                   bool stage_kv, bool u8_weights) {
  size_t bytes = AlignedFloats(rows * head_dim)                         // q
                 + AlignedFloats(rows * std::max(head_dim, value_dim))  // o
                 + AlignedFloats(rows * key_chunk)                      // s
                 + 4 * AlignedFloats(rows)    // row_max, row_sum, row_bad, q_scale
                 + AlignedFloats(key_chunk);  // k_scale
  if (stage_kv) bytes += AlignedFloats(key_chunk * head_dim) + AlignedFloats(key_chunk * value_dim);
  if (u8_weights) {
    bytes += AlignedFloats(CeilDiv(rows * key_chunk, 4))                   // pw
             + AlignedFloats(rows * CeilDiv(key_chunk, kFastWeightBlock))  // pw_scale
             + AlignedFloats(key_chunk)                                    // v_scale
             + AlignedFloats(U8SumInts(rows, value_dim));                  // pv_sums
  }
  return bytes;
}

WorkerScratch CarveScratch(const BlockPlan& plan, int64_t head_dim, int64_t value_dim,
                           void* region) {
  char* at = static_cast<char*>(region);
  auto take = [&at](int64_t floats) {
    float* p = reinterpret_cast<float*>(at);
    at += AlignedFloats(floats);
    return p;
  };
  const int64_t rows = plan.rows();
  WorkerScratch s;
  s.q = take(rows * head_dim);
  s.o = take(rows * std::max(head_dim, value_dim));
  s.s = take(rows * plan.key_chunk);
  s.row_max = take(rows);
  s.row_sum = take(rows);
  s.row_bad = take(rows);
  s.q_scale = take(rows);
  s.k_scale = take(plan.key_chunk);
  if (plan.stage_kv) {
    s.k = take(plan.key_chunk * head_dim);
    s.v = take(plan.key_chunk * value_dim);
  }
  if (plan.u8_weights) {
    s.pw = reinterpret_cast<uint8_t*>(take(CeilDiv(rows * plan.key_chunk, 4)));
    s.pw_scale = take(rows * CeilDiv(plan.key_chunk, kFastWeightBlock));
    s.v_scale = take(plan.key_chunk);
    s.pv_sums = reinterpret_cast<int32_t*>(take(U8SumInts(rows, value_dim)));
  }
  return s;
}

absl::StatusOr<BlockPlan> MakePlan(const AttentionProblem& p, const PlanOptions& o) {
  BlockPlan plan;
  plan.workers = std::max(1, o.workers);
  plan.stage_kv = o.stage_kv;
  plan.u8_weights = o.u8_weights;
  const int64_t d = p.head_dim, dv = p.value_dim();
  const int64_t target_rows = std::max<int64_t>(1, o.target_rows);
  // The token block is the same whether or not heads are stacked, so the
  // per-head mode differs from the grouped one only in the GEMM shapes.
  plan.token_block = std::min(p.q_len, std::max<int64_t>(1, target_rows / p.group_size()));
  plan.head_block = o.stack_heads ? p.group_size() : 1;

  // A tall block under a narrow window would multiply mostly hidden pairs:
  // keep the block about as tall as the window is wide.
  const MaskParams m = p.mask_params();
  if (m.left >= 0 && m.right >= 0) {
    plan.token_block = std::min(plan.token_block, std::max<int64_t>(32, m.left + m.right + 1));
  }
  // Widest key range a block can see: all keys, or the block's window.
  auto span = [&](int64_t tokens) {
    if (m.left >= 0 && m.right >= 0) return std::min(p.kv_len, tokens + m.left + m.right);
    return p.kv_len;
  };
  plan.key_chunk = span(plan.token_block);
  if (o.max_key_chunk > 0) plan.key_chunk = std::min(plan.key_chunk, o.max_key_chunk);

  const size_t per_worker = o.budget_bytes / static_cast<size_t>(plan.workers);
  auto fits = [&] {
    return WorkerBytes(plan.rows(), plan.key_chunk, d, dv, plan.stage_kv, plan.u8_weights) <=
           per_worker;
  };
  while (!fits()) {
    if (plan.key_chunk > kPreferredMinKeyChunk) {
      plan.key_chunk = CeilDiv(plan.key_chunk, 2);
    } else if (plan.token_block > 1) {
      plan.token_block = CeilDiv(plan.token_block, 2);
    } else if (plan.head_block > 1) {
      plan.head_block = CeilDiv(plan.head_block, 2);
    } else if (plan.key_chunk > kMinKeyChunk) {
      plan.key_chunk = std::max(kMinKeyChunk, CeilDiv(plan.key_chunk, 2));
    } else {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "memory budget %d bytes over %d workers cannot hold one query row against "
          "a %d-key chunk at head_dim %d (needs %d bytes per worker)",
          o.budget_bytes, plan.workers, kMinKeyChunk, d,
          WorkerBytes(1, kMinKeyChunk, d, dv, plan.stage_kv, plan.u8_weights)));
    }
  }
  plan.panel_tokens =
      o.panel_rows > 0
          ? std::min(plan.token_block, std::max<int64_t>(1, o.panel_rows / plan.head_block))
          : plan.token_block;
  plan.worker_bytes =
      WorkerBytes(plan.rows(), plan.key_chunk, d, dv, plan.stage_kv, plan.u8_weights);
  return plan;
}

}  // namespace blas
}  // namespace attnkit
