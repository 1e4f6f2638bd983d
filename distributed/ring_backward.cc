// The ring backward pass (distributed/ring_attention.h). Each block call is the
// backend's own Backward on the block problem, fed the global O and lse (so
// P = exp(S - lse) and D = rowsum(dO * O) are the whole problem's): its dQ
// adds into this rank's f32 dQ, its dK/dV into the f32 accumulators of the
// block, which travel with the block one step behind its K/V and go home to
// the block's owner after the last step. Every sum runs in step order.
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "distributed/block_plan.h"
#include "distributed/ring_internal.h"

namespace attnkit {
namespace dist {
namespace {

void AddInto(float* acc, const float* part, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += part[i];
}

// acc rows [row0, row0 + rows) of a contiguous [B, G, total, d] buffer +=
// the contiguous part [B, G, rows, d].
void AddRows(float* acc, const float* part, int64_t bg, int64_t total, int64_t row0, int64_t rows,
             int64_t d) {
  for (int64_t x = 0; x < bg; ++x) {
    AddInto(acc + (x * total + row0) * d, part + x * rows * d, rows * d);
  }
}

}  // namespace

absl::Status RingBackward(const RingContext& ctx, const ShardArgs& shard, const ShardGrads& grads) {
  const AttentionProblem& p = *ctx.p;
  Communicator& comm = *ctx.comm;
  const int n = comm.size(), r = comm.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const int64_t B = p.batch, H = p.num_heads, G = p.num_kv_heads, d = p.head_dim;
  const std::vector<RowRange> q_chunks = ctx.q_layout.Ranges(r);
  const int64_t cq = ctx.q_layout.chunk(), ck = ctx.kv_layout.chunk();
  const int64_t tk_local = ctx.kv_layout.LocalRows();
  const int64_t nq = static_cast<int64_t>(q_chunks.size());
  const int64_t qrows = B * H * cq;               // rows of one query chunk
  const int64_t kv_elems = B * G * tk_local * d;  // one of K or V on a rank
  const bool widen_kv = p.kv_dtype != DType::kF32;

  // Slots 0-7 are the forward's (distributed/ring_forward.cc); the backward's follow.
  Workspace& ws = *ctx.workspace;
  ATTNKIT_ASSIGN_OR_RETURN(float* qf, ws.Floats(10, nq * qrows * d, false));
  ATTNKIT_ASSIGN_OR_RETURN(float* of, ws.Floats(11, nq * qrows * d, false));
  ATTNKIT_ASSIGN_OR_RETURN(float* dof, ws.Floats(12, nq * qrows * d, false));
  ATTNKIT_ASSIGN_OR_RETURN(float* lsef, ws.Floats(13, nq * qrows, false));
  ATTNKIT_ASSIGN_OR_RETURN(float* dq_acc, ws.Floats(14, nq * qrows * d, true));
  ATTNKIT_ASSIGN_OR_RETURN(float* dq_part, ws.Floats(15, qrows * d, false));
  ATTNKIT_ASSIGN_OR_RETURN(float* dk_part, ws.Floats(16, B * G * ck * d, false));
  ATTNKIT_ASSIGN_OR_RETURN(float* dv_part, ws.Floats(17, B * G * ck * d, false));
  // This step's dK then dV of the whole block; the travelling accumulators.
  ATTNKIT_ASSIGN_OR_RETURN(float* step_dkv, ws.Floats(18, 2 * kv_elems, false));
  float* acc[2];
  for (int i = 0; i < 2; ++i) {
    ATTNKIT_ASSIGN_OR_RETURN(acc[i], ws.Floats(19 + i, 2 * kv_elems, false));
  }
  float* kvf = nullptr;  // f32 K then V of the current block, when widened
  if (widen_kv) {
    ATTNKIT_ASSIGN_OR_RETURN(kvf, ws.Floats(21, 2 * kv_elems, false));
  }
  ATTNKIT_ASSIGN_OR_RETURN(void* lens_data, ws.Bytes(22, B * 4));
  int32_t* lens = static_cast<int32_t*>(lens_data);
  for (int64_t c = 0; c < nq; ++c) {
    RowsToF32(shard.q, q_chunks[c].local, cq, qf + c * qrows * d);
    RowsToF32(shard.o, q_chunks[c].local, cq, of + c * qrows * d);
    RowsToF32(grads.d_o, q_chunks[c].local, cq, dof + c * qrows * d);
    RowsToF32(shard.lse, q_chunks[c].local, cq, lsef + c * qrows);
  }

  const int64_t kv_bytes = kv_elems * static_cast<int64_t>(DTypeSize(p.kv_dtype));
  const int64_t dkv_bytes = 2 * kv_elems * static_cast<int64_t>(sizeof(float));
  char* stages[2] = {nullptr, nullptr};
  if (ctx.steps > 1) {
    for (int i = 0; i < 2; ++i) {
      ATTNKIT_ASSIGN_OR_RETURN(void* stage, ws.Bytes(23 + i, 2 * kv_bytes));
      stages[i] = static_cast<char*>(stage);
    }
  }
  void* cur_k = shard.k.data;
  void* cur_v = shard.v.data;
  std::vector<Communicator::Request> dkv_sends;  // the accumulator sent last step

  for (int s = 0; s < ctx.steps; ++s) {
    const int src = (r - s % n + n) % n;
    float* my_acc = acc[s % 2];
    std::vector<Communicator::Request> kv_transfers, dkv_recv;
    char* next_kv = nullptr;
    const double posted = NowSeconds();
    if (s + 1 < ctx.steps) {
      next_kv = stages[s % 2];
      ATTNKIT_RETURN_IF_ERROR(
          PassKvBlock(comm, cur_k, cur_v, next_kv, kv_bytes, next, prev, &kv_transfers));
    }
    if (s > 0) {  // the block's dK/dV so far, from the rank that held it last step
      ATTNKIT_RETURN_IF_ERROR(Post(comm.Irecv(my_acc, dkv_bytes, prev, kTagDkv), &dkv_recv));
    }

    auto compute = [&]() -> absl::Status {
      void* bk = cur_k;
      void* bv = cur_v;
      if (widen_kv) {
        const TensorView k_all = ContiguousView(cur_k, p.kv_dtype, {B, G, tk_local, d});
        const TensorView v_all = ContiguousView(cur_v, p.kv_dtype, {B, G, tk_local, d});
        RowsToF32(k_all, 0, tk_local, kvf);
        RowsToF32(v_all, 0, tk_local, kvf + kv_elems);
        bk = kvf;
        bv = kvf + kv_elems;
      }
      std::memset(step_dkv, 0, static_cast<size_t>(dkv_bytes));
      for (int64_t c = 0; c < nq; ++c) {
        for (const RowRange& kc : ctx.kv_layout.Ranges(src)) {
          const BlockPlan plan = PlanBlock(p, q_chunks[c].begin, cq, kc.begin, ck);
          if (plan.mask == BlockMask::kHidden) {
            ++ctx.stats->blocks_skipped;
            continue;
          }
          AttentionProblem sp = BlockProblem(p, plan, cq, ck);
          sp.kv_dtype = DType::kF32;
          AttentionArgs args;
          args.q = ContiguousView(qf + c * qrows * d, DType::kF32, {B, H, cq, d});
          args.o = ContiguousView(of + c * qrows * d, DType::kF32, {B, H, cq, d});
          args.lse = ContiguousView(lsef + c * qrows, DType::kF32, {B, H, cq});
          args.k = RowView(bk, DType::kF32, B, G, tk_local, kc.local, ck, d);
          args.v = RowView(bv, DType::kF32, B, G, tk_local, kc.local, ck, d);
          SetBlockMask(sp, plan, lens, &args);
          GradArgs g;
          g.d_o = ContiguousView(dof + c * qrows * d, DType::kF32, {B, H, cq, d});
          g.dq = ContiguousView(dq_part, DType::kF32, {B, H, cq, d});
          g.dk = ContiguousView(dk_part, DType::kF32, {B, G, ck, d});
          g.dv = ContiguousView(dv_part, DType::kF32, {B, G, ck, d});
          const absl::Status st = ctx.backend->Backward(sp, args, g);
          if (!st.ok()) {
            return absl::Status(
                st.code(), absl::StrFormat("ring backward step %d, queries [%d, +%d) x keys [%d, "
                                           "+%d) on backend %s: %s",
                                           s, q_chunks[c].begin, cq, kc.begin, ck,
                                           ctx.backend->Name(), st.message()));
          }
          AddInto(dq_acc + c * qrows * d, dq_part, qrows * d);
          AddRows(step_dkv, dk_part, B * G, tk_local, kc.local, ck, d);
          AddRows(step_dkv + kv_elems, dv_part, B * G, tk_local, kc.local, ck, d);
          ++ctx.stats->blocks_computed;
        }
      }
      return absl::OkStatus();
    };
    // Behind this step's compute: the next K/V block, this block's dK/dV so
    // far, and last step's accumulator on its way out.
    std::vector<Communicator::Request> transfers;
    for (auto* group : {&kv_transfers, &dkv_recv, &dkv_sends}) {
      for (auto& req : *group) transfers.push_back(std::move(req));
    }
    dkv_sends.clear();
    ATTNKIT_RETURN_IF_ERROR(ComputeWhileTransferring(
        comm, transfers, posted,
        absl::StrFormat("K/V block and dK/dV accumulators around ring step %d", s), compute,
        ctx.stats));

    // acc = (what earlier ranks summed) + this step, then on to the next
    // holder, or home after the last step.
    if (s == 0) {
      std::memcpy(my_acc, step_dkv, static_cast<size_t>(dkv_bytes));
    } else {
      AddInto(my_acc, step_dkv, 2 * kv_elems);
    }
    const bool last = s + 1 == ctx.steps;
    if (!last) {
      ATTNKIT_RETURN_IF_ERROR(Post(comm.Isend(my_acc, dkv_bytes, next, kTagDkv), &dkv_sends));
    } else if (src != r) {
      ATTNKIT_RETURN_IF_ERROR(Post(comm.Isend(my_acc, dkv_bytes, src, kTagDkvHome), &dkv_sends));
    }
    if (next_kv != nullptr) {
      cur_k = next_kv;
      cur_v = next_kv + kv_bytes;
    }
  }

  // This rank's own block comes home from the rank that held it last.
  const float* mine = acc[(ctx.steps - 1) % 2];
  std::vector<Communicator::Request> home;
  if (ctx.steps > 1) {
    const int last_holder = (r + ctx.steps - 1) % n;
    ATTNKIT_RETURN_IF_ERROR(Post(comm.Irecv(step_dkv, dkv_bytes, last_holder, kTagDkvHome), &home));
    mine = step_dkv;
  }
  const double wait_from = NowSeconds();
  ATTNKIT_RETURN_IF_ERROR(comm.WaitAll(home, "this rank's dK/dV coming home"));
  ATTNKIT_RETURN_IF_ERROR(comm.WaitAll(dkv_sends, "sending a dK/dV accumulator home"));
  ctx.stats->wait_s += NowSeconds() - wait_from;  // nothing left to hide it behind
  ctx.stats->transfer_s += NowSeconds() - wait_from;

  RowsFromF32(mine, 0, tk_local, grads.dk);
  RowsFromF32(mine + kv_elems, 0, tk_local, grads.dv);
  for (int64_t c = 0; c < nq; ++c) {
    RowsFromF32(dq_acc + c * qrows * d, q_chunks[c].local, cq, grads.dq);
  }
  return absl::OkStatus();
}

}  // namespace dist
}  // namespace attnkit
