#include "backends/cuda/bwd_plan.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/cuda/params.h"

namespace attnkit {
namespace cuda {
namespace {

Strides4 StridesOf(const TensorView& t) {
  if (t.empty()) return Strides4{};
  return Strides4{t.strides[0], t.strides[1], t.strides[2], t.strides[3]};
}

constexpr size_t kAlign = 256;  // workspace sub-buffers, bytes
size_t AlignBytes(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

absl::StatusOr<BwdParams> MakeBwdParams(const AttentionProblem& p, const AttentionArgs& a,
                                        const GradArgs& g) {
  if (p.is_paged() || p.is_ragged() || IsScaledKv(p.kv_dtype)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the CUDA backward pass takes dense float K/V and a dense batch; got %s%s%s",
        p.is_paged() ? "paged K/V " : "", p.is_ragged() ? "a ragged batch " : "",
        IsScaledKv(p.kv_dtype) ? absl::StrCat(DTypeName(p.kv_dtype), " K/V") : ""));
  }
  if (!p.return_lse || a.lse.empty()) {
    return absl::InvalidArgumentError(
        "return_lse must be true for the backward pass: it reads the forward's lse");
  }
  auto fwd = MakeFlashParams(p, a);
  if (!fwd.ok()) return fwd.status();
  BwdParams b;
  b.fwd = *fwd;
  b.d_o = g.d_o.data;
  b.dq = g.dq.data;
  b.dk = g.dk.data;
  b.dv = g.dv.data;
  b.dbias = g.dbias.empty() ? nullptr : static_cast<float*>(g.dbias.data);
  if (p.sinks && !g.dsinks.empty()) {  // f32 [H]
    b.dsinks = static_cast<float*>(g.dsinks.data);
    b.dsinks_stride = g.dsinks.strides[0];
  }
  b.do_stride = StridesOf(g.d_o);
  b.dq_stride = StridesOf(g.dq);
  b.dk_stride = StridesOf(g.dk);
  b.dv_stride = StridesOf(g.dv);
  b.dbias_stride = StridesOf(g.dbias);
  return b;
}

absl::StatusOr<BwdPlan> PlanBackward(const BwdParams& params, size_t budget_bytes) {
  const FlashParams& f = params.fwd;
  BwdPlan plan;
  plan.bucket = BwdHeadDimBucket(f.head_dim);
  if (plan.bucket == 0) {
    return absl::UnimplementedError(absl::StrFormat(
        "head_dim %d has no CUDA backward kernel; supported: 1..%d", f.head_dim, kBwdMaxHeadDim));
  }
  if (f.value_dim != f.head_dim) {  // Capabilities::backward.value_head_dim is false
    return absl::UnimplementedError(absl::StrFormat(
        "value_head_dim %d != head_dim %d has no CUDA backward kernel (dV and dO need V's own "
        "head dim)",
        f.value_dim, f.head_dim));
  }
  plan.block_m = kBwdBlockM;
  plan.block_n = BwdBlockN(plan.bucket);
  plan.smem_bytes = BwdSmemBytes(plan.bucket);
  plan.key_blocks = (int64_t{f.kv_len} + plan.block_n - 1) / plan.block_n;
  plan.row_tiles = (f.rows_per_kv_head + plan.block_m - 1) / plan.block_m;

  // One [B, H, Tq, d] f32 slice, with an overflow check (the product of
  // four int32 values and 4 fits in 128 bits; here it must fit size_t/2).
  constexpr double kMaxBytes = static_cast<double>(std::numeric_limits<int64_t>::max() / 4);
  const double slice = 4.0 * f.batch * f.num_heads * f.q_len * f.head_dim;
  if (slice * static_cast<double>(plan.key_blocks + 2) > kMaxBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the dQ partials of B=%d H=%d Tq=%d d=%d overflow the workspace's size arithmetic", f.batch,
        f.num_heads, f.q_len, f.head_dim));
  }
  plan.slice_bytes = static_cast<size_t>(4) * f.batch * f.num_heads * f.q_len * f.head_dim;
  const size_t slice_aligned = AlignBytes(plan.slice_bytes);
  const int64_t fit = static_cast<int64_t>(budget_bytes / slice_aligned);
  if (fit >= plan.key_blocks) {
    plan.blocks_per_chunk = plan.key_blocks;
    plan.num_chunks = 1;
  } else {
    // Chunks of `fit - 1` blocks beside the accumulator (at least one block
    // when not even that fits), then spread evenly: no chunk much shorter.
    const int64_t per = std::max<int64_t>(1, fit - 1);
    plan.num_chunks = (plan.key_blocks + per - 1) / per;
    plan.blocks_per_chunk = (plan.key_blocks + plan.num_chunks - 1) / plan.num_chunks;
  }

  const size_t dsum_bytes = static_cast<size_t>(4) * f.batch * f.num_heads * f.q_len;
  plan.dsum_offset = 0;
  plan.partial_offset = AlignBytes(dsum_bytes);
  plan.acc_offset =
      plan.partial_offset + static_cast<size_t>(plan.blocks_per_chunk) * slice_aligned;
  plan.workspace_bytes = plan.acc_offset + (plan.num_chunks > 1 ? slice_aligned : 0);
  return plan;
}

void ApplyBwdPlan(const BwdPlan& plan, void* workspace, BwdParams* params) {
  char* base = static_cast<char*>(workspace);
  params->block_m = plan.block_m;
  params->block_n = plan.block_n;
  params->key_blocks = plan.key_blocks;
  params->dsum = reinterpret_cast<float*>(base + plan.dsum_offset);
  params->dq_partial = reinterpret_cast<float*>(base + plan.partial_offset);
  params->partial_slice = static_cast<int64_t>(AlignBytes(plan.slice_bytes) / 4);
  params->dq_acc = plan.num_chunks > 1 ? reinterpret_cast<float*>(base + plan.acc_offset) : nullptr;
  params->chunk_begin = 0;
  params->chunk_end = plan.blocks_per_chunk;
}

ChunkSpan ChunkOf(const BwdPlan& plan, int64_t chunk) {
  const int64_t begin = std::min(plan.key_blocks, chunk * plan.blocks_per_chunk);
  return ChunkSpan{begin, std::min(plan.key_blocks, begin + plan.blocks_per_chunk)};
}

std::string BwdKernelName(const BwdPlan& plan) {
  return absl::StrFormat("flash-bwd-f32 d%d m%dn%d kblocks=%d chunks=%d", plan.bucket, plan.block_m,
                         plan.block_n, plan.key_blocks, plan.num_chunks);
}

}  // namespace cuda
}  // namespace attnkit
