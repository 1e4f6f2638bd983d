// The parameters a CUDA attention kernel consumes: plain data built on the
// host from a validated AttentionProblem + AttentionArgs (MakeFlashParams),
// and the K/V row addressing both kernels use (host and device functions, so
// the host tests check it). Included by host C++ and by nvcc; no CUDA or
// Abseil types.
#ifndef ATTNKIT_BACKENDS_CUDA_FLASH_PARAMS_H_
#define ATTNKIT_BACKENDS_CUDA_FLASH_PARAMS_H_

#include <cmath>
#include <cstdint>

#include "core/alibi.h"
#include "core/fp8.h"
#include "core/mask.h"

namespace attnkit {
namespace cuda {

// Storage type of one tensor: the float subset of attnkit::DType, and for K
// and V only int8 and the two fp8 formats (value = the stored number times
// the row's f32 scale; core/fp8.h's Fp8CodeValue decodes the codes, on the
// device too).
enum class ElemType : int { kF32 = 0, kF16 = 1, kBF16 = 2, kI8 = 3, kF8E4M3 = 4, kF8E5M2 = 5 };

// int8 and fp8 K/V: each (token, KV head) row has an f32 scale.
ATTNKIT_HOST_DEVICE inline bool IsScaledElem(ElemType t) {
  return t == ElemType::kI8 || t == ElemType::kF8E4M3 || t == ElemType::kF8E5M2;
}

// Element type of the Q, K and V tiles the flash kernel multiplies: f16 and
// bf16 run Q.K on tensor cores (exact products, fp32 accumulation), and P.V
// there too only under FAST (FlashParams::round_p; EXACT keeps P in f32 on
// the CUDA cores); f32 runs both on the CUDA cores in full precision.
enum class ComputeKind : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

// Element strides of a rank-4 view, [B, heads, T, d] or [B, H, Tq, Tk]. For
// a paged K/V pool [num_pages, page_size, G, d] b steps pages, t rows of a
// page and h KV heads; for int8 scales (K's shape without d) c is 0.
struct Strides4 {
  int64_t b = 0, h = 0, t = 0, c = 0;
};

struct FlashParams {
  // Device pointers. q: [B, H, Tq, d], o: [B, H, Tq, dv]; k: [B, G, Tk, d],
  // v: [B, G, Tk, dv], or pools [num_pages, page_size, G, d or dv] read
  // through block_table.
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;                   // [B, H, Tq], or null
  const int32_t* kv_lengths = nullptr;    // [B], or null
  const uint8_t* blocked_mask = nullptr;  // [B, H, Tq, Tk], 1 = blocked, or null
  const float* bias = nullptr;            // [B, H, Tq, Tk], or null
  Strides4 q_stride, k_stride, v_stride, o_stride, mask_stride, bias_stride;
  int64_t lse_stride_b = 0, lse_stride_h = 0, lse_stride_t = 0;
  int64_t kv_lengths_stride = 0;
  ElemType q_type = ElemType::kF32, kv_type = ElemType::kF32;  // o has q_type

  // Paged K/V when block_table is set: sequence b's key t is row
  // t % page_size of page block_table[b * block_table_stride_b +
  // (t / page_size) * block_table_stride_j] (KvRowOf below).
  // Entries past a sequence's last used page are never read.
  const int32_t* block_table = nullptr;  // [B, max_pages], or null (dense K/V)
  int64_t block_table_stride_b = 0, block_table_stride_j = 0;
  int page_size = 0;   // a power of two in 16..256 when paged, else 0
  int page_shift = 0;  // log2(page_size): t / page_size = t >> page_shift

  // int8 and fp8 K/V (IsScaledElem(kv_type)): the value of an element is
  // its int8 or fp8 value times the f32 scale of its (token, KV head) row; a
  // NaN scale makes the row NaN. A per-tensor scale is a stride-0 view.
  // Scales are [B, G, Tk], or [num_pages, page_size, G] when paged, with
  // strides in k_stride's roles (b, h, t; c = 0).
  const float* k_scale = nullptr;  // null unless int8 or fp8
  const float* v_scale = nullptr;
  Strides4 k_scale_stride, v_scale_stride;
  ComputeKind compute = ComputeKind::kF32;
  // The compute mode (config.proto compute, core/fast_compute.h). EXACT
  // leaves both false: Q, K and V enter the products as stored (exactly
  // widened), and P stays f32 for P.V. FAST with 16-bit K/V sets both:
  //  - round_q: Q is rounded to K's storage type (kv_type) on load, to
  //    nearest even (a no-op when Q is stored in that type);
  //  - round_p: P is rounded to the 16-bit compute type before P.V (tensor
  //    cores), the row sum staying of the unrounded f32 weights.
  // round_p implies a 16-bit `compute`; int8 K/V never runs FAST here.
  bool round_q = false;
  bool round_p = false;

  int batch = 1;
  int num_heads = 1;     // H
  int num_kv_heads = 1;  // G
  int group_size = 1;    // H / G: query heads sharing one KV head
  int q_len = 1;         // Tq
  int kv_len = 1;        // Tk
  int head_dim = 1;      // d: Q and K
  int value_dim = 1;     // dv: V and O (head_dim unless value_head_dim says)
  // One thread block covers rows of the packed [Tq * group_size] index
  // r = i * group_size + (h mod group_size) of one KV head, so the query heads
  // of a group share every K/V tile the block loads.
  int64_t rows_per_kv_head = 1;

  float scale = 1.0f;    // s = scale * q.k
  float softcap = 0.0f;  // s = softcap * tanh(s / softcap) when > 0
  MaskParams mask;
  // Attention sinks (core/sinks.h): head h's logit at sinks[h *
  // sinks_stride], folded into each finished row (by the combine kernel
  // under split-K); null without.
  const float* sinks = nullptr;
  int64_t sinks_stride = 0;
  // ALiBi (core/alibi.h): head h's slope at alibi_slopes[h * alibi_stride];
  // AlibiTerm joins each visible score after softcap; null without.
  const float* alibi_slopes = nullptr;
  int64_t alibi_stride = 0;

  // 16-byte vector loads are allowed: storage type equals the compute type,
  // d is contiguous and a multiple of the vector, pointer and strides aligned.
  bool q_vec = false, k_vec = false, v_vec = false;

  // Split-K: > 1 writes normalised partial results per key split, merged
  // through their LSE by the combine kernel.
  int num_splits = 1;
  float* partial_o = nullptr;    // [splits, B, H, Tq, dv]
  float* partial_lse = nullptr;  // [splits, B, H, Tq]
};

// Where key/value row t of sequence b lives (core/kv_rows.h for the kernels):
// outer indexes the Strides4's b and row its t. Dense K/V: (b, t). Paged:
// (block_table[b, t / page_size], t % page_size). Both kernels address every
// K, V and scale row through this, so dense and paged share one code path.
struct KvRow {
  int64_t outer;
  int64_t row;
};
ATTNKIT_HOST_DEVICE inline KvRow KvRowOf(const FlashParams& p, int64_t b, int64_t t) {
  if (p.block_table == nullptr) return KvRow{b, t};
  const int64_t page =
      p.block_table[b * p.block_table_stride_b + (t >> p.page_shift) * p.block_table_stride_j];
  return KvRow{page, t & (int64_t{p.page_size} - 1)};
}
// Element offset of the first element of row r of KV head g in a K, V or
// scale tensor with strides s.
ATTNKIT_HOST_DEVICE inline int64_t KvOffset(const Strides4& s, KvRow r, int64_t g) {
  return r.outer * s.b + g * s.h + r.row * s.t;
}
// The f32 scale of row r of head g for int8 or fp8 K/V (scale non-null); 1 for
// float K/V, whose values the multiply leaves exact.
ATTNKIT_HOST_DEVICE inline float KvScale(const float* scale, const Strides4& s, KvRow r,
                                         int64_t g) {
  return scale == nullptr ? 1.0f : scale[KvOffset(s, r, g)];
}

// Head h's sink logit; -inf (no sink) without sinks.
ATTNKIT_HOST_DEVICE inline float SinkOf(const FlashParams& p, int64_t h) {
  return p.sinks == nullptr ? -INFINITY : p.sinks[h * p.sinks_stride];
}
// The ALiBi term of score (i, j) of head h (0 without ALiBi): core/alibi.h's.
ATTNKIT_HOST_DEVICE inline float AlibiTermOf(const FlashParams& p, int64_t h, int64_t i, int64_t j,
                                             int64_t kv_length) {
  if (p.alibi_slopes == nullptr) return 0.0f;
  return AlibiTerm(p.alibi_slopes[h * p.alibi_stride], Diagonal(p.mask, i, kv_length), j);
}

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_FLASH_PARAMS_H_
