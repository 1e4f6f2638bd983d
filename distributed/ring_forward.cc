// The ring forward pass (distributed/ring_attention.h): K/V blocks travel from rank
// r to r + 1 while each rank computes its query chunks against the block it
// holds, merging block outputs in step order through the log-sum-exp.
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "distributed/block_plan.h"
#include "distributed/ring_internal.h"

namespace attnkit {
namespace dist {
absl::Status RingForward(const RingContext& ctx, const ShardArgs& shard) {
  const AttentionProblem& p = *ctx.p;
  Communicator& comm = *ctx.comm;
  const int n = comm.size(), r = comm.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const int64_t B = p.batch, H = p.num_heads, G = p.num_kv_heads, d = p.head_dim;
  const std::vector<RowRange> q_chunks = ctx.q_layout.Ranges(r);
  const int64_t cq = ctx.q_layout.chunk(), ck = ctx.kv_layout.chunk();
  const int64_t tk_local = ctx.kv_layout.LocalRows();
  const int64_t nq = static_cast<int64_t>(q_chunks.size());
  const int64_t chunk_rows = B * H * cq;

  // f32 queries and accumulators, one [B, H, cq, d] slab per query chunk;
  // one block's output and lse; the block's kv_lengths.
  Workspace& ws = *ctx.workspace;
  ATTNKIT_ASSIGN_OR_RETURN(float* qf_data, ws.Floats(0, nq * chunk_rows * d, false));
  ATTNKIT_ASSIGN_OR_RETURN(float* acc_o_data, ws.Floats(1, nq * chunk_rows * d, true));
  ATTNKIT_ASSIGN_OR_RETURN(float* acc_lse_data, ws.Floats(2, nq * chunk_rows, false));
  ATTNKIT_ASSIGN_OR_RETURN(float* part_o, ws.Floats(3, chunk_rows * d, false));
  ATTNKIT_ASSIGN_OR_RETURN(float* part_lse, ws.Floats(4, chunk_rows, false));
  ATTNKIT_ASSIGN_OR_RETURN(void* lens_data, ws.Bytes(5, B * 4));
  int32_t* lens = static_cast<int32_t*>(lens_data);
  std::fill(acc_lse_data, acc_lse_data + nq * chunk_rows, -std::numeric_limits<float>::infinity());
  for (int64_t c = 0; c < nq; ++c) {
    RowsToF32(shard.q, q_chunks[c].local, cq, qf_data + c * chunk_rows * d);
  }

  // Stage 0 computes on the caller's K/V; later stages alternate between two
  // receive buffers (K then V in each).
  const int64_t kv_bytes = B * G * tk_local * d * static_cast<int64_t>(DTypeSize(p.kv_dtype));
  char* stages[2] = {nullptr, nullptr};
  if (ctx.steps > 1) {
    for (int i = 0; i < 2; ++i) {
      ATTNKIT_ASSIGN_OR_RETURN(void* stage, ws.Bytes(6 + i, 2 * kv_bytes));
      stages[i] = static_cast<char*>(stage);
    }
  }
  void* cur_k = shard.k.data;
  void* cur_v = shard.v.data;

  for (int s = 0; s < ctx.steps; ++s) {
    const int src = (r - s % n + n) % n;
    std::vector<Communicator::Request> transfers;
    char* next_kv = nullptr;
    const double posted = NowSeconds();
    if (s + 1 < ctx.steps) {
      next_kv = stages[s % 2];
      ATTNKIT_RETURN_IF_ERROR(
          PassKvBlock(comm, cur_k, cur_v, next_kv, kv_bytes, next, prev, &transfers));
    }
    auto compute = [&]() -> absl::Status {
      for (int64_t c = 0; c < nq; ++c) {
        for (const RowRange& kc : ctx.kv_layout.Ranges(src)) {
          const BlockPlan plan = PlanBlock(p, q_chunks[c].begin, cq, kc.begin, ck);
          if (plan.mask == BlockMask::kHidden) {
            ++ctx.stats->blocks_skipped;
            continue;
          }
          const AttentionProblem sp = BlockProblem(p, plan, cq, ck);
          AttentionArgs args;
          args.q = ContiguousView(qf_data + c * chunk_rows * d, DType::kF32, {B, H, cq, d});
          args.k = RowView(cur_k, p.kv_dtype, B, G, tk_local, kc.local, ck, d);
          args.v = RowView(cur_v, p.kv_dtype, B, G, tk_local, kc.local, ck, d);
          args.o = ContiguousView(part_o, DType::kF32, {B, H, cq, d});
          args.lse = ContiguousView(part_lse, DType::kF32, {B, H, cq});
          SetBlockMask(sp, plan, lens, &args);
          const absl::Status st = ctx.backend->Forward(sp, args);
          if (!st.ok()) {
            return absl::Status(st.code(),
                                absl::StrFormat("ring step %d, queries [%d, +%d) x keys [%d, +%d) "
                                                "on backend %s: %s",
                                                s, q_chunks[c].begin, cq, kc.begin, ck,
                                                ctx.backend->Name(), st.message()));
          }
          MergePartial(acc_o_data + c * chunk_rows * d, acc_lse_data + c * chunk_rows, part_o,
                       part_lse, chunk_rows, d);
          ++ctx.stats->blocks_computed;
        }
      }
      return absl::OkStatus();
    };
    ATTNKIT_RETURN_IF_ERROR(ComputeWhileTransferring(
        comm, transfers, posted, absl::StrFormat("K/V block for ring step %d", s + 1), compute,
        ctx.stats));
    if (next_kv != nullptr) {
      cur_k = next_kv;
      cur_v = next_kv + kv_bytes;
    }
  }
  // Rows no key reached keep O = 0 and lse = -inf.
  for (int64_t c = 0; c < nq; ++c) {
    RowsFromF32(acc_o_data + c * chunk_rows * d, q_chunks[c].local, cq, shard.o);
    if (!shard.lse.empty()) {
      RowsFromF32(acc_lse_data + c * chunk_rows, q_chunks[c].local, cq, shard.lse);
    }
  }
  return absl::OkStatus();
}

}  // namespace dist
}  // namespace attnkit
