#include "ops/attention_runner.h"

#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace attnkit {
namespace {

size_t SpanBytes(const TensorView& t) {
  return static_cast<size_t>(t.SpanElements()) * DTypeSize(t.dtype);
}

// o and lse are downloaded as whole spans: they must have no gaps.
absl::Status CheckDenseOutputs(const AttentionArgs& host) {
  for (const TensorView* out : {&host.o, &host.lse}) {
    if (!out->empty() && out->NumElements() != out->SpanElements()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "output %s has gaps in its span; a device backend needs it dense", out->DebugString()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AttentionRunner::Stage(int slot, bool upload, TensorView* view) {
  if (view->empty()) return absl::OkStatus();
  const size_t bytes = SpanBytes(*view);
  std::unique_ptr<DeviceBuffer>& buffer = buffers_[slot];
  if (buffer == nullptr || buffer->size() < bytes) {
    buffer.reset();  // free the old one first: device memory may be tight
    ATTNKIT_ASSIGN_OR_RETURN(buffer, backend_->Allocate(bytes));
  }
  if (upload) {
    ATTNKIT_RETURN_IF_ERROR(backend_->Upload(view->data, buffer.get(), bytes));
    uploaded_bytes_ += static_cast<int64_t>(bytes);
  }
  view->data = buffer->data();
  return absl::OkStatus();
}

absl::Status AttentionRunner::Run(const AttentionProblem& p, const AttentionArgs& host,
                                  RunInfo* info) {
  if (backend_->UsesHostMemory()) {
    ATTNKIT_RETURN_IF_ERROR(backend_->Forward(p, host, info));
    return backend_->Synchronize();
  }
  ATTNKIT_RETURN_IF_ERROR(CheckDenseOutputs(host));
  AttentionArgs dev = host;
  ATTNKIT_RETURN_IF_ERROR(Stage(1, true, &dev.k));
  ATTNKIT_RETURN_IF_ERROR(Stage(2, true, &dev.v));
  return RunStaged(p, host, dev, info);
}

absl::Status AttentionRunner::SyncMirror(KVCache* cache) {
  const size_t esize = DTypeSize(cache->dtype());
  const size_t row_bytes = static_cast<size_t>(cache->head_dim()) * esize;
  const size_t buffer_bytes = static_cast<size_t>(cache->bytes()) / 2;  // K or V
  // An id is one cache for its whole life, so it also fixes the size; it is
  // recorded only once both buffers exist.
  const bool fresh = mirror_.cache_id != cache->id();
  if (fresh) {
    mirror_ = Mirror{};  // free first: device memory may be tight
    ATTNKIT_ASSIGN_OR_RETURN(mirror_.k, backend_->Allocate(buffer_bytes));
    ATTNKIT_ASSIGN_OR_RETURN(mirror_.v, backend_->Allocate(buffer_bytes));
    mirror_.cache_id = cache->id();
  }
  const char* k = static_cast<const char*>(cache->keys().data);
  const char* v = static_cast<const char*>(cache->values().data);
  for (int64_t b = 0; b < cache->batch(); ++b) {
    const int64_t from = fresh ? 0 : cache->mirrored_until(b), to = cache->length(b);
    if (from >= to) continue;
    for (int64_t g = 0; g < cache->kv_heads(); ++g) {
      // Rows [from, to) of (b, g) are contiguous in the [B, Hkv, capacity, d] buffer.
      const size_t at =
          static_cast<size_t>((b * cache->kv_heads() + g) * cache->capacity() + from) * row_bytes;
      const size_t bytes = static_cast<size_t>(to - from) * row_bytes;
      ATTNKIT_RETURN_IF_ERROR(backend_->UploadAt(k + at, mirror_.k.get(), at, bytes));
      ATTNKIT_RETURN_IF_ERROR(backend_->UploadAt(v + at, mirror_.v.get(), at, bytes));
      uploaded_bytes_ += 2 * static_cast<int64_t>(bytes);
    }
  }
  cache->MarkMirrored();
  return absl::OkStatus();
}

absl::Status AttentionRunner::RunWithCache(const AttentionProblem& p, const AttentionArgs& host,
                                           KVCache* cache, RunInfo* info) {
  if (backend_->UsesHostMemory()) return Run(p, host, info);
  if (host.k.data != cache->keys().data || host.v.data != cache->values().data) {
    return absl::InvalidArgumentError("RunWithCache: k and v must be the cache's own views");
  }
  ATTNKIT_RETURN_IF_ERROR(CheckDenseOutputs(host));
  ATTNKIT_RETURN_IF_ERROR(SyncMirror(cache));
  AttentionArgs dev = host;
  dev.k.data = mirror_.k->data();  // same [B, Hkv, capacity, d] layout and strides
  dev.v.data = mirror_.v->data();
  return RunStaged(p, host, dev, info);
}

absl::Status AttentionRunner::RunStaged(const AttentionProblem& p, const AttentionArgs& host,
                                        AttentionArgs dev, RunInfo* info) {
  ATTNKIT_RETURN_IF_ERROR(Stage(0, true, &dev.q));
  ATTNKIT_RETURN_IF_ERROR(Stage(3, false, &dev.o));
  ATTNKIT_RETURN_IF_ERROR(Stage(4, false, &dev.lse));
  ATTNKIT_RETURN_IF_ERROR(Stage(5, true, &dev.kv_lengths));
  ATTNKIT_RETURN_IF_ERROR(Stage(6, true, &dev.blocked_mask));
  ATTNKIT_RETURN_IF_ERROR(Stage(7, true, &dev.bias));
  ATTNKIT_RETURN_IF_ERROR(backend_->Forward(p, dev, info));
  ATTNKIT_RETURN_IF_ERROR(backend_->Synchronize());
  ATTNKIT_RETURN_IF_ERROR(backend_->Download(*buffers_[3], host.o.data, SpanBytes(host.o)));
  if (!host.lse.empty()) {
    ATTNKIT_RETURN_IF_ERROR(backend_->Download(*buffers_[4], host.lse.data, SpanBytes(host.lse)));
  }
  return absl::OkStatus();
}

}  // namespace attnkit
