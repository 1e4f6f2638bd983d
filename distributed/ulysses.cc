// Ulysses (distributed/strategy.h): an all-to-all turns each rank's sequence shard
// of every head into the whole sequence of H/N heads, the backend runs that
// as one ordinary problem, and a second all-to-all returns O (and lse) to
// sequence shards. Shards are contiguous; no block merging, so the result is
// the backend's own on the head slice.
#include <cstring>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "distributed/ring_internal.h"

namespace attnkit {
namespace dist {
namespace {

// Copies src[b][head0 + h][row0 + t][:] (src contiguous [B, heads, rows_total,
// width]) to dst[b][h][t][:] (contiguous [B, nheads, rows, width]), in bytes.
void Pack(const char* src, int64_t elem, int64_t B, int64_t heads, int64_t rows_total,
          int64_t width, int64_t head0, int64_t nheads, int64_t row0, int64_t rows, char* dst) {
  const int64_t line = rows * width * elem;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < nheads; ++h) {
      const char* from = src + (((b * heads + head0 + h) * rows_total + row0) * width) * elem;
      std::memcpy(dst + (b * nheads + h) * line, from, static_cast<size_t>(line));
    }
  }
}

// The reverse of Pack: dst[b][head0 + h][row0 + t][:] = src[b][h][t][:].
void Unpack(const char* src, int64_t elem, int64_t B, int64_t heads, int64_t rows_total,
            int64_t width, int64_t head0, int64_t nheads, int64_t row0, int64_t rows, char* dst) {
  const int64_t line = rows * width * elem;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < nheads; ++h) {
      char* to = dst + (((b * heads + head0 + h) * rows_total + row0) * width) * elem;
      std::memcpy(to, src + (b * nheads + h) * line, static_cast<size_t>(line));
    }
  }
}

// Workspace slots (distributed/ring_internal.h); the ring's are below 30.
constexpr int kSendSlot = 30, kRecvSlot = 31, kTensorSlot = 32;

// The first query head and K/V head of rank j's slice (`slice` is
// HeadSliceProblem(p, n)).
int64_t QHead0(const AttentionProblem& slice, int j) { return j * slice.num_heads; }
int64_t KvHead0(const AttentionProblem& p, const AttentionProblem& slice, int n, int j) {
  if (p.num_kv_heads % n == 0) return j * slice.num_kv_heads;
  return j * slice.num_heads / p.group_size();  // N % G == 0: one shared K/V head
}

// One all-to-all of equal pieces: fill(i, dst) writes the `piece` bytes for
// rank i; the result holds rank j's piece at j * piece (workspace memory,
// valid until the next exchange).
absl::StatusOr<const char*> ExchangePieces(Communicator& comm, Workspace& ws, int64_t piece,
                                           const std::function<void(int, char*)>& fill,
                                           absl::string_view what) {
  const int n = comm.size();
  ATTNKIT_ASSIGN_OR_RETURN(void* send_data, ws.Bytes(kSendSlot, piece * n));
  ATTNKIT_ASSIGN_OR_RETURN(void* recv_data, ws.Bytes(kRecvSlot, piece * n));
  char* send = static_cast<char*>(send_data);
  char* recv = static_cast<char*>(recv_data);
  std::vector<int64_t> counts(n, piece), offsets(n);
  for (int i = 0; i < n; ++i) {
    offsets[i] = i * piece;
    fill(i, send + offsets[i]);
  }
  ATTNKIT_RETURN_IF_ERROR(comm.AllToAllV(send, counts, offsets, recv, counts, offsets, what));
  return recv;
}

// A sequence-sharded [B, heads, rows, width] tensor to [B, nheads, N * rows,
// width] on each rank j, its heads starting at head0(j).
absl::Status SeqToHeads(Communicator& comm, Workspace& ws, const void* shard, int64_t elem,
                        int64_t B, int64_t heads, int64_t rows, int64_t width, int64_t nheads,
                        const std::function<int64_t(int)>& head0, void* full,
                        absl::string_view what) {
  const int64_t piece = B * nheads * rows * width * elem;
  ATTNKIT_ASSIGN_OR_RETURN(const char* recv, ExchangePieces(
                                                 comm, ws, piece,
                                                 [&](int j, char* dst) {
                                                   Pack(static_cast<const char*>(shard), elem, B,
                                                        heads, rows, width, head0(j), nheads, 0,
                                                        rows, dst);
                                                 },
                                                 what));
  for (int i = 0; i < comm.size(); ++i) {
    Unpack(recv + i * piece, elem, B, nheads, comm.size() * rows, width, 0, nheads, i * rows, rows,
           static_cast<char*>(full));
  }
  return absl::OkStatus();
}

// The pieces of [B, nheads, N * rows, width] (this rank's heads over the
// whole sequence) that go back to each rank's sequence rows.
absl::StatusOr<const char*> HeadsBack(Communicator& comm, Workspace& ws, const void* full,
                                      int64_t elem, int64_t B, int64_t rows, int64_t width,
                                      int64_t nheads, absl::string_view what) {
  const int n = comm.size();
  return ExchangePieces(
      comm, ws, B * nheads * rows * width * elem,
      [&](int i, char* dst) {
        Pack(static_cast<const char*>(full), elem, B, nheads, n * rows, width, 0, nheads, i * rows,
             rows, dst);
      },
      what);
}

// The output back: rank j's heads [j * nheads, +nheads) of this rank's rows
// into the shard [B, heads, rows, width].
absl::Status HeadsToSeq(Communicator& comm, Workspace& ws, const void* full, int64_t elem,
                        int64_t B, int64_t heads, int64_t rows, int64_t width, int64_t nheads,
                        void* shard, absl::string_view what) {
  ATTNKIT_ASSIGN_OR_RETURN(const char* recv,
                           HeadsBack(comm, ws, full, elem, B, rows, width, nheads, what));
  const int64_t piece = B * nheads * rows * width * elem;
  for (int j = 0; j < comm.size(); ++j) {
    Unpack(recv + j * piece, elem, B, heads, rows, width, j * nheads, nheads, 0, rows,
           static_cast<char*>(shard));
  }
  return absl::OkStatus();
}

// Gradients back to sequence shards: `full` f32 [B, nheads, N * rows, d] on
// each rank (its heads' partial gradients over the whole sequence); rank j's
// heads start at head0(j). out f32 [B, heads, rows, d] (zeroed here) sums the
// pieces of each head in rank order, so K/V heads shared by several ranks
// (N % G == 0) add their partials deterministically.
absl::Status HeadsToSeqSum(Communicator& comm, Workspace& ws, const float* full, int64_t B,
                           int64_t heads, int64_t rows, int64_t d, int64_t nheads,
                           const std::function<int64_t(int)>& head0, float* out,
                           absl::string_view what) {
  ATTNKIT_ASSIGN_OR_RETURN(const char* recv,
                           HeadsBack(comm, ws, full, sizeof(float), B, rows, d, nheads, what));
  std::memset(out, 0, static_cast<size_t>(B * heads * rows * d) * sizeof(float));
  const int64_t line = rows * d;
  for (int j = 0; j < comm.size(); ++j) {
    const float* from = reinterpret_cast<const float*>(recv) + j * B * nheads * line;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < nheads; ++h) {
        float* to = out + (b * heads + head0(j) + h) * line;
        const float* src = from + (b * nheads + h) * line;
        for (int64_t x = 0; x < line; ++x) to[x] += src[x];
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

AttentionProblem HeadSliceProblem(const AttentionProblem& p, int ranks) {
  AttentionProblem lp = p;
  lp.name = p.name + "_heads";
  lp.num_heads = p.num_heads / ranks;
  lp.num_kv_heads = p.num_kv_heads % ranks == 0 ? p.num_kv_heads / ranks : 1;
  lp.model_dim = lp.num_heads * p.head_dim;
  return lp;
}

absl::Status UlyssesSupports(const AttentionProblem& p, int ranks) {
  const int64_t H = p.num_heads, G = p.num_kv_heads;
  if (H % ranks != 0 || (G % ranks != 0 && ranks % G != 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ulysses: num_heads (%d) must be a multiple of the rank count (%d), and num_kv_heads "
        "(%d) a multiple or a divisor of it",
        H, ranks, G));
  }
  return absl::OkStatus();
}

absl::Status UlyssesForward(Communicator* comm_ptr, Backend* backend, const AttentionProblem& p,
                            const ShardArgs& shard, DistStats* stats, Workspace* workspace) {
  Communicator& comm = *comm_ptr;
  const int n = comm.size();
  const int64_t B = p.batch, H = p.num_heads, G = p.num_kv_heads, d = p.head_dim;
  const int64_t tq = p.q_len / n, tk = p.kv_len / n;
  const AttentionProblem lp = HeadSliceProblem(p, n);
  const int64_t qe = static_cast<int64_t>(DTypeSize(p.dtype));
  const int64_t ke = static_cast<int64_t>(DTypeSize(p.kv_dtype));
  // This rank's heads over the whole sequence: Q, K, V, O and lse.
  const int64_t lq = B * lp.num_heads * p.q_len, lk = B * lp.num_kv_heads * p.kv_len;
  void* slots[6];
  const int64_t sizes[6] = {lq * d * qe, lk * d * ke, lk * d * ke, lq * d * qe, lq * 4, B * 4};
  for (int i = 0; i < 6; ++i) {
    ATTNKIT_ASSIGN_OR_RETURN(slots[i], workspace->Bytes(kTensorSlot + i, sizes[i]));
  }
  const TensorView q = ContiguousView(slots[0], p.dtype, {B, lp.num_heads, p.q_len, d});
  const TensorView k = ContiguousView(slots[1], p.kv_dtype, {B, lp.num_kv_heads, p.kv_len, d});
  const TensorView v = ContiguousView(slots[2], p.kv_dtype, {B, lp.num_kv_heads, p.kv_len, d});
  const TensorView o = ContiguousView(slots[3], p.dtype, {B, lp.num_heads, p.q_len, d});
  const TensorView lse = ContiguousView(slots[4], DType::kF32, {B, lp.num_heads, p.q_len});
  const TensorView kv_lengths = ContiguousView(slots[5], DType::kI32, {B});
  const double wait_before = comm.stats().wait_s;
  auto q_head0 = [&](int j) { return QHead0(lp, j); };
  auto kv_head0 = [&](int j) { return KvHead0(p, lp, n, j); };
  ATTNKIT_RETURN_IF_ERROR(SeqToHeads(comm, *workspace, shard.q.data, qe, B, H, tq, d, lp.num_heads,
                                     q_head0, q.data, "ulysses all-to-all of Q"));
  ATTNKIT_RETURN_IF_ERROR(SeqToHeads(comm, *workspace, shard.k.data, ke, B, G, tk, d,
                                     lp.num_kv_heads, kv_head0, k.data, "ulysses all-to-all of K"));
  ATTNKIT_RETURN_IF_ERROR(SeqToHeads(comm, *workspace, shard.v.data, ke, B, G, tk, d,
                                     lp.num_kv_heads, kv_head0, v.data, "ulysses all-to-all of V"));

  AttentionArgs args;
  args.q = q;
  args.k = k;
  args.v = v;
  args.o = o;
  if (p.return_lse) args.lse = lse;
  if (p.has_kv_lengths()) {
    for (int64_t b = 0; b < B; ++b) {
      static_cast<int32_t*>(kv_lengths.data)[b] = static_cast<int32_t>(p.kv_lengths[b]);
    }
    args.kv_lengths = kv_lengths;
  }
  const double t0 = NowSeconds();
  const absl::Status st = backend->Forward(lp, args);
  stats->compute_s += NowSeconds() - t0;
  if (!st.ok()) {
    return absl::Status(st.code(), absl::StrFormat("ulysses: heads [%d, +%d) on backend %s: %s",
                                                   q_head0(comm.rank()), lp.num_heads,
                                                   backend->Name(), st.message()));
  }
  stats->blocks_computed = 1;
  ATTNKIT_RETURN_IF_ERROR(HeadsToSeq(comm, *workspace, o.data, qe, B, H, tq, d, lp.num_heads,
                                     shard.o.data, "ulysses all-to-all of O"));
  if (p.return_lse) {
    ATTNKIT_RETURN_IF_ERROR(HeadsToSeq(comm, *workspace, lse.data, 4, B, H, tq, 1, lp.num_heads,
                                       shard.lse.data, "ulysses all-to-all of lse"));
  }
  // The all-to-alls overlap nothing: all of their time is exposed.
  stats->wait_s += comm.stats().wait_s - wait_before;
  stats->transfer_s += comm.stats().wait_s - wait_before;
  stats->steps = 1;
  return absl::OkStatus();
}

}  // namespace dist
}  // namespace attnkit

namespace attnkit {
namespace dist {

// The backward pass: Q, K, V, O, lse and dO to head shards, the backend's
// Backward on the head slice in f32 (so partial dK/dV of a shared K/V head
// sum without rounding), then dQ, dK, dV back to sequence shards.
absl::Status UlyssesBackward(Communicator* comm_ptr, Backend* backend, const AttentionProblem& p,
                             const ShardArgs& shard, const ShardGrads& grads, DistStats* stats,
                             Workspace* workspace) {
  Communicator& comm = *comm_ptr;
  const int n = comm.size();
  const int64_t B = p.batch, H = p.num_heads, G = p.num_kv_heads, d = p.head_dim;
  const int64_t tq = p.q_len / n, tk = p.kv_len / n;
  AttentionProblem lp = HeadSliceProblem(p, n);
  lp.dtype = lp.kv_dtype = DType::kF32;  // partial dK/dV of a shared head sum unrounded
  const int64_t hq = lp.num_heads, hk = lp.num_kv_heads;
  const int64_t qe = static_cast<int64_t>(DTypeSize(p.dtype));
  const int64_t ke = static_cast<int64_t>(DTypeSize(p.kv_dtype));
  auto q_head0 = [&](int j) { return QHead0(lp, j); };
  auto kv_head0 = [&](int j) { return KvHead0(p, lp, n, j); };
  const int64_t lq = B * hq * p.q_len * d, lk = B * hk * p.kv_len * d;

  // Slots from 40: the head slices as stored (q, k, v, o, dO), their f32
  // copies, lse, the f32 gradients and the summed sequence shards.
  const double wait_before = comm.stats().wait_s;
  struct Moved {
    const void* shard;
    int64_t elem, heads, rows, width, nheads;
    bool kv;
    DType dtype;
  };
  const Moved moved[6] = {
      {shard.q.data, qe, H, tq, d, hq, false, p.dtype},
      {shard.k.data, ke, G, tk, d, hk, true, p.kv_dtype},
      {shard.v.data, ke, G, tk, d, hk, true, p.kv_dtype},
      {shard.o.data, qe, H, tq, d, hq, false, p.dtype},
      {grads.d_o.data, qe, H, tq, d, hq, false, p.dtype},
      {shard.lse.data, 4, H, tq, 1, hq, false, DType::kF32},
  };
  const char* names[6] = {"Q", "K", "V", "O", "dO", "lse"};
  float* f32[6];
  for (int i = 0; i < 6; ++i) {
    const Moved& m = moved[i];
    const int64_t elements = B * m.nheads * n * m.rows * m.width;
    ATTNKIT_ASSIGN_OR_RETURN(void* raw, workspace->Bytes(40 + i, elements * m.elem));
    ATTNKIT_RETURN_IF_ERROR(SeqToHeads(
        comm, *workspace, m.shard, m.elem, B, m.heads, m.rows, m.width, m.nheads,
        m.kv ? std::function<int64_t(int)>(kv_head0) : std::function<int64_t(int)>(q_head0), raw,
        absl::StrCat("ulysses backward all-to-all of ", names[i])));
    if (m.dtype == DType::kF32) {
      f32[i] = static_cast<float*>(raw);
      continue;
    }
    ATTNKIT_ASSIGN_OR_RETURN(f32[i], workspace->Floats(50 + i, elements, false));
    const TensorView stored = ContiguousView(raw, m.dtype, {B, m.nheads, n * m.rows, m.width});
    RowsToF32(stored, 0, n * m.rows, f32[i]);
  }
  ATTNKIT_ASSIGN_OR_RETURN(float* dq, workspace->Floats(60, lq, false));
  ATTNKIT_ASSIGN_OR_RETURN(float* dk, workspace->Floats(61, lk, false));
  ATTNKIT_ASSIGN_OR_RETURN(float* dv, workspace->Floats(62, lk, false));
  ATTNKIT_ASSIGN_OR_RETURN(void* lens, workspace->Bytes(63, B * 4));

  AttentionArgs args;
  args.q = ContiguousView(f32[0], DType::kF32, {B, hq, p.q_len, d});
  args.k = ContiguousView(f32[1], DType::kF32, {B, hk, p.kv_len, d});
  args.v = ContiguousView(f32[2], DType::kF32, {B, hk, p.kv_len, d});
  args.o = ContiguousView(f32[3], DType::kF32, {B, hq, p.q_len, d});
  args.lse = ContiguousView(f32[5], DType::kF32, {B, hq, p.q_len});
  if (p.has_kv_lengths()) {
    for (int64_t b = 0; b < B; ++b) {
      static_cast<int32_t*>(lens)[b] = static_cast<int32_t>(p.kv_lengths[b]);
    }
    args.kv_lengths = ContiguousView(lens, DType::kI32, {B});
  }
  GradArgs g;
  g.d_o = ContiguousView(f32[4], DType::kF32, {B, hq, p.q_len, d});
  g.dq = ContiguousView(dq, DType::kF32, {B, hq, p.q_len, d});
  g.dk = ContiguousView(dk, DType::kF32, {B, hk, p.kv_len, d});
  g.dv = ContiguousView(dv, DType::kF32, {B, hk, p.kv_len, d});
  const double t0 = NowSeconds();
  const absl::Status st = backend->Backward(lp, args, g);
  stats->compute_s += NowSeconds() - t0;
  if (!st.ok()) {
    return absl::Status(st.code(),
                        absl::StrFormat("ulysses backward: heads [%d, +%d) on backend %s: %s",
                                        q_head0(comm.rank()), hq, backend->Name(), st.message()));
  }
  stats->blocks_computed = 1;

  ATTNKIT_ASSIGN_OR_RETURN(float* seq_dq, workspace->Floats(64, B * H * tq * d, false));
  ATTNKIT_ASSIGN_OR_RETURN(float* seq_dkv, workspace->Floats(65, B * G * tk * d, false));
  ATTNKIT_RETURN_IF_ERROR(HeadsToSeqSum(comm, *workspace, dq, B, H, tq, d, hq, q_head0, seq_dq,
                                        "ulysses backward all-to-all of dQ"));
  RowsFromF32(seq_dq, 0, tq, grads.dq);
  ATTNKIT_RETURN_IF_ERROR(HeadsToSeqSum(comm, *workspace, dk, B, G, tk, d, hk, kv_head0, seq_dkv,
                                        "ulysses backward all-to-all of dK"));
  RowsFromF32(seq_dkv, 0, tk, grads.dk);
  ATTNKIT_RETURN_IF_ERROR(HeadsToSeqSum(comm, *workspace, dv, B, G, tk, d, hk, kv_head0, seq_dkv,
                                        "ulysses backward all-to-all of dV"));
  RowsFromF32(seq_dkv, 0, tk, grads.dv);
  stats->wait_s += comm.stats().wait_s - wait_before;
  stats->transfer_s += comm.stats().wait_s - wait_before;
  stats->steps = 1;
  return absl::OkStatus();
}

}  // namespace dist
}  // namespace attnkit
