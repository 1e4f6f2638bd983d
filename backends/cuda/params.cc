#include "backends/cuda/params.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_format.h"
#include "core/ragged.h"

namespace attnkit {
namespace cuda {
namespace {

Strides4 StridesOf(const TensorView& t) {
  if (t.empty()) return Strides4{};
  return Strides4{t.strides[0], t.strides[1], t.strides[2], t.strides[3]};
}

// K or V: [B, G, Tk, d] keeps its order; a pool [num_pages, page_size, G, d]
// puts pages in b, heads in h and the rows of a page in t.
Strides4 KvStridesOf(const TensorView& t, bool paged) {
  if (!paged) return StridesOf(t);
  return Strides4{t.strides[0], t.strides[2], t.strides[1], t.strides[3]};
}

// An int8 or fp8 scale tensor, K's shape without d: [B, G, Tk] -> (b, h, t), or the
// pool's [num_pages, page_size, G] -> (page, head, row); c = 0.
Strides4 ScaleStridesOf(const TensorView& t, bool paged) {
  if (paged) return Strides4{t.strides[0], t.strides[2], t.strides[1], 0};
  return Strides4{t.strides[0], t.strides[1], t.strides[2], 0};
}

int Log2(int64_t power_of_two) {
  int shift = 0;
  while ((int64_t{1} << shift) < power_of_two) ++shift;
  return shift;
}

DType StorageOf(ComputeKind c) {
  switch (c) {
    case ComputeKind::kF16:
      return DType::kF16;
    case ComputeKind::kBF16:
      return DType::kBF16;
    default:
      return DType::kF32;
  }
}

}  // namespace

absl::StatusOr<ElemType> ElemTypeOf(DType t) {
  switch (t) {
    case DType::kF32:
      return ElemType::kF32;
    case DType::kF16:
      return ElemType::kF16;
    case DType::kBF16:
      return ElemType::kBF16;
    case DType::kI8:
      return ElemType::kI8;
    case DType::kF8E4M3:
      return ElemType::kF8E4M3;
    case DType::kF8E5M2:
      return ElemType::kF8E5M2;
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s is not a storage type of the CUDA kernels (f32, f16, bf16; i8, f8e4m3 and f8e5m2 "
          "for K/V)",
          DTypeName(t)));
  }
}

ComputeKind ComputeKindFor(DType q, DType kv, ComputeMode mode) {
  // FAST rounds Q to K's type, so the tiles take K/V's 16-bit type.
  if (mode == ComputeMode::kFast) q = kv;
  if (q == kv && q == DType::kF16) return ComputeKind::kF16;
  if (q == kv && q == DType::kBF16) return ComputeKind::kBF16;
  return ComputeKind::kF32;
}

ElemType ProbabilityType(const FlashParams& f) {
  if (!f.round_p) return ElemType::kF32;
  return f.compute == ComputeKind::kF16 ? ElemType::kF16 : ElemType::kBF16;
}

const char* ElemTypeName(ElemType t) {
  switch (t) {
    case ElemType::kF16:
      return "f16";
    case ElemType::kBF16:
      return "bf16";
    case ElemType::kI8:
      return "i8";
    case ElemType::kF8E4M3:
      return "f8e4m3";
    case ElemType::kF8E5M2:
      return "f8e5m2";
    default:
      return "f32";
  }
}

std::string ComputeTag(const FlashParams& f) {
  std::string tag;
  if (f.round_q && f.q_type != f.kv_type) {
    tag = absl::StrFormat("q->%s ", ElemTypeName(f.kv_type));
  }
  return tag + "p=" + ElemTypeName(ProbabilityType(f));
}

CublasTypes CublasTypesFor(const FlashParams& f) {
  CublasTypes t;
  t.qk = static_cast<ElemType>(f.compute);  // the same numbering for the float types
  t.pv = ProbabilityType(f);
  return t;
}

bool VectorLoadable(const TensorView& t, ComputeKind compute, int64_t head_dim) {
  if (t.empty() || t.dtype != StorageOf(compute) || t.rank != 4 || t.strides[3] != 1) return false;
  const int64_t elem = static_cast<int64_t>(DTypeSize(t.dtype));
  const int64_t per_vector = 16 / elem;
  if (head_dim % per_vector != 0) return false;
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return false;
  for (int i = 0; i < 3; ++i) {
    if ((t.strides[i] * elem) % 16 != 0) return false;
  }
  return true;
}

absl::StatusOr<FlashParams> MakeFlashParams(const AttentionProblem& p, const AttentionArgs& a) {
  if (p.is_ragged()) {
    return absl::InvalidArgumentError(
        "a ragged batch (q_lengths) runs as its sequences: use MakeFlashLaunches");
  }
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  for (int64_t n : {p.batch, p.num_heads, p.q_len, p.kv_len, p.head_dim, p.value_dim(),
                    p.q_len * p.group_size()}) {
    if (n > kIntMax) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a problem dimension (%d) exceeds the 32-bit range of the CUDA kernels", n));
    }
  }
  if (p.batch > 65535 || p.num_kv_heads > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("batch (%d) and num_kv_heads (%d) must be <= 65535 (CUDA grid limits)",
                        p.batch, p.num_kv_heads));
  }
  FlashParams f;
  auto q_type = ElemTypeOf(p.dtype);
  if (!q_type.ok()) return q_type.status();
  if (IsScaledElem(*q_type)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dtype %s is for K and V only; Q and O need a float type", ElemTypeName(*q_type)));
  }
  auto kv_type = ElemTypeOf(p.kv_dtype);
  if (!kv_type.ok()) return kv_type.status();
  f.q_type = *q_type;
  f.kv_type = *kv_type;
  if (p.fast() && IsScaledElem(f.kv_type)) {
    // Capabilities::fast_kv_dtypes leaves int8 and fp8 out, so Supports()
    // refuses them: FAST rounds Q (int8: quantized; fp8: to bf16,
    // core/fast_compute.h), which these kernels do not do.
    return absl::InvalidArgumentError(absl::StrFormat(
        "compute FAST with %s K/V is not implemented by the CUDA kernels (they do not round Q "
        "as FAST defines); run it EXACT",
        DTypeName(p.kv_dtype)));
  }
  f.compute = ComputeKindFor(p.dtype, p.kv_dtype, p.compute);
  // FAST (core/fast_compute.h): only 16-bit K/V has something to round to.
  const bool fast16 = p.fast() && (f.kv_type == ElemType::kF16 || f.kv_type == ElemType::kBF16);
  f.round_q = fast16;
  f.round_p = fast16;

  f.q = a.q.data;
  f.k = a.k.data;
  f.v = a.v.data;
  f.o = a.o.data;
  f.q_stride = StridesOf(a.q);
  const bool paged = p.is_paged();
  f.k_stride = KvStridesOf(a.k, paged);
  f.v_stride = KvStridesOf(a.v, paged);
  f.o_stride = StridesOf(a.o);
  if (p.return_lse) {
    f.lse = static_cast<float*>(a.lse.data);
    f.lse_stride_b = a.lse.strides[0];
    f.lse_stride_h = a.lse.strides[1];
    f.lse_stride_t = a.lse.strides[2];
  }
  if (p.has_kv_lengths()) {
    f.kv_lengths = static_cast<const int32_t*>(a.kv_lengths.data);
    f.kv_lengths_stride = a.kv_lengths.strides[0];
  }
  if (p.blocked_mask) {
    f.blocked_mask = static_cast<const uint8_t*>(a.blocked_mask.data);
    f.mask_stride = StridesOf(a.blocked_mask);
  }
  if (p.additive_bias) {
    f.bias = static_cast<const float*>(a.bias.data);
    f.bias_stride = StridesOf(a.bias);
  }
  if (p.sinks) {  // [H]
    f.sinks = static_cast<const float*>(a.sinks.data);
    f.sinks_stride = a.sinks.strides[0];
  }
  if (p.alibi) {  // [H]
    f.alibi_slopes = static_cast<const float*>(a.alibi_slopes.data);
    f.alibi_stride = a.alibi_slopes.strides[0];
  }
  if (paged) {
    f.block_table = static_cast<const int32_t*>(a.block_table.data);
    f.block_table_stride_b = a.block_table.strides[0];
    f.block_table_stride_j = a.block_table.strides[1];
    f.page_size = static_cast<int>(p.page_size);
    f.page_shift = Log2(p.page_size);
  }
  if (IsScaledElem(f.kv_type)) {  // [B, G, Tk] or the pool's; stride 0 per tensor
    f.k_scale = static_cast<const float*>(a.k_scale.data);
    f.v_scale = static_cast<const float*>(a.v_scale.data);
    f.k_scale_stride = ScaleStridesOf(a.k_scale, paged);
    f.v_scale_stride = ScaleStridesOf(a.v_scale, paged);
  }

  f.batch = static_cast<int>(p.batch);
  f.num_heads = static_cast<int>(p.num_heads);
  f.num_kv_heads = static_cast<int>(p.num_kv_heads);
  f.group_size = static_cast<int>(p.group_size());
  f.q_len = static_cast<int>(p.q_len);
  f.kv_len = static_cast<int>(p.kv_len);
  f.head_dim = static_cast<int>(p.head_dim);
  f.value_dim = static_cast<int>(p.value_dim());
  f.rows_per_kv_head = p.q_len * p.group_size();
  f.scale = p.scale;
  f.softcap = p.softcap;
  f.mask = p.mask_params();

  f.q_vec = VectorLoadable(a.q, f.compute, p.head_dim);
  f.k_vec = VectorLoadable(a.k, f.compute, p.head_dim);
  f.v_vec = VectorLoadable(a.v, f.compute, p.value_dim());
  return f;
}

absl::StatusOr<std::vector<FlashLaunch>> MakeFlashLaunches(const AttentionProblem& p,
                                                           const AttentionArgs& a) {
  std::vector<FlashLaunch> launches;
  if (!p.is_ragged()) {
    auto f = MakeFlashParams(p, a);
    if (!f.ok()) return f.status();
    launches.push_back(FlashLaunch{0, *f});
    return launches;
  }
  const std::vector<SequenceCall> sequences = RaggedSequences(p, a);
  launches.reserve(sequences.size());
  for (const SequenceCall& s : sequences) {
    auto f = MakeFlashParams(s.problem, s.args);
    if (!f.ok()) return f.status();
    launches.push_back(FlashLaunch{s.index, *f});
  }
  return launches;
}

int64_t CublasBytesPerQueryRow(int64_t num_kv_heads, int64_t kv_len, int64_t head_dim,
                               int64_t elem_bytes) {
  return num_kv_heads * (kv_len * (4 + elem_bytes) + head_dim * 4);
}

int64_t CublasQueryBlock(int64_t q_len, int64_t bytes_per_row, int64_t budget_bytes) {
  const int64_t rows = bytes_per_row > 0 ? budget_bytes / bytes_per_row : q_len;
  return std::max<int64_t>(1, std::min(q_len, rows));
}

}  // namespace cuda
}  // namespace attnkit
