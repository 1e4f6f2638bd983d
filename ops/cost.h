// The cost model of one attention call and of its layer: useful FLOPs over
// the exact visible pairs, bytes moved, score-tensor size, KV-cache bytes and
// projection parameters.
#ifndef ATTNKIT_OPS_COST_H_
#define ATTNKIT_OPS_COST_H_

#include <cstdint>
#include <string>

#include "core/problem.h"

namespace attnkit {

struct CostReport {
  int64_t visible_pairs = 0;  // (b, h, i, j) pairs left by mask and padding
  int64_t total_pairs = 0;    // B * H * Tq * Tk
  double useful_flops = 0;    // 4 * d * visible_pairs (QK^T and PV)
  double dense_flops = 0;     // 4 * d * total_pairs
  int64_t bytes_q = 0, bytes_k = 0, bytes_v = 0, bytes_o = 0;
  int64_t bytes_extra = 0;     // lse, kv_lengths, blocked mask, bias, block table, cu_seqlens
  int64_t bytes_moved = 0;     // every tensor read or written once
  int64_t score_entries = 0;   // B * H * Tq * Tk, what a naive kernel materialises
  int64_t kv_cache_bytes = 0;  // K and V rows read (KvBytesRead: int8 scales in, padding out)
  // Wq [D, H*d], Wk and Wv [D, G*d], Wo [H*d, D]: 2 * D * d * (H + G).
  int64_t projection_params = 0;
};

CostReport ComputeCost(const AttentionProblem& p);
// A human-readable multi-line report.
std::string FormatCost(const AttentionProblem& p, const CostReport& c);

}  // namespace attnkit

#endif  // ATTNKIT_OPS_COST_H_
