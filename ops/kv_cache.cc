#include "ops/kv_cache.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace attnkit {

int64_t KVCache::BytesFor(int64_t batch, int64_t kv_heads, int64_t capacity, int64_t head_dim,
                          DType dtype) {
  return 2 * batch * kv_heads * capacity * head_dim * static_cast<int64_t>(DTypeSize(dtype));
}

absl::StatusOr<KVCache> KVCache::Create(int64_t batch, int64_t kv_heads, int64_t capacity,
                                        int64_t head_dim, DType dtype) {
  const struct {
    const char* name;
    int64_t value;
  } dims[] = {
      {"batch", batch}, {"kv_heads", kv_heads}, {"capacity", capacity}, {"head_dim", head_dim}};
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
  if (!IsFloatStorage(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV cache dtype %s must be f32, f16 or bf16", DTypeName(dtype)));
  }
  KVCache cache;
  cache.batch_ = batch;
  cache.kv_heads_ = kv_heads;
  cache.capacity_ = capacity;
  cache.head_dim_ = head_dim;
  cache.dtype_ = dtype;
  ATTNKIT_ASSIGN_OR_RETURN(cache.k_,
                           Tensor::Contiguous(dtype, {batch, kv_heads, capacity, head_dim}));
  ATTNKIT_ASSIGN_OR_RETURN(cache.v_,
                           Tensor::Contiguous(dtype, {batch, kv_heads, capacity, head_dim}));
  ATTNKIT_ASSIGN_OR_RETURN(cache.lengths_i32_, Tensor::Contiguous(DType::kI32, {batch}));
  cache.lengths_.assign(static_cast<size_t>(batch), 0);
  cache.mirrored_until_.assign(static_cast<size_t>(batch), 0);
  static std::atomic<uint64_t> next_id{1};
  cache.id_ = next_id.fetch_add(1);
  return cache;
}

absl::Status KVCache::Append(const float* k, const float* v, int64_t ld, int64_t tokens) {
  if (tokens < 0) {
    return absl::InvalidArgumentError(absl::StrFormat("append of %d tokens", tokens));
  }
  for (int64_t b = 0; b < batch_; ++b) {
    if (lengths_[b] + tokens > capacity_) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "KV cache full: appending %d tokens to sequence %d at length %d exceeds the "
          "capacity (%d); nothing was written",
          tokens, b, lengths_[b], capacity_));
    }
  }
  const int64_t d = head_dim_, cap = capacity_, G = kv_heads_;
  for (int64_t b = 0; b < batch_; ++b) {
    mirrored_until_[b] = std::min(mirrored_until_[b], lengths_[b]);  // rewritten from here
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t row = (b * tokens + t) * ld;
      const int64_t pos = lengths_[b] + t;
      for (int64_t g = 0; g < G; ++g) {
        const int64_t dst = ((b * G + g) * cap + pos) * d;
        if (dtype_ == DType::kF32) {
          std::memcpy(static_cast<float*>(k_.data()) + dst, k + row + g * d, d * sizeof(float));
          std::memcpy(static_cast<float*>(v_.data()) + dst, v + row + g * d, d * sizeof(float));
        } else {
          for (int64_t c = 0; c < d; ++c) {
            StoreFromF32(k_.data(), dtype_, dst + c, k[row + g * d + c]);
            StoreFromF32(v_.data(), dtype_, dst + c, v[row + g * d + c]);
          }
        }
      }
    }
  }
  for (int64_t b = 0; b < batch_; ++b) {
    lengths_[b] += tokens;
    static_cast<int32_t*>(lengths_i32_.data())[b] = static_cast<int32_t>(lengths_[b]);
  }
  return absl::OkStatus();
}

absl::Status KVCache::SetLengths(const std::vector<int64_t>& lengths) {
  if (static_cast<int64_t>(lengths.size()) != batch_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV cache lengths has %d entries; the cache has batch %d", lengths.size(), batch_));
  }
  for (int64_t b = 0; b < batch_; ++b) {
    if (lengths[b] < 0 || lengths[b] > capacity_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("KV cache length of sequence %d (%d) must be in [0, capacity (%d)]", b,
                          lengths[b], capacity_));
    }
  }
  for (int64_t b = 0; b < batch_; ++b) {
    lengths_[b] = lengths[b];
    static_cast<int32_t*>(lengths_i32_.data())[b] = static_cast<int32_t>(lengths[b]);
  }
  return absl::OkStatus();
}

void KVCache::Clear() { SetLengths(std::vector<int64_t>(lengths_.size(), 0)).IgnoreError(); }

int64_t KVCache::max_length() const {
  return lengths_.empty() ? 0 : *std::max_element(lengths_.begin(), lengths_.end());
}

bool KVCache::uniform_lengths() const {
  return std::all_of(lengths_.begin(), lengths_.end(),
                     [&](int64_t l) { return l == lengths_.front(); });
}

TensorView KVCache::View(const Tensor& t) const {
  TensorView view = t.view();
  view.shape[2] = max_length();
  return view;
}

TensorView KVCache::keys() const { return View(k_); }
TensorView KVCache::values() const { return View(v_); }

}  // namespace attnkit
