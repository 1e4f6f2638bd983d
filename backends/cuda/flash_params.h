// The parameters a CUDA attention kernel consumes: plain data built on the
// host from a validated AttentionProblem + AttentionArgs (MakeFlashParams).
// Included by host C++ and by nvcc; no CUDA or Abseil types.
#ifndef ATTNKIT_BACKENDS_CUDA_FLASH_PARAMS_H_
#define ATTNKIT_BACKENDS_CUDA_FLASH_PARAMS_H_

#include <cstdint>

#include "core/mask.h"

namespace attnkit {
namespace cuda {

// Storage type of one tensor (the float subset of attnkit::DType).
enum class ElemType : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

// Element type of the tiles the kernel multiplies: f16 and bf16 run on tensor
// cores (fp32 accumulation); f32 runs on the CUDA cores in full precision.
enum class ComputeKind : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

// Element strides of a rank-4 view, [B, heads, T, d] or [B, H, Tq, Tk].
struct Strides4 {
  int64_t b = 0, h = 0, t = 0, c = 0;
};

struct FlashParams {
  // Device pointers. q, o: [B, H, Tq, d]; k, v: [B, G, Tk, d].
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
  ComputeKind compute = ComputeKind::kF32;

  int batch = 1;
  int num_heads = 1;     // H
  int num_kv_heads = 1;  // G
  int group_size = 1;    // H / G: query heads sharing one KV head
  int q_len = 1;         // Tq
  int kv_len = 1;        // Tk
  int head_dim = 1;      // d
  // One thread block covers rows of the packed [Tq * group_size] index
  // r = i * group_size + (h mod group_size) of one KV head, so the query heads
  // of a group share every K/V tile the block loads.
  int64_t rows_per_kv_head = 1;

  float scale = 1.0f;    // s = scale * q.k
  float softcap = 0.0f;  // s = softcap * tanh(s / softcap) when > 0
  MaskParams mask;

  // 16-byte vector loads are allowed: storage type equals the compute type,
  // d is contiguous and a multiple of the vector, pointer and strides aligned.
  bool q_vec = false, k_vec = false, v_vec = false;

  // Split-K: > 1 writes normalised partial results per key split, merged
  // through their LSE by the combine kernel.
  int num_splits = 1;
  float* partial_o = nullptr;    // [splits, B, H, Tq, d]
  float* partial_lse = nullptr;  // [splits, B, H, Tq]
};

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_FLASH_PARAMS_H_
