#include "distributed/ring_attention.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "distributed/block_plan.h"
#include "distributed/cost_model.h"
#include "distributed/ring_internal.h"

namespace attnkit {
namespace dist {
namespace {

bool Zigzag(const AttentionProblem& p, Strategy s) {
  return s == Strategy::kRing && p.mask == MaskKind::kCausal && p.q_len == p.kv_len;
}

absl::Status Refuse(absl::string_view what) {
  return absl::UnimplementedError(absl::StrCat("distributed attention: ", what));
}

// The distinct block problems rank `rank` runs (forward, or backward with
// f32 K/V): checked against the backend before anything is allocated.
std::vector<AttentionProblem> BlockProblems(const AttentionProblem& p, const ShardLayout& ql,
                                            const ShardLayout& kl, int rank, int steps,
                                            bool backward) {
  std::vector<AttentionProblem> out;
  std::set<std::tuple<int, bool, bool>> seen;  // (mask kind, kv_lengths, dense)
  const int n = ql.num_ranks;
  for (int s = 0; s < steps; ++s) {
    const int src = (rank - s % n + n) % n;
    for (const RowRange& qc : ql.Ranges(rank)) {
      for (const RowRange& kc : kl.Ranges(src)) {
        // The block problem needs the plan's kind and lengths, not its mask.
        const BlockPlan plan =
            PlanBlock(p, qc.begin, qc.rows, kc.begin, kc.rows, /*build_dense=*/false);
        if (plan.mask == BlockMask::kHidden) continue;
        AttentionProblem sp = BlockProblem(p, plan, qc.rows, kc.rows);
        if (backward) sp.kv_dtype = DType::kF32;
        if (seen.insert({static_cast<int>(sp.mask), sp.has_kv_lengths(), sp.blocked_mask}).second) {
          out.push_back(std::move(sp));
        }
      }
    }
  }
  return out;
}

absl::Status CheckShardView(const TensorView& t, absl::string_view name, DType dtype,
                            std::initializer_list<int64_t> shape) {
  const std::vector<int64_t> want(shape);
  bool ok =
      !t.empty() && t.dtype == dtype && t.rank == static_cast<int>(want.size()) && t.IsContiguous();
  for (size_t i = 0; ok && i < want.size(); ++i) ok = t.shape[i] == want[i];
  if (!ok) {
    std::string dims;
    for (int64_t x : want) absl::StrAppend(&dims, dims.empty() ? "" : ",", x);
    return absl::InvalidArgumentError(absl::StrFormat(
        "shard tensor %s (%s) must be a contiguous %s[%s]", name,
        t.empty() ? std::string("missing") : t.DebugString(), DTypeName(dtype), dims));
  }
  return absl::OkStatus();
}

absl::Status CheckShard(const AttentionProblem& p, int n, const ShardArgs& a, const ShardGrads* g) {
  const int64_t B = p.batch, H = p.num_heads, G = p.num_kv_heads, d = p.head_dim;
  const int64_t tq = p.q_len / n, tk = p.kv_len / n;
  ATTNKIT_RETURN_IF_ERROR(CheckShardView(a.q, "q", p.dtype, {B, H, tq, d}));
  ATTNKIT_RETURN_IF_ERROR(CheckShardView(a.k, "k", p.kv_dtype, {B, G, tk, d}));
  ATTNKIT_RETURN_IF_ERROR(CheckShardView(a.v, "v", p.kv_dtype, {B, G, tk, d}));
  ATTNKIT_RETURN_IF_ERROR(CheckShardView(a.o, "o", p.dtype, {B, H, tq, d}));
  if (p.return_lse) ATTNKIT_RETURN_IF_ERROR(CheckShardView(a.lse, "lse", DType::kF32, {B, H, tq}));
  if (g != nullptr) {
    ATTNKIT_RETURN_IF_ERROR(CheckShardView(g->d_o, "d_o", p.dtype, {B, H, tq, d}));
    ATTNKIT_RETURN_IF_ERROR(CheckShardView(g->dq, "dq", p.dtype, {B, H, tq, d}));
    ATTNKIT_RETURN_IF_ERROR(CheckShardView(g->dk, "dk", p.kv_dtype, {B, G, tk, d}));
    ATTNKIT_RETURN_IF_ERROR(CheckShardView(g->dv, "dv", p.kv_dtype, {B, G, tk, d}));
  }
  return absl::OkStatus();
}

int64_t Bytes(int64_t elements, DType t) { return elements * static_cast<int64_t>(DTypeSize(t)); }

}  // namespace

absl::StatusOr<ShardLayout> QueryShard(const AttentionProblem& p, int ranks, Strategy s) {
  return MakeLayout(Zigzag(p, s) ? Sharding::kZigzag : Sharding::kContiguous, ranks, p.q_len,
                    "q_len");
}

absl::StatusOr<ShardLayout> KvShard(const AttentionProblem& p, int ranks, Strategy s) {
  return MakeLayout(Zigzag(p, s) ? Sharding::kZigzag : Sharding::kContiguous, ranks, p.kv_len,
                    "kv_len");
}

absl::Status DistSupports(const AttentionProblem& p, int ranks, Strategy s, Backend& backend,
                          bool backward) {
  ATTNKIT_RETURN_IF_ERROR(ValidateProblem(p));
  if (s == Strategy::kAuto) return absl::InvalidArgumentError("resolve strategy auto first");
  if (p.layout != Layout::kBHTD) return Refuse("layout must be BHTD (sequence-sharded shards)");
  if (p.is_paged()) return Refuse("paged K/V (page_size) is not sharded");
  if (p.is_ragged()) return Refuse("ragged batches (q_lengths) are not sharded");
  if (IsScaledKv(p.kv_dtype)) return Refuse("int8 and fp8 K/V are not sharded");
  if (p.blocked_mask) return Refuse("a dense blocked_mask is not sharded");
  if (p.additive_bias) return Refuse("an additive bias is not sharded");
  if (p.sinks) return Refuse("attention sinks are not sharded");
  if (p.alibi) return Refuse("ALiBi is not sharded");
  if (p.has_value_dim()) {
    return Refuse(
        "value_head_dim != head_dim (Ev != E) is not sharded: the ring carries one "
        "head dim for K and V");
  }
  if (backward && !p.return_lse) {
    return absl::InvalidArgumentError("the distributed backward pass needs return_lse");
  }
  ATTNKIT_ASSIGN_OR_RETURN(ShardLayout ql, QueryShard(p, ranks, s));
  ATTNKIT_ASSIGN_OR_RETURN(ShardLayout kl, KvShard(p, ranks, s));
  if (s == Strategy::kUlysses) {
    ATTNKIT_RETURN_IF_ERROR(UlyssesSupports(p, ranks));
    AttentionProblem lp = HeadSliceProblem(p, ranks);
    if (!backward) return backend.Supports(lp);
    lp.dtype = lp.kv_dtype = DType::kF32;  // the backward runs the head slice in f32
    return backend.SupportsBackward(lp);
  }
  const int steps = RingSteps(p, ql, kl);
  for (int rank = 0; rank < ranks; ++rank) {
    for (const AttentionProblem& sp : BlockProblems(p, ql, kl, rank, steps, backward)) {
      absl::Status st = backward ? backend.SupportsBackward(sp) : backend.Supports(sp);
      if (!st.ok()) {
        return absl::Status(st.code(),
                            absl::StrFormat("backend %s cannot run the ring's block problem %s: %s",
                                            backend.Name(), sp.Id(), st.message()));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> BytesPerRank(const AttentionProblem& p, int ranks, Strategy s,
                                     bool backward) {
  ATTNKIT_ASSIGN_OR_RETURN(ShardLayout ql, QueryShard(p, ranks, s));
  ATTNKIT_ASSIGN_OR_RETURN(ShardLayout kl, KvShard(p, ranks, s));
  const int64_t B = p.batch, H = p.num_heads, G = p.num_kv_heads, d = p.head_dim;
  const int64_t tq = ql.LocalRows(), tk = kl.LocalRows(), cq = ql.chunk(), ck = kl.chunk();
  const int64_t q_elems = B * H * tq * d, kv_elems = B * G * tk * d;
  // The caller's shards: q, o (and lse), k, v.
  int64_t bytes = 2 * Bytes(q_elems, p.dtype) + 2 * Bytes(kv_elems, p.kv_dtype) +
                  (p.return_lse ? Bytes(B * H * tq, DType::kF32) : 0);
  if (backward) bytes += 2 * Bytes(q_elems, p.dtype) + 2 * Bytes(kv_elems, p.kv_dtype);
  if (s == Strategy::kUlysses) {
    const int64_t hq = H / ranks, hk = G % ranks == 0 ? G / ranks : 1;
    // Whole-sequence head slices, plus send and receive staging of the
    // largest tensor moved at once.
    const int64_t lq = B * hq * p.q_len * d, lk = B * hk * p.kv_len * d;
    bytes +=
        2 * Bytes(lq, p.dtype) + 2 * Bytes(lk, p.kv_dtype) + Bytes(B * hq * p.q_len, DType::kF32);
    bytes += 2 * std::max(Bytes(lq, p.dtype), Bytes(lk, p.kv_dtype));
    if (backward) {
      // dO's slice; f32 copies of Q, K, V, O, dO; f32 dQ, dK, dV slices; f32
      // staging of the gradients' return and the summed sequence shards.
      bytes += Bytes(lq, p.dtype) + 3 * Bytes(lq, DType::kF32) + 2 * Bytes(lk, DType::kF32) +
               Bytes(lq, DType::kF32) + 2 * Bytes(lk, DType::kF32) +
               2 * std::max(Bytes(lq, DType::kF32), Bytes(lk, DType::kF32)) +
               Bytes(q_elems + kv_elems, DType::kF32);
    }
    return bytes;
  }
  // Ring: f32 queries and accumulators, one block's output, two K/V stages,
  // and each block's dense mask.
  bytes += 2 * Bytes(q_elems, DType::kF32) + Bytes(B * H * tq, DType::kF32);
  bytes += Bytes(B * H * cq * (d + 1), DType::kF32) + 2 * 2 * Bytes(kv_elems, p.kv_dtype);
  bytes += B * cq * ck;
  if (backward) {
    // O, dO, lse in f32, dQ parts, dK/dV parts, the block's dK/dV, two
    // travelling accumulators, and widened K/V.
    bytes += 3 * Bytes(q_elems, DType::kF32) + Bytes(B * H * cq * d, DType::kF32) +
             2 * Bytes(B * G * ck * d, DType::kF32) + 2 * Bytes(kv_elems, DType::kF32) +
             2 * 2 * Bytes(kv_elems, DType::kF32) +
             (p.kv_dtype != DType::kF32 ? 2 * Bytes(kv_elems, DType::kF32) : 0);
  }
  return bytes;
}

Strategy DistributedAttention::Resolve(const AttentionProblem& p, Strategy s) const {
  if (s != Strategy::kAuto) return s;
  // Without a measured rate, a CPU-like 100 GFLOP/s keeps the choice defined.
  const double flops = flops_per_s_ > 0 ? flops_per_s_ : 100e9;
  return ChooseStrategy(p, comm_->size(), link_, flops, UlyssesSupports(p, comm_->size()));
}

namespace {

absl::Status BudgetAndSupport(Backend& backend, const AttentionProblem& p, int n, Strategy s,
                              bool backward) {
  ATTNKIT_RETURN_IF_ERROR(DistSupports(p, n, s, backend, backward));
  ATTNKIT_ASSIGN_OR_RETURN(const int64_t bytes, BytesPerRank(p, n, s, backward));
  if (bytes > p.memory_budget_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s under %s needs %d bytes per rank on %d ranks, more than memory_budget_bytes (%d); "
        "run it on more ranks or raise memory_budget_bytes in the config",
        p.Id(), StrategyName(s), bytes, n, p.memory_budget_bytes));
  }
  return absl::OkStatus();
}

// Resolve(p, s) as rank 0 resolved it, on every rank.
absl::StatusOr<Strategy> AgreedStrategy(Communicator& comm, const DistributedAttention& dist,
                                        const AttentionProblem& p, Strategy s) {
  int32_t code = static_cast<int32_t>(dist.Resolve(p, s));
  if (s == Strategy::kAuto) {
    ATTNKIT_RETURN_IF_ERROR(
        comm.Broadcast(&code, sizeof(code), 0, "the strategy rank 0 chose for auto"));
  }
  return static_cast<Strategy>(code);
}

void FinishStats(const Communicator& comm, int64_t sent_before, double start, DistStats* stats) {
  stats->bytes_sent = comm.stats().bytes_sent - sent_before;
  stats->total_s = NowSeconds() - start;
  stats->overlap = stats->transfer_s > 0
                       ? std::min(1.0, std::max(0.0, 1.0 - stats->wait_s / stats->transfer_s))
                       : 0.0;
}

}  // namespace

Workspace* DistributedAttention::Ws() {
  if (workspace_ == nullptr) workspace_ = std::make_shared<Workspace>();
  return workspace_.get();
}

absl::Status DistributedAttention::Admit(const AttentionProblem& p, Strategy s, bool backward) {
  return comm_->Agree(BudgetAndSupport(*backend_, p, comm_->size(), s, backward));
}

absl::Status DistributedAttention::Forward(const AttentionProblem& p, Strategy s,
                                           const ShardArgs& shard) {
  const double start = NowSeconds();
  ATTNKIT_ASSIGN_OR_RETURN(s, AgreedStrategy(*comm_, *this, p, s));
  stats_ = DistStats();
  stats_.strategy = s;
  ATTNKIT_RETURN_IF_ERROR(Admit(p, s, false));
  ATTNKIT_RETURN_IF_ERROR(comm_->Agree(CheckShard(p, comm_->size(), shard, nullptr)));
  const int64_t sent_before = comm_->stats().bytes_sent;
  absl::Status st;
  if (s == Strategy::kUlysses) {
    st = UlyssesForward(comm_, backend_, p, shard, &stats_, Ws());
  } else {
    ATTNKIT_ASSIGN_OR_RETURN(ShardLayout ql, QueryShard(p, comm_->size(), s));
    ATTNKIT_ASSIGN_OR_RETURN(ShardLayout kl, KvShard(p, comm_->size(), s));
    RingContext ctx{comm_, backend_, &p, ql, kl, RingSteps(p, ql, kl), &stats_, Ws()};
    stats_.steps = ctx.steps;
    st = RingForward(ctx, shard);
  }
  FinishStats(*comm_, sent_before, start, &stats_);
  return st;
}

absl::Status DistributedAttention::Backward(const AttentionProblem& p, Strategy s,
                                            const ShardArgs& shard, const ShardGrads& grads) {
  const double start = NowSeconds();
  ATTNKIT_ASSIGN_OR_RETURN(s, AgreedStrategy(*comm_, *this, p, s));
  stats_ = DistStats();
  stats_.strategy = s;
  ATTNKIT_RETURN_IF_ERROR(Admit(p, s, true));
  ATTNKIT_RETURN_IF_ERROR(comm_->Agree(CheckShard(p, comm_->size(), shard, &grads)));
  const int64_t sent_before = comm_->stats().bytes_sent;
  absl::Status st;
  if (s == Strategy::kUlysses) {
    st = UlyssesBackward(comm_, backend_, p, shard, grads, &stats_, Ws());
  } else {
    ATTNKIT_ASSIGN_OR_RETURN(ShardLayout ql, QueryShard(p, comm_->size(), s));
    ATTNKIT_ASSIGN_OR_RETURN(ShardLayout kl, KvShard(p, comm_->size(), s));
    RingContext ctx{comm_, backend_, &p, ql, kl, RingSteps(p, ql, kl), &stats_, Ws()};
    stats_.steps = ctx.steps;
    st = RingBackward(ctx, shard, grads);
  }
  FinishStats(*comm_, sent_before, start, &stats_);
  return st;
}

}  // namespace dist
}  // namespace attnkit
