#include "core/tensor.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/checked_math.h"
#include "core/status_macros.h"

namespace attnkit {

absl::string_view LayoutName(Layout layout) { return layout == Layout::kBHTD ? "bhtd" : "bthd"; }

int64_t TensorView::NumElements() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

int64_t TensorView::SpanElements() const {
  int64_t last = 0;
  for (int i = 0; i < rank; ++i) {
    if (shape[i] == 0) return 0;
    last += (shape[i] - 1) * strides[i];
  }
  return last + 1;
}

bool TensorView::IsContiguous() const {
  int64_t expected = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

std::string TensorView::DebugString() const {
  return absl::StrFormat("%s[%s] strides [%s]", DTypeName(dtype),
                         absl::StrJoin(shape.begin(), shape.begin() + rank, ","),
                         absl::StrJoin(strides.begin(), strides.begin() + rank, ","));
}

TensorView ContiguousView(void* data, DType dtype, absl::Span<const int64_t> shape) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.rank = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int i = v.rank - 1; i >= 0; --i) {
    v.shape[i] = shape[i];
    v.strides[i] = stride;
    stride *= shape[i];
  }
  return v;
}

TensorView AttentionView(void* data, DType dtype, Layout layout, int64_t batch, int64_t heads,
                         int64_t tokens, int64_t head_dim) {
  TensorView v = ContiguousView(data, dtype, {batch, heads, tokens, head_dim});
  if (layout == Layout::kBTHD) {
    v.strides = {tokens * heads * head_dim, head_dim, heads * head_dim, 1};
  }
  return v;
}

void AlignedBuffer::Free::operator()(void* p) const { std::free(p); }

absl::StatusOr<AlignedBuffer> AlignedBuffer::Allocate(size_t bytes) {
  // Buffers of a huge page or more start on one and ask for transparent huge
  // pages (MADV_HUGEPAGE; this kernel's THP mode is often "madvise"): K/V
  // caches are read in long streams, and on 4 KiB pages the hardware
  // prefetchers stop at every page boundary and the TLB misses every 4 KiB.
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t align = bytes >= kHugePage ? kHugePage : 64;
  if (bytes > std::numeric_limits<size_t>::max() - align) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("cannot allocate %u bytes: size overflows", bytes));
  }
  const size_t rounded = (bytes + align - 1) / align * align;
  AlignedBuffer buffer;
  if (rounded == 0) return buffer;
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("cannot allocate %u bytes (%u-byte aligned)", bytes, align));
  }
  // Advice only: without THP the buffer is ordinary memory.
  if (align == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);
  std::memset(p, 0, rounded);
  buffer.data_.reset(p);
  buffer.size_ = bytes;
  return buffer;
}

absl::StatusOr<Tensor> Tensor::Contiguous(DType dtype, absl::Span<const int64_t> shape) {
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a tensor has at most %d dimensions; %d were asked for", kMaxRank, shape.size()));
  }
  int64_t elements = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError("tensor dimension must be >= 0");
    ATTNKIT_ASSIGN_OR_RETURN(elements, CheckedMul(elements, d, "tensor elements"));
  }
  // The strides multiply the inner dims even when an outer one is 0, so an
  // empty tensor can still overflow them (found by the npy fuzzer:
  // shape (0, 85899345920, 8589934592, 4)).
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 1;) {
    ATTNKIT_ASSIGN_OR_RETURN(stride, CheckedMul(stride, shape[i], "tensor strides"));
  }
  ATTNKIT_ASSIGN_OR_RETURN(
      const int64_t bytes,
      CheckedMul(elements, static_cast<int64_t>(DTypeSize(dtype)), "tensor bytes"));
  Tensor t;
  ATTNKIT_ASSIGN_OR_RETURN(t.buffer_, AlignedBuffer::Allocate(static_cast<size_t>(bytes)));
  t.view_ = ContiguousView(t.buffer_.data(), dtype, shape);
  return t;
}

absl::StatusOr<Tensor> Tensor::Attention(DType dtype, Layout layout, int64_t batch, int64_t heads,
                                         int64_t tokens, int64_t head_dim) {
  ATTNKIT_ASSIGN_OR_RETURN(Tensor t, Contiguous(dtype, {batch, heads, tokens, head_dim}));
  t.view_ = AttentionView(t.buffer_.data(), dtype, layout, batch, heads, tokens, head_dim);
  return t;
}

absl::Status Tensor::SetView(const TensorView& view) {
  const char* begin = static_cast<const char*>(buffer_.data());
  const char* start = static_cast<const char*>(view.data);
  const int64_t span_bytes = view.SpanElements() * static_cast<int64_t>(DTypeSize(view.dtype));
  if (view.dtype != view_.dtype || start < begin || start + span_bytes > begin + buffer_.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("view %s does not fit the tensor's %d-byte %s buffer", view.DebugString(),
                        buffer_.size(), DTypeName(view_.dtype)));
  }
  view_ = view;
  return absl::OkStatus();
}

void FillUniform(const TensorView& t, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  ForEachOffset(t, [&](int64_t off) { StoreFromF32(t.data, t.dtype, off, dist(rng)); });
}

}  // namespace attnkit
