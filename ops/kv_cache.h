// The KV cache of one attention layer: keys and values [B, Hkv, capacity, d]
// with a per-sequence length, appended in place. Attention reads it as views
// [B, Hkv, Tk = max length, d] with the capacity buffer's strides plus the
// per-sequence lengths, so nothing is copied per step and the query heads of
// a group share their KV head through the index map.
#ifndef ATTNKIT_OPS_KV_CACHE_H_
#define ATTNKIT_OPS_KV_CACHE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace attnkit {

class KVCache {
 public:
  KVCache() = default;
  // Allocates (and zero-fills, so the pages are touched once, here) both
  // buffers. InvalidArgument naming the value when a dimension is < 1 or the
  // dtype is not f32/f16/bf16; ResourceExhausted when memory runs out.
  static absl::StatusOr<KVCache> Create(int64_t batch, int64_t kv_heads, int64_t capacity,
                                        int64_t head_dim, DType dtype = DType::kF32);
  // Exact bytes of K and V for these dimensions: 2 * B * Hkv * capacity * d * size.
  static int64_t BytesFor(int64_t batch, int64_t kv_heads, int64_t capacity, int64_t head_dim,
                          DType dtype);

  // Appends `tokens` new positions to every sequence. k and v are rows
  // [B * tokens, Hkv * d] (token-major, as the projections produce them) with
  // row stride ld. ResourceExhausted, with nothing written, when any sequence
  // would pass the capacity.
  absl::Status Append(const float* k, const float* v, int64_t ld, int64_t tokens);
  // Sets every sequence's length (keeping the contents); InvalidArgument when
  // a length is outside [0, capacity] or the count is not B.
  absl::Status SetLengths(const std::vector<int64_t>& lengths);
  void Clear();

  int64_t batch() const { return batch_; }
  int64_t kv_heads() const { return kv_heads_; }
  int64_t capacity() const { return capacity_; }
  int64_t head_dim() const { return head_dim_; }
  DType dtype() const { return dtype_; }
  int64_t length(int64_t b) const { return lengths_[b]; }
  const std::vector<int64_t>& lengths() const { return lengths_; }
  int64_t max_length() const;
  bool uniform_lengths() const;
  int64_t bytes() const { return BytesFor(batch_, kv_heads_, capacity_, head_dim_, dtype_); }

  // [B, Hkv, max_length, d] views of the capacity buffers (strides
  // [Hkv*cap*d, cap*d, d, 1]); positions at or past a sequence's length are
  // stale and must be masked with kv_lengths_view().
  TensorView keys() const;
  TensorView values() const;
  // i32 [B]: the lengths, for AttentionArgs::kv_lengths.
  TensorView kv_lengths_view() const { return lengths_i32_.view(); }

  // For a copy kept elsewhere (a device backend's mirror, AttentionRunner):
  // positions [0, mirrored_until(b)) of sequence b are unchanged since the
  // last MarkMirrored(); Append lowers it to where it writes. id() tells
  // caches apart (unique per Create, kept by moves).
  int64_t mirrored_until(int64_t b) const { return mirrored_until_[b]; }
  void MarkMirrored() { mirrored_until_ = lengths_; }
  uint64_t id() const { return id_; }

 private:
  TensorView View(const Tensor& t) const;

  int64_t batch_ = 0, kv_heads_ = 0, capacity_ = 0, head_dim_ = 0;
  DType dtype_ = DType::kF32;
  Tensor k_, v_;        // [B, Hkv, capacity, d]
  Tensor lengths_i32_;  // [B]
  std::vector<int64_t> lengths_;
  std::vector<int64_t> mirrored_until_;  // see mirrored_until()
  uint64_t id_ = 0;
};

}  // namespace attnkit

#endif  // ATTNKIT_OPS_KV_CACHE_H_
