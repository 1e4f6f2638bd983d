#include "ops/kv_cache.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/problem.h"
#include "core/quantize.h"
#include "core/status_macros.h"

namespace attnkit {
namespace {

// Bytes of one storage row of K and V (d and Ev values; value_dim 0 = d)
// plus their scales (i8).
int64_t RowBytes(int64_t head_dim, int64_t value_dim, DType dtype) {
  const int64_t dv = value_dim > 0 ? value_dim : head_dim;
  return (head_dim + dv) * static_cast<int64_t>(DTypeSize(dtype)) + (IsScaledKv(dtype) ? 8 : 0);
}

absl::Status CheckIndex(const char* what, int64_t b, int64_t batch) {
  if (b < 0 || b >= batch) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV cache %s (%d) must be a sequence in [0, batch (%d))", what, b, batch));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t KVCache::BytesFor(int64_t batch, int64_t kv_heads, int64_t capacity, int64_t head_dim,
                          DType dtype, int64_t value_dim) {
  return batch * kv_heads * capacity * RowBytes(head_dim, value_dim, dtype);
}

int64_t KVCache::PagedBytesFor(int64_t kv_heads, int64_t head_dim, int64_t page_size,
                               int64_t num_pages, DType dtype, int64_t value_dim) {
  return num_pages * page_size * kv_heads * RowBytes(head_dim, value_dim, dtype);
}

absl::StatusOr<KVCache> KVCache::Common(int64_t batch, int64_t kv_heads, int64_t capacity,
                                        int64_t head_dim, int64_t value_dim, DType dtype) {
  if (value_dim == 0) value_dim = head_dim;
  const struct {
    const char* name;
    int64_t value;
  } dims[] = {{"batch", batch},
              {"kv_heads", kv_heads},
              {"capacity", capacity},
              {"head_dim", head_dim},
              {"value_dim", value_dim}};
  for (const auto& dim : dims) {
    if (dim.value < 1) {
      return absl::InvalidArgumentError(
          absl::StrFormat("KV cache %s (%d) must be >= 1", dim.name, dim.value));
    }
  }
  if (capacity > INT32_MAX) {  // lengths travel as i32 kv_lengths
    return absl::InvalidArgumentError(
        absl::StrFormat("KV cache capacity (%d) must be <= %d", capacity, INT32_MAX));
  }
  if (!IsKvStorage(dtype)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV cache dtype %s must be f32, f16, bf16, i8, f8e4m3 or f8e5m2", DTypeName(dtype)));
  }
  KVCache cache;
  cache.batch_ = batch;
  cache.kv_heads_ = kv_heads;
  cache.capacity_ = capacity;
  cache.head_dim_ = head_dim;
  cache.value_dim_ = value_dim;
  cache.dtype_ = dtype;
  ATTNKIT_ASSIGN_OR_RETURN(cache.lengths_i32_, Tensor::Contiguous(DType::kI32, {batch}));
  cache.lengths_.assign(static_cast<size_t>(batch), 0);
  cache.mirrored_until_.assign(static_cast<size_t>(batch), 0);
  static std::atomic<uint64_t> next_id{1};
  cache.id_ = next_id.fetch_add(1);
  return cache;
}

absl::StatusOr<KVCache> KVCache::Create(int64_t batch, int64_t kv_heads, int64_t capacity,
                                        int64_t head_dim, DType dtype, int64_t value_dim) {
  ATTNKIT_ASSIGN_OR_RETURN(KVCache cache,
                           Common(batch, kv_heads, capacity, head_dim, value_dim, dtype));
  ATTNKIT_ASSIGN_OR_RETURN(cache.k_,
                           Tensor::Contiguous(dtype, {batch, kv_heads, capacity, head_dim}));
  ATTNKIT_ASSIGN_OR_RETURN(
      cache.v_, Tensor::Contiguous(dtype, {batch, kv_heads, capacity, cache.value_dim_}));
  if (cache.int8()) {
    ATTNKIT_ASSIGN_OR_RETURN(cache.k_scale_,
                             Tensor::Contiguous(DType::kF32, {batch, kv_heads, capacity}));
    ATTNKIT_ASSIGN_OR_RETURN(cache.v_scale_,
                             Tensor::Contiguous(DType::kF32, {batch, kv_heads, capacity}));
  }
  return cache;
}

absl::StatusOr<KVCache> KVCache::CreatePaged(int64_t batch, int64_t kv_heads, int64_t head_dim,
                                             int64_t page_size, int64_t num_pages, DType dtype,
                                             int64_t value_dim) {
  if (page_size < kMinPageSize || page_size > kMaxPageSize || (page_size & (page_size - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV cache page_size (%d) must be a power of two in [%d, %d]", page_size,
                        kMinPageSize, kMaxPageSize));
  }
  if (num_pages < 1 || num_pages > INT32_MAX / page_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV cache num_pages (%d) must be in [1, %d]: page numbers and lengths travel as i32",
        num_pages, INT32_MAX / page_size));
  }
  ATTNKIT_ASSIGN_OR_RETURN(
      KVCache cache, Common(batch, kv_heads, num_pages * page_size, head_dim, value_dim, dtype));
  cache.page_size_ = page_size;
  ATTNKIT_ASSIGN_OR_RETURN(cache.tables_, BlockTables::Create(batch, page_size, num_pages));
  ATTNKIT_ASSIGN_OR_RETURN(cache.k_,
                           Tensor::Contiguous(dtype, {num_pages, page_size, kv_heads, head_dim}));
  ATTNKIT_ASSIGN_OR_RETURN(
      cache.v_, Tensor::Contiguous(dtype, {num_pages, page_size, kv_heads, cache.value_dim_}));
  if (cache.int8()) {
    ATTNKIT_ASSIGN_OR_RETURN(cache.k_scale_,
                             Tensor::Contiguous(DType::kF32, {num_pages, page_size, kv_heads}));
    ATTNKIT_ASSIGN_OR_RETURN(cache.v_scale_,
                             Tensor::Contiguous(DType::kF32, {num_pages, page_size, kv_heads}));
  }
  return cache;
}

int64_t KVCache::bytes() const {
  return paged() ? PagedBytesFor(kv_heads_, head_dim_, page_size_, num_pages(), dtype_, value_dim_)
                 : BytesFor(batch_, kv_heads_, capacity_, head_dim_, dtype_, value_dim_);
}

int64_t KVCache::num_pages() const { return paged() ? tables_.allocator().num_pages() : 0; }
int64_t KVCache::free_pages() const { return paged() ? tables_.allocator().num_free() : 0; }

absl::Status KVCache::CheckRoom(int64_t tokens) const {
  if (tokens < 0) {
    return absl::InvalidArgumentError(absl::StrFormat("append of %d tokens", tokens));
  }
  if (paged()) return tables_.CheckRoom(lengths_, tokens);
  for (int64_t b = 0; b < batch_; ++b) {
    if (lengths_[b] + tokens > capacity_) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "KV cache too small: sequence %d holds %d tokens, %d more need %d, the capacity is %d; "
          "nothing was written",
          b, lengths_[b], tokens, lengths_[b] + tokens, capacity_));
    }
  }
  return absl::OkStatus();
}

int64_t KVCache::StorageRow(int64_t b, int64_t g, int64_t t) const {
  if (!paged()) return (b * kv_heads_ + g) * capacity_ + t;
  return (tables_.page(b, t) * page_size_ + t % page_size_) * kv_heads_ + g;
}

void KVCache::WriteRow(int64_t r, const float* k, const float* v) {
  const int64_t d = head_dim_, dv = value_dim_, at = r * d, v_at = r * dv;
  switch (dtype_) {
    case DType::kF32:
      std::memcpy(static_cast<float*>(k_.data()) + at, k, d * sizeof(float));
      std::memcpy(static_cast<float*>(v_.data()) + v_at, v, dv * sizeof(float));
      break;
    case DType::kI8:
      static_cast<float*>(k_scale_.data())[r] =
          QuantizeRowI8(k, d, static_cast<int8_t*>(k_.data()) + at);
      static_cast<float*>(v_scale_.data())[r] =
          QuantizeRowI8(v, dv, static_cast<int8_t*>(v_.data()) + v_at);
      break;
    case DType::kF8E4M3:
    case DType::kF8E5M2:  // quantized on append, a scale per row (vLLM's per-token)
      static_cast<float*>(k_scale_.data())[r] =
          QuantizeRowFp8(k, d, Fp8FormatOf(dtype_), static_cast<uint8_t*>(k_.data()) + at);
      static_cast<float*>(v_scale_.data())[r] =
          QuantizeRowFp8(v, dv, Fp8FormatOf(dtype_), static_cast<uint8_t*>(v_.data()) + v_at);
      break;
    default:
      for (int64_t c = 0; c < d; ++c) StoreFromF32(k_.data(), dtype_, at + c, k[c]);
      for (int64_t c = 0; c < dv; ++c) StoreFromF32(v_.data(), dtype_, v_at + c, v[c]);
  }
}

void KVCache::CopyRows(int64_t from, int64_t to, int64_t rows) {
  for (const Tensor* t : {&k_, &v_}) {
    const size_t row_bytes =
        static_cast<size_t>(t == &k_ ? head_dim_ : value_dim_) * DTypeSize(dtype_);
    char* base = static_cast<char*>(t->data());
    std::memmove(base + to * row_bytes, base + from * row_bytes, rows * row_bytes);
  }
  if (!int8()) return;
  for (const Tensor* t : {&k_scale_, &v_scale_}) {
    float* base = static_cast<float*>(t->data());
    std::memmove(base + to, base + from, rows * sizeof(float));
  }
}

absl::Status KVCache::Append(const float* k, const float* v, int64_t ld, int64_t tokens) {
  if (value_dim_ != head_dim_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV cache Append with one row stride (%d): keys have head_dim %d and values %d; pass "
        "each its own stride (Append(k, ldk, v, ldv, tokens))",
        ld, head_dim_, value_dim_));
  }
  return Append(k, ld, v, ld, tokens);
}

absl::Status KVCache::Append(const float* k, int64_t ldk, const float* v, int64_t ldv,
                             int64_t tokens) {
  ATTNKIT_RETURN_IF_ERROR(CheckRoom(tokens));
  if (paged()) {
    ATTNKIT_ASSIGN_OR_RETURN(const std::vector<BlockTables::PageCopy> copies,
                             tables_.Grow(lengths_, tokens));
    const int64_t page_rows = page_size_ * kv_heads_;
    for (const BlockTables::PageCopy& c : copies) {
      CopyRows(c.from * page_rows, c.to * page_rows, c.rows * kv_heads_);
      // The copy's rows are new to a mirror: from the start of its page.
      int64_t& mirrored = mirrored_until_[c.seq];
      mirrored = std::min(mirrored, lengths_[c.seq] / page_size_ * page_size_);
    }
  }
  const int64_t d = head_dim_, dv = value_dim_, G = kv_heads_;
  for (int64_t b = 0; b < batch_; ++b) {
    mirrored_until_[b] = std::min(mirrored_until_[b], lengths_[b]);  // rewritten from here
    for (int64_t t = 0; t < tokens; ++t) {
      const float* k_row = k + (b * tokens + t) * ldk;
      const float* v_row = v + (b * tokens + t) * ldv;
      for (int64_t g = 0; g < G; ++g) {
        WriteRow(StorageRow(b, g, lengths_[b] + t), k_row + g * d, v_row + g * dv);
      }
    }
  }
  for (int64_t& l : lengths_) l += tokens;
  SyncLengthsTensor();
  return absl::OkStatus();
}

absl::Status KVCache::SetLengths(const std::vector<int64_t>& lengths) {
  if (static_cast<int64_t>(lengths.size()) != batch_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV cache lengths has %d entries; the cache has batch %d", lengths.size(), batch_));
  }
  for (int64_t b = 0; b < batch_; ++b) {
    if (!paged() && (lengths[b] < 0 || lengths[b] > capacity_)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("KV cache length of sequence %d (%d) must be in [0, capacity (%d)]", b,
                          lengths[b], capacity_));
    }
    if (paged() && (lengths[b] < 0 || lengths[b] > lengths_[b])) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "KV cache length of sequence %d (%d) must be in [0, its length (%d)]: a paged cache "
          "releases the pages past a new length, so it grows only by Append or Fork",
          b, lengths[b], lengths_[b]));
    }
  }
  for (int64_t b = 0; b < batch_; ++b) {
    if (paged()) tables_.Shrink(b, lengths[b]);
    lengths_[b] = lengths[b];
  }
  SyncLengthsTensor();
  return absl::OkStatus();
}

absl::Status KVCache::Fork(int64_t src, int64_t dst, int64_t tokens) {
  ATTNKIT_RETURN_IF_ERROR(CheckIndex("fork source", src, batch_));
  ATTNKIT_RETURN_IF_ERROR(CheckIndex("fork destination", dst, batch_));
  if (src == dst) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV cache fork of sequence %d onto itself; use SetLengths to cut it", src));
  }
  if (tokens < 0 || tokens > lengths_[src]) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV cache fork of %d tokens must be in [0, the source's length (%d)]",
                        tokens, lengths_[src]));
  }
  if (paged()) {
    tables_.Fork(src, dst, tokens);
    mirrored_until_[dst] = std::min(mirrored_until_[src], tokens);  // the same pages
  } else {
    for (int64_t g = 0; g < kv_heads_; ++g) {
      CopyRows(StorageRow(src, g, 0), StorageRow(dst, g, 0), tokens);
    }
    mirrored_until_[dst] = 0;
  }
  lengths_[dst] = tokens;
  SyncLengthsTensor();
  return absl::OkStatus();
}

void KVCache::Clear() { SetLengths(std::vector<int64_t>(lengths_.size(), 0)).IgnoreError(); }

void KVCache::SyncLengthsTensor() {
  for (int64_t b = 0; b < batch_; ++b) {
    static_cast<int32_t*>(lengths_i32_.data())[b] = static_cast<int32_t>(lengths_[b]);
  }
}

int64_t KVCache::max_length() const {
  return lengths_.empty() ? 0 : *std::max_element(lengths_.begin(), lengths_.end());
}

bool KVCache::uniform_lengths() const {
  return std::all_of(lengths_.begin(), lengths_.end(),
                     [&](int64_t l) { return l == lengths_.front(); });
}

TensorView KVCache::View(const Tensor& t) const {
  TensorView view = t.view();
  if (!paged() && !view.empty()) view.shape[2] = max_length();  // [B, Hkv, len(, d)]
  return view;
}

TensorView KVCache::keys() const { return View(k_); }
TensorView KVCache::values() const { return View(v_); }
TensorView KVCache::key_scales() const { return View(k_scale_); }
TensorView KVCache::value_scales() const { return View(v_scale_); }

TensorView KVCache::block_table_view(int64_t max_pages) const {
  return paged() ? tables_.view(max_pages) : TensorView();
}

int64_t KVCache::storage_rows() const {
  return paged() ? num_pages() * page_size_ * kv_heads_ : batch_ * kv_heads_ * capacity_;
}

absl::Status KVCache::ForEachUnmirroredSpan(bool all,
                                            absl::FunctionRef<absl::Status(RowSpan)> fn) const {
  for (int64_t b = 0; b < batch_; ++b) {
    const int64_t from = all ? 0 : mirrored_until_[b], to = lengths_[b];
    if (from >= to) continue;
    if (!paged()) {
      // Rows [from, to) of each (b, g) are contiguous in [B, Hkv, capacity, d].
      for (int64_t g = 0; g < kv_heads_; ++g) {
        ATTNKIT_RETURN_IF_ERROR(fn({StorageRow(b, g, from), to - from}));
      }
      continue;
    }
    // Within a page, tokens [t, end) of every KV head are one run of rows.
    for (int64_t t = from; t < to;) {
      const int64_t end = std::min(to, (t / page_size_ + 1) * page_size_);
      ATTNKIT_RETURN_IF_ERROR(fn({StorageRow(b, 0, t), (end - t) * kv_heads_}));
      t = end;
    }
  }
  return absl::OkStatus();
}

}  // namespace attnkit
