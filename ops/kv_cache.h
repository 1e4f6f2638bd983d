// The KV cache of one attention layer, with a per-sequence length, appended
// in place. Two storage modes:
//  - dense (Create): keys and values [B, Hkv, capacity, d]; attention reads
//    them as views [B, Hkv, Tk = max length, d] with the capacity buffer's
//    strides plus the per-sequence lengths;
//  - paged (CreatePaged): one pool per layer, [num_pages, page_size, Hkv, d],
//    and a block table per sequence (ops/block_tables.h); pages are taken as
//    tokens arrive and may be shared between sequences (Fork: a common
//    prompt prefix, copy-on-write of a shared partially filled page).
// Either way nothing is copied per step and the query heads of a group share
// their KV head through the index map. Storage is f32, f16, bf16 or i8; i8
// rows are quantized as they are appended (core/quantize.h), one f32 scale
// per (token, KV head) for K and for V, which the kernels get as
// k_scale/v_scale. Values may have a head dim of their own (value_dim, Ev;
// MLA): every shape above with d is then d for keys and Ev for values.
#ifndef ATTNKIT_OPS_KV_CACHE_H_
#define ATTNKIT_OPS_KV_CACHE_H_

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/block_tables.h"

namespace attnkit {

class KVCache {
 public:
  KVCache() = default;
  // A dense cache. Allocates (and zero-fills, so the pages are touched once,
  // here) every buffer. InvalidArgument naming the value when a dimension is
  // < 1 or the dtype is not f32/f16/bf16/i8; ResourceExhausted when memory
  // runs out.
  // value_dim: the values' head dim (0 = head_dim).
  static absl::StatusOr<KVCache> Create(int64_t batch, int64_t kv_heads, int64_t capacity,
                                        int64_t head_dim, DType dtype = DType::kF32,
                                        int64_t value_dim = 0);
  // A paged cache: a pool of num_pages pages of page_size tokens (a power of
  // two in [16, 256], core/problem.h), shared by the batch's sequences. The
  // same errors as Create, naming page_size or num_pages.
  static absl::StatusOr<KVCache> CreatePaged(int64_t batch, int64_t kv_heads, int64_t head_dim,
                                             int64_t page_size, int64_t num_pages,
                                             DType dtype = DType::kF32, int64_t value_dim = 0);
  // Exact bytes of K and V (and, for i8, their f32 scales) of a dense cache:
  // B * Hkv * capacity * ((d + Ev) * size + (i8 ? 8 : 0)) (Ev = value_dim,
  // 0 = d).
  static int64_t BytesFor(int64_t batch, int64_t kv_heads, int64_t capacity, int64_t head_dim,
                          DType dtype, int64_t value_dim = 0);
  // The same for a paged pool: num_pages * page_size * Hkv * ((d + Ev) *
  // size + (i8 ? 8 : 0)); the block tables (B * num_pages i32) are not
  // counted.
  static int64_t PagedBytesFor(int64_t kv_heads, int64_t head_dim, int64_t page_size,
                               int64_t num_pages, DType dtype, int64_t value_dim = 0);

  // OK when every sequence has room for `tokens` more; else ResourceExhausted
  // naming the lengths and the capacity (dense) or the pages needed and free
  // (paged). Append makes this check first.
  absl::Status CheckRoom(int64_t tokens) const;
  // Appends `tokens` new positions to every sequence. k and v are rows
  // [B * tokens, Hkv * d] (token-major, as the projections produce them) with
  // row stride ld. Paged: takes the pages the new tokens need (and copies a
  // shared last page first). ResourceExhausted, with nothing written, when
  // CheckRoom fails.
  absl::Status Append(const float* k, const float* v, int64_t ld, int64_t tokens);
  // The same with rows of their own strides: k [B * tokens, Hkv * d] with
  // row stride ldk, v [B * tokens, Hkv * Ev] with ldv.
  absl::Status Append(const float* k, int64_t ldk, const float* v, int64_t ldv, int64_t tokens);
  // Sets every sequence's length (keeping the contents); InvalidArgument when
  // the count is not B or a length is outside [0, capacity] (dense) or
  // [0, its current length] (paged: the pages past a new length are released,
  // so a paged sequence grows only by Append or Fork).
  absl::Status SetLengths(const std::vector<int64_t>& lengths);
  // Sequence dst continues from the first `tokens` tokens of src (a common
  // prompt prefix, e.g. several samples of one prompt); dst's own tokens are
  // dropped. Paged: dst shares src's pages (no copy; see block_tables.h for
  // copy-on-write). Dense: the rows are copied. InvalidArgument for a bad
  // index, src == dst or tokens outside [0, src's length].
  absl::Status Fork(int64_t src, int64_t dst, int64_t tokens);
  void Clear();

  int64_t batch() const { return batch_; }
  int64_t kv_heads() const { return kv_heads_; }
  // Dense: the tokens each sequence can hold. Paged: num_pages * page_size,
  // what one sequence could hold with every page.
  int64_t capacity() const { return capacity_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t value_dim() const { return value_dim_; }  // Ev: head_dim unless set
  DType dtype() const { return dtype_; }
  // Rows stored with a scale each: i8, f8e4m3 or f8e5m2 (quantized on append).
  bool int8() const { return IsScaledKv(dtype_); }
  int64_t length(int64_t b) const { return lengths_[b]; }
  const std::vector<int64_t>& lengths() const { return lengths_; }
  int64_t max_length() const;
  bool uniform_lengths() const;
  // K, V and scale bytes (BytesFor or PagedBytesFor).
  int64_t bytes() const;

  bool paged() const { return page_size_ > 0; }
  int64_t page_size() const { return page_size_; }  // 0 when dense
  int64_t num_pages() const;                        // 0 when dense
  int64_t free_pages() const;                       // 0 when dense
  // Paged only: the pages each sequence holds and their reference counts.
  const BlockTables& block_tables() const { return tables_; }

  // Dense: [B, Hkv, max_length, d] views of the capacity buffers (strides
  // [Hkv*cap*d, cap*d, d, 1]); positions at or past a sequence's length are
  // stale and must be masked with kv_lengths_view(). Paged: the whole pool
  // [num_pages, page_size, Hkv, d], read through block_table_view().
  TensorView keys() const;
  TensorView values() const;
  // i8 only (else empty): f32 scales with keys()'s shape without d,
  // [B, Hkv, max_length] or [num_pages, page_size, Hkv].
  TensorView key_scales() const;
  TensorView value_scales() const;
  // Paged only (else empty): i32 [B, max_pages] for AttentionArgs::block_table.
  TensorView block_table_view(int64_t max_pages) const;
  // i32 [B]: the lengths, for AttentionArgs::kv_lengths.
  TensorView kv_lengths_view() const { return lengths_i32_.view(); }

  // For a copy kept elsewhere (a device backend's mirror, AttentionRunner):
  // positions [0, mirrored_until(b)) of sequence b are unchanged since the
  // last MarkMirrored(); Append lowers it to where it writes (paged: to the
  // start of a page it had to copy). id() tells caches apart (unique per
  // Create, kept by moves).
  int64_t mirrored_until(int64_t b) const { return mirrored_until_[b]; }
  void MarkMirrored() { mirrored_until_ = lengths_; }
  uint64_t id() const { return id_; }
  // Storage rows: a row is the d (Ev) values of one (token, KV head), or its
  // one scale. keys() holds storage_rows() * d elements, values()
  // storage_rows() * Ev, the scales storage_rows(); a row's index is the same
  // in all four.
  int64_t storage_rows() const;
  struct RowSpan {
    int64_t first, count;
  };
  // Calls fn on runs of the storage rows of positions [mirrored_until(b),
  // length(b)) of every sequence b ([0, length(b)) when `all`): what a mirror
  // must upload. Stops at, and returns, fn's first error.
  absl::Status ForEachUnmirroredSpan(bool all, absl::FunctionRef<absl::Status(RowSpan)> fn) const;

 private:
  // Checks the dims, sets them, allocates the lengths; storage is the
  // caller's.
  static absl::StatusOr<KVCache> Common(int64_t batch, int64_t kv_heads, int64_t capacity,
                                        int64_t head_dim, int64_t value_dim, DType dtype);
  // Storage row of token t of KV head g, sequence b (t below its pages' end).
  int64_t StorageRow(int64_t b, int64_t g, int64_t t) const;
  // Writes one row of K (d values) and V (Ev) at storage row r, quantizing i8.
  void WriteRow(int64_t r, const float* k, const float* v);
  // Copies `rows` storage rows (K, V, scales) from row `from` to row `to`.
  void CopyRows(int64_t from, int64_t to, int64_t rows);
  void SyncLengthsTensor();
  TensorView View(const Tensor& t) const;

  int64_t batch_ = 0, kv_heads_ = 0, capacity_ = 0, head_dim_ = 0, value_dim_ = 0;
  int64_t page_size_ = 0;
  DType dtype_ = DType::kF32;
  Tensor k_, v_;              // [B, Hkv, capacity, d or Ev] or [num_pages, page_size, Hkv, ..]
  Tensor k_scale_, v_scale_;  // i8: the same without d; else empty
  BlockTables tables_;        // paged only
  Tensor lengths_i32_;        // [B]
  std::vector<int64_t> lengths_;
  std::vector<int64_t> mirrored_until_;  // see mirrored_until()
  uint64_t id_ = 0;
};

}  // namespace attnkit

#endif  // ATTNKIT_OPS_KV_CACHE_H_
