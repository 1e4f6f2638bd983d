#include "harness/execute.h"

#include <limits>
#include <utility>

#include "core/status_macros.h"

namespace attnkit {
namespace {

size_t SpanBytes(const TensorView& t) {
  return static_cast<size_t>(t.SpanElements()) * DTypeSize(t.dtype);
}

}  // namespace

absl::StatusOr<PlacedProblem> PlacedProblem::Place(Backend* backend, const ProblemData& host) {
  PlacedProblem placed;
  placed.backend_ = backend;
  placed.args_ = host.args();
  if (backend->UsesHostMemory()) return placed;
  TensorView* views[] = {&placed.args_.q,
                         &placed.args_.k,
                         &placed.args_.v,
                         &placed.args_.o,
                         &placed.args_.lse,
                         &placed.args_.kv_lengths,
                         &placed.args_.blocked_mask,
                         &placed.args_.bias,
                         &placed.args_.k_scale,
                         &placed.args_.v_scale,
                         &placed.args_.block_table,
                         &placed.args_.cu_seqlens_q,
                         &placed.args_.cu_seqlens_k,
                         &placed.args_.sinks,
                         &placed.args_.alibi_slopes};
  for (TensorView* view : views) {
    if (view->empty()) continue;
    const size_t bytes = SpanBytes(*view);
    ATTNKIT_ASSIGN_OR_RETURN(std::unique_ptr<DeviceBuffer> buffer, backend->Allocate(bytes));
    ATTNKIT_RETURN_IF_ERROR(backend->Upload(view->data, buffer.get(), bytes));
    view->data = buffer->data();
    if (view == &placed.args_.o) placed.o_buffer_ = buffer.get();
    if (view == &placed.args_.lse) placed.lse_buffer_ = buffer.get();
    placed.buffers_.push_back(std::move(buffer));
  }
  return placed;
}

absl::Status PlacedProblem::Forward(const AttentionProblem& p, RunInfo* info) {
  return backend_->Forward(p, args_, info);
}

absl::Status PlacedProblem::DownloadOutputs(const ProblemData& host) {
  ATTNKIT_RETURN_IF_ERROR(backend_->Synchronize());
  if (backend_->UsesHostMemory()) return absl::OkStatus();
  ATTNKIT_RETURN_IF_ERROR(backend_->Download(*o_buffer_, host.o.data(), SpanBytes(host.o.view())));
  if (lse_buffer_ != nullptr) {
    ATTNKIT_RETURN_IF_ERROR(
        backend_->Download(*lse_buffer_, host.lse.data(), SpanBytes(host.lse.view())));
  }
  return absl::OkStatus();
}

absl::Status RunOnBackend(Backend* backend, const AttentionProblem& p, const ProblemData& host,
                          RunInfo* info) {
  ATTNKIT_ASSIGN_OR_RETURN(PlacedProblem placed, PlacedProblem::Place(backend, host));
  ATTNKIT_RETURN_IF_ERROR(placed.Forward(p, info));
  return placed.DownloadOutputs(host);
}

absl::Status RunBackwardOnBackend(Backend* backend, const AttentionProblem& p,
                                  const ProblemData& host, const GradData& grads, RunInfo* info) {
  ATTNKIT_ASSIGN_OR_RETURN(PlacedProblem placed, PlacedProblem::Place(backend, host));
  GradArgs args = grads.args();
  if (backend->UsesHostMemory()) {
    ATTNKIT_RETURN_IF_ERROR(backend->Backward(p, placed.args(), args, info));
    return backend->Synchronize();
  }
  // Device copies of d_o and of the gradient buffers (uploaded as they are:
  // poison included); `outputs` pairs each gradient's buffer with its host
  // tensor for the download.
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<std::pair<const DeviceBuffer*, const Tensor*>> outputs;
  const std::pair<TensorView*, const Tensor*> views[] = {
      {&args.d_o, &grads.d_o}, {&args.dq, &grads.dq},       {&args.dk, &grads.dk},
      {&args.dv, &grads.dv},   {&args.dbias, &grads.dbias}, {&args.dsinks, &grads.dsinks}};
  for (const auto& [view, tensor] : views) {
    if (view->empty()) continue;
    const size_t bytes = SpanBytes(*view);
    ATTNKIT_ASSIGN_OR_RETURN(std::unique_ptr<DeviceBuffer> buffer, backend->Allocate(bytes));
    ATTNKIT_RETURN_IF_ERROR(backend->Upload(view->data, buffer.get(), bytes));
    view->data = buffer->data();
    if (view != &args.d_o) outputs.emplace_back(buffer.get(), tensor);
    buffers.push_back(std::move(buffer));
  }
  ATTNKIT_RETURN_IF_ERROR(backend->Backward(p, placed.args(), args, info));
  ATTNKIT_RETURN_IF_ERROR(backend->Synchronize());
  for (const auto& [buffer, tensor] : outputs) {
    ATTNKIT_RETURN_IF_ERROR(backend->Download(*buffer, tensor->data(), SpanBytes(tensor->view())));
  }
  return absl::OkStatus();
}

void FillGradients(const GradData& grads, float value) {
  for (const Tensor* t : {&grads.dq, &grads.dk, &grads.dv, &grads.dbias, &grads.dsinks}) {
    if (t->view().empty()) continue;
    ForEachOffset(t->view(),
                  [&](int64_t off) { StoreFromF32(t->data(), t->view().dtype, off, value); });
  }
}

void PoisonGradients(const GradData& grads) {
  FillGradients(grads, std::numeric_limits<float>::quiet_NaN());
}

void FillOutputs(const ProblemData& data, float value) {
  for (const Tensor* t : {&data.o, &data.lse}) {
    if (t->view().empty()) continue;
    ForEachOffset(t->view(),
                  [&](int64_t off) { StoreFromF32(t->data(), t->view().dtype, off, value); });
  }
}

void PoisonOutputs(const ProblemData& data) {
  FillOutputs(data, std::numeric_limits<float>::quiet_NaN());
}

}  // namespace attnkit
