#include "ops/attention_runner.h"

#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace attnkit {
namespace {

size_t SpanBytes(const TensorView& t) {
  return static_cast<size_t>(t.SpanElements()) * DTypeSize(t.dtype);
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
  if (upload) ATTNKIT_RETURN_IF_ERROR(backend_->Upload(view->data, buffer.get(), bytes));
  view->data = buffer->data();
  return absl::OkStatus();
}

absl::Status AttentionRunner::Run(const AttentionProblem& p, const AttentionArgs& host,
                                  RunInfo* info) {
  if (backend_->UsesHostMemory()) {
    ATTNKIT_RETURN_IF_ERROR(backend_->Forward(p, host, info));
    return backend_->Synchronize();
  }
  for (const TensorView* out : {&host.o, &host.lse}) {
    if (!out->empty() && out->NumElements() != out->SpanElements()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "output %s has gaps in its span; a device backend needs it dense", out->DebugString()));
    }
  }
  AttentionArgs dev = host;
  ATTNKIT_RETURN_IF_ERROR(Stage(0, true, &dev.q));
  ATTNKIT_RETURN_IF_ERROR(Stage(1, true, &dev.k));
  ATTNKIT_RETURN_IF_ERROR(Stage(2, true, &dev.v));
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
