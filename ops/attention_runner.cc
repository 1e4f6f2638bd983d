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
  ATTNKIT_RETURN_IF_ERROR(Stage(11, true, &dev.k_scale));
  ATTNKIT_RETURN_IF_ERROR(Stage(12, true, &dev.v_scale));
  return RunStaged(p, host, dev, info);
}

absl::Status AttentionRunner::SyncMirror(KVCache* cache) {
  // K, V: storage_rows() rows of d (Ev) values; the scales: one f32 per row.
  const size_t row_bytes = static_cast<size_t>(cache->head_dim()) * DTypeSize(cache->dtype());
  const size_t v_row_bytes = static_cast<size_t>(cache->value_dim()) * DTypeSize(cache->dtype());
  const size_t rows = static_cast<size_t>(cache->storage_rows());
  // An id is one cache for its whole life, so it also fixes the sizes; it is
  // recorded only once every buffer exists.
  const bool fresh = mirror_.cache_id != cache->id();
  if (fresh) {
    mirror_ = Mirror{};  // free first: device memory may be tight
    ATTNKIT_ASSIGN_OR_RETURN(mirror_.k, backend_->Allocate(rows * row_bytes));
    ATTNKIT_ASSIGN_OR_RETURN(mirror_.v, backend_->Allocate(rows * v_row_bytes));
    if (cache->int8()) {
      ATTNKIT_ASSIGN_OR_RETURN(mirror_.k_scale, backend_->Allocate(rows * sizeof(float)));
      ATTNKIT_ASSIGN_OR_RETURN(mirror_.v_scale, backend_->Allocate(rows * sizeof(float)));
    }
    mirror_.cache_id = cache->id();
  }
  struct Part {
    const void* host;
    DeviceBuffer* dev;
    size_t row_bytes;
  };
  const Part parts[] = {{cache->keys().data, mirror_.k.get(), row_bytes},
                        {cache->values().data, mirror_.v.get(), v_row_bytes},
                        {cache->key_scales().data, mirror_.k_scale.get(), sizeof(float)},
                        {cache->value_scales().data, mirror_.v_scale.get(), sizeof(float)}};
  ATTNKIT_RETURN_IF_ERROR(
      cache->ForEachUnmirroredSpan(fresh, [&](KVCache::RowSpan span) -> absl::Status {
        for (const Part& part : parts) {
          if (part.dev == nullptr) continue;
          const size_t at = static_cast<size_t>(span.first) * part.row_bytes;
          const size_t bytes = static_cast<size_t>(span.count) * part.row_bytes;
          ATTNKIT_RETURN_IF_ERROR(
              backend_->UploadAt(static_cast<const char*>(part.host) + at, part.dev, at, bytes));
          uploaded_bytes_ += static_cast<int64_t>(bytes);
        }
        return absl::OkStatus();
      }));
  cache->MarkMirrored();
  return absl::OkStatus();
}

absl::Status AttentionRunner::RunWithCache(const AttentionProblem& p, const AttentionArgs& host,
                                           KVCache* cache, RunInfo* info) {
  if (backend_->UsesHostMemory()) return Run(p, host, info);
  if (host.k.data != cache->keys().data || host.v.data != cache->values().data ||
      host.k_scale.data != cache->key_scales().data ||
      host.v_scale.data != cache->value_scales().data) {
    return absl::InvalidArgumentError(
        "RunWithCache: k and v (and k_scale, v_scale) must be the cache's own views");
  }
  ATTNKIT_RETURN_IF_ERROR(CheckDenseOutputs(host));
  ATTNKIT_RETURN_IF_ERROR(SyncMirror(cache));
  AttentionArgs dev = host;  // the mirror has the cache's layout and strides
  dev.k.data = mirror_.k->data();
  dev.v.data = mirror_.v->data();
  if (cache->int8()) {
    dev.k_scale.data = mirror_.k_scale->data();
    dev.v_scale.data = mirror_.v_scale->data();
  }
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
  ATTNKIT_RETURN_IF_ERROR(Stage(8, true, &dev.block_table));
  ATTNKIT_RETURN_IF_ERROR(Stage(9, true, &dev.cu_seqlens_q));
  ATTNKIT_RETURN_IF_ERROR(Stage(10, true, &dev.cu_seqlens_k));
  ATTNKIT_RETURN_IF_ERROR(Stage(13, true, &dev.sinks));
  ATTNKIT_RETURN_IF_ERROR(Stage(14, true, &dev.alibi_slopes));
  ATTNKIT_RETURN_IF_ERROR(backend_->Forward(p, dev, info));
  ATTNKIT_RETURN_IF_ERROR(backend_->Synchronize());
  ATTNKIT_RETURN_IF_ERROR(backend_->Download(*buffers_[3], host.o.data, SpanBytes(host.o)));
  if (!host.lse.empty()) {
    ATTNKIT_RETURN_IF_ERROR(backend_->Download(*buffers_[4], host.lse.data, SpanBytes(host.lse)));
  }
  return absl::OkStatus();
}

}  // namespace attnkit
