#include "distributed/shard_data.h"

#include <limits>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace attnkit {
namespace dist {
namespace {

// SplitMix64's finaliser (Steele et al. 2014): a bijection of 64-bit words
// whose outputs pass BigCrush for consecutive inputs.
uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15u;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

// The hash of a row (b, head, t) of `tensor`; each column mixes in c.
uint64_t RowKey(uint64_t seed, InputTensor tensor, int64_t b, int64_t head, int64_t t) {
  uint64_t x = Mix(seed);
  x = Mix(x ^ static_cast<uint64_t>(tensor));
  x = Mix(x ^ static_cast<uint64_t>(b));
  x = Mix(x ^ static_cast<uint64_t>(head));
  return Mix(x ^ static_cast<uint64_t>(t));
}

// The top 24 bits as k * 2^-23 - 1 in [-1, 1): exact in f32.
float Uniform(uint64_t h) { return static_cast<float>(h >> 40) * 0x1p-23f - 1.0f; }

// Row `local_t` of `t` gets global row `global_t`, rounded to t's dtype.
void FillRow(const TensorView& t, InputTensor tensor, uint64_t seed, int64_t b, int64_t head,
             int64_t local_t, int64_t global_t) {
  const uint64_t key = RowKey(seed, tensor, b, head, global_t);
  const int64_t base = t.Offset(b, head, local_t);
  for (int64_t c = 0; c < t.dim(3); ++c) {
    StoreFromF32(t.data, t.dtype, base + c * t.strides[3],
                 Uniform(Mix(key ^ static_cast<uint64_t>(c))));
  }
}

absl::Status CheckFillable(const TensorView& t, int64_t rows) {
  if (t.rank != 4 || !IsFloatStorage(t.dtype) || t.dim(2) != rows) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shard data: %s must be a [B, heads, %d, d] tensor of float storage",
                        t.DebugString(), rows));
  }
  return absl::OkStatus();
}

// The problems shard data can fill: dense float K/V, no ragged batch, no
// dense inputs beyond Q, K, V (distributed attention has none of them).
absl::Status CheckProblem(const AttentionProblem& p) {
  ATTNKIT_RETURN_IF_ERROR(ValidateProblem(p));
  if (p.is_paged() || p.is_ragged()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shard data: %s must be dense (page_size %d, %d q_lengths)", p.Id(),
                        p.page_size, p.q_lengths.size()));
  }
  if (!IsFloatStorage(p.kv_dtype)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "shard data: kv_dtype (%s) must be a float storage type", DTypeName(p.kv_dtype)));
  }
  if (p.blocked_mask || p.additive_bias || p.nonfinite_inputs > 0 || p.poison_blocked) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "shard data: %s has blocked_mask, additive_bias, nonfinite_inputs or poison_blocked, "
        "which distributed attention does not take",
        p.Id()));
  }
  return absl::OkStatus();
}

absl::Status CheckLayout(const ShardLayout& layout, int64_t length, int rank,
                         absl::string_view field) {
  if (layout.length != length || layout.num_ranks < 1 || rank < 0 || rank >= layout.num_ranks) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "shard data: the %s layout (length %d, %d ranks) must have length %s (%d) and hold rank "
        "%d",
        field, layout.length, layout.num_ranks, field, length, rank));
  }
  return absl::OkStatus();
}

}  // namespace

float InputValue(uint64_t seed, InputTensor tensor, int64_t b, int64_t head, int64_t t, int64_t c) {
  return Uniform(Mix(RowKey(seed, tensor, b, head, t) ^ static_cast<uint64_t>(c)));
}

absl::Status FillShardRows(const TensorView& t, InputTensor tensor, uint64_t seed,
                           const ShardLayout& layout, int rank) {
  ATTNKIT_RETURN_IF_ERROR(CheckFillable(t, layout.LocalRows()));
  if (rank < 0 || rank >= layout.num_ranks) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shard data: rank %d is not in [0, %d)", rank, layout.num_ranks));
  }
  for (const RowRange& r : layout.Ranges(rank)) {
    for (int64_t b = 0; b < t.dim(0); ++b) {
      for (int64_t h = 0; h < t.dim(1); ++h) {
        for (int64_t i = 0; i < r.rows; ++i)
          FillRow(t, tensor, seed, b, h, r.local + i, r.begin + i);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status FillFullRows(const TensorView& t, InputTensor tensor, uint64_t seed) {
  ATTNKIT_RETURN_IF_ERROR(CheckFillable(t, t.dim(2)));
  for (int64_t b = 0; b < t.dim(0); ++b) {
    for (int64_t h = 0; h < t.dim(1); ++h) {
      for (int64_t i = 0; i < t.dim(2); ++i) FillRow(t, tensor, seed, b, h, i, i);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ShardData> ShardData::Random(const AttentionProblem& p, const ShardLayout& q_layout,
                                            const ShardLayout& kv_layout, int rank, uint64_t seed,
                                            bool with_grads) {
  ATTNKIT_RETURN_IF_ERROR(CheckProblem(p));
  if (p.layout != Layout::kBHTD) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "shard data: layout (%s) must be BHTD, the order shards are in", LayoutName(p.layout)));
  }
  if (with_grads && !p.return_lse) {
    return absl::InvalidArgumentError(
        "shard data: gradients need return_lse (the backward pass reads the forward's lse)");
  }
  ATTNKIT_RETURN_IF_ERROR(CheckLayout(q_layout, p.q_len, rank, "q_len"));
  ATTNKIT_RETURN_IF_ERROR(CheckLayout(kv_layout, p.kv_len, rank, "kv_len"));
  const int64_t B = p.batch, H = p.num_heads, G = p.num_kv_heads, d = p.head_dim;
  const int64_t tq = q_layout.LocalRows(), tk = kv_layout.LocalRows();
  ShardData s;
  ATTNKIT_ASSIGN_OR_RETURN(s.q, Tensor::Contiguous(p.dtype, {B, H, tq, d}));
  ATTNKIT_ASSIGN_OR_RETURN(s.o, Tensor::Contiguous(p.dtype, {B, H, tq, d}));
  ATTNKIT_ASSIGN_OR_RETURN(s.k, Tensor::Contiguous(p.kv_dtype, {B, G, tk, d}));
  ATTNKIT_ASSIGN_OR_RETURN(s.v, Tensor::Contiguous(p.kv_dtype, {B, G, tk, d}));
  if (p.return_lse) {
    ATTNKIT_ASSIGN_OR_RETURN(s.lse, Tensor::Contiguous(DType::kF32, {B, H, tq}));
  }
  ATTNKIT_RETURN_IF_ERROR(FillShardRows(s.q.view(), InputTensor::kQ, seed, q_layout, rank));
  ATTNKIT_RETURN_IF_ERROR(FillShardRows(s.k.view(), InputTensor::kK, seed, kv_layout, rank));
  ATTNKIT_RETURN_IF_ERROR(FillShardRows(s.v.view(), InputTensor::kV, seed, kv_layout, rank));
  if (with_grads) {
    ATTNKIT_ASSIGN_OR_RETURN(s.d_o, Tensor::Contiguous(p.dtype, {B, H, tq, d}));
    ATTNKIT_ASSIGN_OR_RETURN(s.dq, Tensor::Contiguous(p.dtype, {B, H, tq, d}));
    ATTNKIT_ASSIGN_OR_RETURN(s.dk, Tensor::Contiguous(p.kv_dtype, {B, G, tk, d}));
    ATTNKIT_ASSIGN_OR_RETURN(s.dv, Tensor::Contiguous(p.kv_dtype, {B, G, tk, d}));
    ATTNKIT_RETURN_IF_ERROR(FillShardRows(s.d_o.view(), InputTensor::kDO, seed, q_layout, rank));
  }
  return s;
}

ShardArgs ShardData::args() const {
  return ShardArgs{q.view(), k.view(), v.view(), o.view(), lse.view()};
}

ShardGrads ShardData::grads() const {
  return ShardGrads{d_o.view(), dq.view(), dk.view(), dv.view()};
}

absl::StatusOr<FullData> FullProblemData(const AttentionProblem& p, uint64_t seed, bool with_d_o) {
  ATTNKIT_RETURN_IF_ERROR(CheckProblem(p));
  // The oracle holds the whole problem whatever one rank may hold.
  AttentionProblem unbounded = p;
  unbounded.memory_budget_bytes = std::numeric_limits<int64_t>::max();
  FullData full;
  ATTNKIT_ASSIGN_OR_RETURN(full.data, ProblemData::Allocate(unbounded));
  ATTNKIT_RETURN_IF_ERROR(FillFullRows(full.data.q.view(), InputTensor::kQ, seed));
  ATTNKIT_RETURN_IF_ERROR(FillFullRows(full.data.k.view(), InputTensor::kK, seed));
  ATTNKIT_RETURN_IF_ERROR(FillFullRows(full.data.v.view(), InputTensor::kV, seed));
  if (with_d_o) {
    ATTNKIT_ASSIGN_OR_RETURN(
        full.d_o, Tensor::Attention(p.dtype, p.layout, p.batch, p.num_heads, p.q_len, p.head_dim));
    ATTNKIT_RETURN_IF_ERROR(FillFullRows(full.d_o.view(), InputTensor::kDO, seed));
  }
  return full;
}

}  // namespace dist
}  // namespace attnkit
