// Strided tensor views (no ownership) and 64-byte aligned owning buffers.
//
// Attention tensors are rank 4 with logical dims [B, heads, T, d] whatever the
// memory order: the canonical layout (BHTD) has strides [H*T*d, T*d, d, 1], and
// the token-major layout (BTHD) is the same logical view with strides
// [T*H*d, d, H*d, 1], so it needs no copy.
#ifndef ATTNKIT_CORE_TENSOR_H_
#define ATTNKIT_CORE_TENSOR_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/dtype.h"

namespace attnkit {

constexpr int kMaxRank = 4;

// Memory order of a [B, heads, T, d] tensor.
enum class Layout { kBHTD, kBTHD };
absl::string_view LayoutName(Layout layout);

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};  // in elements; 0 broadcasts

  bool empty() const { return data == nullptr; }
  int64_t dim(int i) const { return shape[i]; }
  int64_t NumElements() const;
  // Element offset of a full index (missing trailing indices are 0).
  int64_t Offset(int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) const {
    return i0 * strides[0] + i1 * strides[1] + i2 * strides[2] + i3 * strides[3];
  }
  // 1 + the largest offset any element reaches (0 for an empty tensor): the
  // number of elements the underlying storage must hold.
  int64_t SpanElements() const;
  // True when the elements are dense in row-major (C) order.
  bool IsContiguous() const;
  float LoadF32(int64_t offset) const { return LoadAsF32(data, dtype, offset); }
  std::string DebugString() const;  // "f32[2,4,7,64] strides [..]"
};

// Calls fn(offset) for every element of `t` in row-major index order.
// An empty tensor returns at once, whatever its other dims (found by
// //tests/fuzz:npy_fuzz_test: shape (2^62, 0) looped 2^62 times).
template <typename Fn>
void ForEachOffset(const TensorView& t, Fn fn) {
  std::array<int64_t, kMaxRank> shape{1, 1, 1, 1}, strides{0, 0, 0, 0};
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] <= 0) return;
    shape[kMaxRank - t.rank + i] = t.shape[i];
    strides[kMaxRank - t.rank + i] = t.strides[i];
  }
  for (int64_t a = 0; a < shape[0]; ++a)
    for (int64_t b = 0; b < shape[1]; ++b)
      for (int64_t c = 0; c < shape[2]; ++c)
        for (int64_t d = 0; d < shape[3]; ++d)
          fn(a * strides[0] + b * strides[1] + c * strides[2] + d * strides[3]);
}

// A view with the given shape over `data`, contiguous in row-major order.
TensorView ContiguousView(void* data, DType dtype, absl::Span<const int64_t> shape);
// A [B, heads, T, d] view over `data` stored in `layout`.
TensorView AttentionView(void* data, DType dtype, Layout layout, int64_t batch, int64_t heads,
                         int64_t tokens, int64_t head_dim);

// Heap memory aligned to 64 bytes (one cache line, one AVX-512 vector).
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Allocates `bytes` (zero-filled); ResourceExhausted when allocation fails.
  static absl::StatusOr<AlignedBuffer> Allocate(size_t bytes);
  void* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> data_;
  size_t size_ = 0;
};

// An owning tensor: an aligned buffer and a view of it.
class Tensor {
 public:
  Tensor() = default;
  static absl::StatusOr<Tensor> Contiguous(DType dtype, absl::Span<const int64_t> shape);
  static absl::StatusOr<Tensor> Attention(DType dtype, Layout layout, int64_t batch, int64_t heads,
                                          int64_t tokens, int64_t head_dim);
  const TensorView& view() const { return view_; }
  void* data() const { return view_.data; }
  // Replaces the view (e.g. broadcast strides over the same storage);
  // InvalidArgument when it would reach outside the buffer or change dtype.
  absl::Status SetView(const TensorView& view);

 private:
  AlignedBuffer buffer_;
  TensorView view_;
};

// Fills a float-storage tensor with uniform values in [lo, hi], rounded to
// its dtype, drawing from a generator seeded with `seed` (random inputs of
// check and the tests, the layers' initial weights).
void FillUniform(const TensorView& t, uint64_t seed, float lo, float hi);

}  // namespace attnkit

#endif  // ATTNKIT_CORE_TENSOR_H_
