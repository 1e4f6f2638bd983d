#include "plugin/backend_export.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "plugin/c_abi.h"

namespace attnkit {
namespace {

attnkit_sdk::Status ToSdk(const absl::Status& s) { return StatusToSdk(s); }

// A byte range inside one of the backend's buffers, as a DeviceBuffer, so
// that an address the host computed (buffer + offset) reaches the backend's
// Upload and Download, which take buffers.
class BufferView : public DeviceBuffer {
 public:
  BufferView(void* data, size_t size) : data_(data), size_(size) {}
  void* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  void* data_;
  size_t size_;
};

class ExportedBackend : public attnkit_sdk::PluginBackend {
 public:
  explicit ExportedBackend(std::unique_ptr<attnkit::Backend> backend)
      : backend_(std::move(backend)),
        name_(backend_->Name()),
        description_(backend_->Description()),
        caps_(backend_->Caps()) {}

  const char* Name() override { return name_.c_str(); }
  const char* Description() override { return description_.c_str(); }
  void Capabilities(attnkit_caps* caps) override {
    const uint32_t size = caps->struct_size;
    *caps = CapsToC(caps_);  // head_dims points into caps_, which lives as long as this
    caps->struct_size = size;
  }

  attnkit_sdk::Status Forward(const attnkit_problem& cp, const attnkit_args& ca,
                              attnkit_run_info* info) override {
    absl::StatusOr<AttentionProblem> p = ProblemFromC(cp);
    if (!p.ok()) return ToSdk(p.status());
    absl::StatusOr<AttentionArgs> args = ArgsFromC(ca);
    if (!args.ok()) return ToSdk(args.status());
    // The host validated the tensors against the problem and asked
    // capabilities and supports() before this call (the ABI's contract), so
    // the checks are not repeated on this side.
    RunInfo run;
    const absl::Status s = backend_->ForwardChecked(*p, *args, &run);
    std::snprintf(info->kernel, sizeof(info->kernel), "%s", run.kernel.c_str());
    info->workspace_allocations = run.workspace_allocations;
    return ToSdk(s);
  }

  attnkit_sdk::Status SupportsBackward(const attnkit_problem& cp) override {
    absl::StatusOr<AttentionProblem> p = ProblemFromC(cp);
    if (!p.ok()) return ToSdk(p.status());
    return ToSdk(backend_->SupportsBackward(*p));
  }

  attnkit_sdk::Status Backward(const attnkit_problem& cp, const attnkit_args& ca,
                               const attnkit_grads& cg, attnkit_run_info* info) override {
    absl::StatusOr<AttentionProblem> p = ProblemFromC(cp);
    if (!p.ok()) return ToSdk(p.status());
    absl::StatusOr<AttentionArgs> args = ArgsFromC(ca);
    if (!args.ok()) return ToSdk(args.status());
    absl::StatusOr<GradArgs> grads = GradsFromC(cg);
    if (!grads.ok()) return ToSdk(grads.status());
    // The host validated and asked supports_backward first (the contract).
    RunInfo run;
    const absl::Status s = backend_->BackwardChecked(*p, *args, *grads, &run);
    std::snprintf(info->kernel, sizeof(info->kernel), "%s", run.kernel.c_str());
    info->workspace_allocations = run.workspace_allocations;
    return ToSdk(s);
  }

  attnkit_sdk::Status Available() override { return ToSdk(backend_->Available()); }
  attnkit_sdk::Status Supports(const attnkit_problem& cp) override {
    absl::StatusOr<AttentionProblem> p = ProblemFromC(cp);
    if (!p.ok()) return ToSdk(p.status());
    return ToSdk(backend_->Supports(*p));
  }

  bool UsesHostMemory() override { return backend_->UsesHostMemory(); }

  attnkit_sdk::Status Allocate(size_t bytes, void** data) override {
    absl::StatusOr<std::unique_ptr<DeviceBuffer>> buffer = backend_->Allocate(bytes);
    if (!buffer.ok()) return ToSdk(buffer.status());
    *data = (*buffer)->data();
    absl::MutexLock lock(&mu_);
    buffers_[reinterpret_cast<uintptr_t>(*data)] = std::move(*buffer);
    return attnkit_sdk::Status{};
  }
  void FreeBuffer(void* data) override {
    absl::MutexLock lock(&mu_);
    buffers_.erase(reinterpret_cast<uintptr_t>(data));
  }
  attnkit_sdk::Status Upload(void* dst, const void* host, size_t bytes) override {
    absl::StatusOr<BufferView> view = ViewOf(dst, bytes);
    if (!view.ok()) return ToSdk(view.status());
    return ToSdk(backend_->Upload(host, &*view, bytes));
  }
  attnkit_sdk::Status Download(const void* src, void* host, size_t bytes) override {
    absl::StatusOr<BufferView> view = ViewOf(src, bytes);
    if (!view.ok()) return ToSdk(view.status());
    return ToSdk(backend_->Download(*view, host, bytes));
  }
  attnkit_sdk::Status Synchronize() override { return ToSdk(backend_->Synchronize()); }

  attnkit_sdk::Status SetNumThreads(int n) override { return ToSdk(backend_->SetNumThreads(n)); }
  int NumThreads() override { return backend_->NumThreads(); }
  attnkit_sdk::Status SetStream(void* stream) override {
    return ToSdk(backend_->SetStream(stream));
  }

 private:
  // [address, address + bytes) inside one buffer this backend allocated.
  absl::StatusOr<BufferView> ViewOf(const void* address, size_t bytes) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(address);
    absl::MutexLock lock(&mu_);
    auto it = buffers_.upper_bound(a);
    if (it != buffers_.begin()) {
      --it;
      const uintptr_t begin = it->first;
      const size_t size = it->second->size();
      if (a >= begin && a - begin <= size && bytes <= size - (a - begin)) {
        return BufferView(const_cast<void*>(address), size - (a - begin));
      }
    }
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %u bytes at %p are not inside a buffer it allocated", name_, bytes, address));
  }

  const std::unique_ptr<attnkit::Backend> backend_;
  const std::string name_, description_;
  const attnkit::Capabilities caps_;
  absl::Mutex mu_;
  std::map<uintptr_t, std::unique_ptr<DeviceBuffer>> buffers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<attnkit_sdk::PluginBackend> ExportBackend(std::unique_ptr<Backend> backend) {
  return std::make_unique<ExportedBackend>(std::move(backend));
}

}  // namespace attnkit
