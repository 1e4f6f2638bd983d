#include "plugin/plugin_table_backend.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "plugin/c_abi.h"

namespace attnkit {
namespace {

// Room for a plugin's error message; longer ones are truncated by the plugin.
constexpr size_t kErrorBytes = 2048;

// The fields every ABI-1 table has, up to and including its last required
// member: a shorter table cannot be a plugin's.
constexpr size_t kMinPluginSize = offsetof(attnkit_plugin, create_backend) + sizeof(void*);
constexpr size_t kMinOpsSize = offsetof(attnkit_backend_ops, forward) + sizeof(void*);

// A plugin call's code and message as a Status.
class ErrorBuffer {
 public:
  ErrorBuffer() { text_[0] = '\0'; }
  char* data() { return text_; }
  size_t size() const { return sizeof(text_); }
  absl::Status Status(int32_t code) {
    text_[sizeof(text_) - 1] = '\0';
    if (code != ATTNKIT_OK && text_[0] == '\0') {
      std::snprintf(text_, sizeof(text_), "plugin error %d without a message", code);
    }
    return StatusFromC(code, text_);
  }

 private:
  char text_[kErrorBytes];
};

class PluginTableBackend;

// Device memory a plugin allocated, returned to it through free_buffer.
class PluginTableBuffer : public DeviceBuffer {
 public:
  PluginTableBuffer(void* self, void (*free_buffer)(void*, void*), void* data, size_t size)
      : self_(self), free_buffer_(free_buffer), data_(data), size_(size) {}
  ~PluginTableBuffer() override { free_buffer_(self_, data_); }
  void* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  void* self_;
  void (*free_buffer_)(void*, void*);
  void* data_;
  size_t size_;
};

class PluginTableBackend : public Backend {
 public:
  // `ops` is copied as far as its struct_size reaches; later fields are null.
  PluginTableBackend(void* self, const attnkit_backend_ops& ops) : self_(self) {
    std::memset(&ops_, 0, sizeof(ops_));
    std::memcpy(&ops_, &ops, std::min<size_t>(ops.struct_size, sizeof(ops_)));
    const char* name = ops_.name(self_);
    const char* description = ops_.description(self_);
    name_ = name != nullptr ? name : "";
    description_ = description != nullptr ? description : "";
    attnkit_caps caps;
    std::memset(&caps, 0, sizeof(caps));
    caps.struct_size = sizeof(caps);
    ops_.capabilities(self_, &caps);
    caps_ = CapsFromC(caps);
    device_memory_ = ops_.uses_host_memory != nullptr && ops_.uses_host_memory(self_) == 0;
  }
  ~PluginTableBackend() override { ops_.destroy(self_); }

  std::string Name() const override { return name_; }
  std::string Description() const override { return description_; }
  Capabilities Caps() const override { return caps_; }

  absl::Status Available() const override {
    if (ops_.available == nullptr) return absl::OkStatus();
    ErrorBuffer err;
    return err.Status(ops_.available(self_, err.data(), err.size()));
  }

  absl::Status Supports(const AttentionProblem& p) const override {
    ATTNKIT_RETURN_IF_ERROR(Available());
    ATTNKIT_RETURN_IF_ERROR(CheckCapabilities(caps_, p));
    if (ops_.supports == nullptr) return absl::OkStatus();
    const attnkit_problem c = ProblemToC(p);
    ErrorBuffer err;
    return err.Status(ops_.supports(self_, &c, err.data(), err.size()));
  }

  absl::Status SupportsBackward(const AttentionProblem& p) const override {
    ATTNKIT_RETURN_IF_ERROR(Available());
    ATTNKIT_RETURN_IF_ERROR(CheckBackwardCapabilities(caps_, p));
    if (ops_.backward == nullptr) {
      return absl::UnimplementedError(
          absl::StrCat(name_, " reports backward support but provides no backward function"));
    }
    if (ops_.supports_backward == nullptr) return absl::OkStatus();
    const attnkit_problem c = ProblemToC(p);
    ErrorBuffer err;
    return err.Status(ops_.supports_backward(self_, &c, err.data(), err.size()));
  }

  bool UsesHostMemory() const override { return !device_memory_; }

  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(size_t bytes) override {
    if (!device_memory_) return Backend::Allocate(bytes);
    ATTNKIT_RETURN_IF_ERROR(RequireDeviceOps());
    void* data = nullptr;
    ErrorBuffer err;
    ATTNKIT_RETURN_IF_ERROR(err.Status(ops_.allocate(self_, bytes, &data, err.data(), err.size())));
    return std::unique_ptr<DeviceBuffer>(
        new PluginTableBuffer(self_, ops_.free_buffer, data, bytes));
  }

  absl::Status Upload(const void* host, DeviceBuffer* dst, size_t bytes) override {
    if (!device_memory_) return Backend::Upload(host, dst, bytes);
    return UploadAt(host, dst, 0, bytes);
  }

  absl::Status UploadAt(const void* host, DeviceBuffer* dst, size_t dst_offset,
                        size_t bytes) override {
    if (!device_memory_) return Backend::UploadAt(host, dst, dst_offset, bytes);
    ATTNKIT_RETURN_IF_ERROR(CheckUploadRange(*dst, dst_offset, bytes));
    ATTNKIT_RETURN_IF_ERROR(RequireDeviceOps());
    ErrorBuffer err;
    return err.Status(ops_.upload(self_, static_cast<char*>(dst->data()) + dst_offset, host, bytes,
                                  err.data(), err.size()));
  }

  absl::Status Download(const DeviceBuffer& src, void* host, size_t bytes) override {
    if (!device_memory_) return Backend::Download(src, host, bytes);
    if (bytes > src.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("download of %u bytes from a buffer of %u bytes", bytes, src.size()));
    }
    ATTNKIT_RETURN_IF_ERROR(RequireDeviceOps());
    ErrorBuffer err;
    return err.Status(ops_.download(self_, src.data(), host, bytes, err.data(), err.size()));
  }

  absl::Status Synchronize() override {
    if (ops_.synchronize == nullptr) return absl::OkStatus();
    ErrorBuffer err;
    return err.Status(ops_.synchronize(self_, err.data(), err.size()));
  }

  absl::Status SetStream(void* stream) override {
    if (ops_.set_stream == nullptr) {
      return absl::UnimplementedError(
          absl::StrCat(name_, " does not provide set_stream (an older or host-only plugin)"));
    }
    ErrorBuffer err;
    return err.Status(ops_.set_stream(self_, stream, err.data(), err.size()));
  }

  absl::Status SetNumThreads(int n) override {
    if (ops_.set_num_threads == nullptr) return absl::OkStatus();
    ErrorBuffer err;
    return err.Status(ops_.set_num_threads(self_, n, err.data(), err.size()));
  }

  int NumThreads() const override {
    return ops_.num_threads == nullptr ? 1 : ops_.num_threads(self_);
  }

 protected:
  absl::Status ForwardImpl(const AttentionProblem& p, const AttentionArgs& args,
                           RunInfo* info) override {
    const attnkit_problem cp = ProblemToC(p);
    const attnkit_args ca = ArgsToC(args);
    attnkit_run_info run;
    std::memset(&run, 0, sizeof(run));
    run.struct_size = sizeof(run);
    run.workspace_allocations = -1;
    ErrorBuffer err;
    const absl::Status s = err.Status(ops_.forward(self_, &cp, &ca, &run, err.data(), err.size()));
    run.kernel[sizeof(run.kernel) - 1] = '\0';
    info->kernel = run.kernel;
    info->workspace_allocations = run.workspace_allocations;
    return s;
  }

  absl::Status BackwardImpl(const AttentionProblem& p, const AttentionArgs& args,
                            const GradArgs& grads, RunInfo* info) override {
    if (ops_.backward == nullptr) return Backend::BackwardImpl(p, args, grads, info);
    const attnkit_problem cp = ProblemToC(p);
    const attnkit_args ca = ArgsToC(args);
    const attnkit_grads cg = GradsToC(grads);
    attnkit_run_info run;
    std::memset(&run, 0, sizeof(run));
    run.struct_size = sizeof(run);
    run.workspace_allocations = -1;
    ErrorBuffer err;
    const absl::Status s =
        err.Status(ops_.backward(self_, &cp, &ca, &cg, &run, err.data(), err.size()));
    run.kernel[sizeof(run.kernel) - 1] = '\0';
    info->kernel = run.kernel;
    info->workspace_allocations = run.workspace_allocations;
    return s;
  }

 private:
  // A device-memory backend must provide the four memory functions.
  absl::Status RequireDeviceOps() const {
    if (ops_.allocate != nullptr && ops_.free_buffer != nullptr && ops_.upload != nullptr &&
        ops_.download != nullptr) {
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(absl::StrCat(
        name_, " uses device memory but lacks allocate, free_buffer, upload or download"));
  }

  void* const self_;
  attnkit_backend_ops ops_;
  std::string name_, description_;
  Capabilities caps_;
  bool device_memory_ = false;
};

}  // namespace

absl::Status CheckPluginTable(const attnkit_plugin* plugin, const std::string& origin) {
  if (plugin == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("plugin ", origin, ": ", ATTNKIT_PLUGIN_ENTRY_SYMBOL, " returned null"));
  }
  if (plugin->struct_size < kMinPluginSize) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "plugin %s: its table is %u bytes, shorter than the %u bytes every plugin ABI %u table "
        "has; not an attnkit plugin, or a corrupt one",
        origin, plugin->struct_size, kMinPluginSize, ATTNKIT_PLUGIN_ABI_VERSION));
  }
  const std::string name = plugin->name != nullptr ? plugin->name : "(unnamed)";
  if (plugin->abi_version != ATTNKIT_PLUGIN_ABI_VERSION) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "plugin %s (%s): built for plugin ABI %u; this attnkit loads ABI %u; rebuild the plugin "
        "with this attnkit's include/attnkit/plugin.h",
        origin, name, plugin->abi_version, ATTNKIT_PLUGIN_ABI_VERSION));
  }
  if (plugin->create_backend == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrFormat("plugin %s (%s): create_backend is null", origin, name));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Backend>> CreatePluginBackend(const attnkit_plugin& plugin,
                                                             uint32_t index,
                                                             const std::string& origin) {
  const std::string name = plugin.name != nullptr ? plugin.name : "(unnamed)";
  void* self = nullptr;
  const attnkit_backend_ops* ops = nullptr;
  ErrorBuffer err;
  const absl::Status created =
      err.Status(plugin.create_backend(index, &self, &ops, err.data(), err.size()));
  if (!created.ok()) {
    return absl::Status(created.code(), absl::StrFormat("plugin %s (%s): creating backend %u: %s",
                                                        origin, name, index, created.message()));
  }
  if (self == nullptr || ops == nullptr) {
    return absl::InternalError(
        absl::StrFormat("plugin %s (%s): creating backend %u returned no instance or no table",
                        origin, name, index));
  }
  if (ops->struct_size < kMinOpsSize || ops->destroy == nullptr || ops->name == nullptr ||
      ops->description == nullptr || ops->capabilities == nullptr || ops->forward == nullptr) {
    const std::string why =
        ops->struct_size < kMinOpsSize
            ? absl::StrFormat(
                  "its function table is %u bytes, shorter than the %u bytes of the "
                  "required functions",
                  ops->struct_size, kMinOpsSize)
            : "a required function (destroy, name, description, capabilities, forward) is null";
    // The instance cannot be destroyed without destroy; leak it rather than
    // call into a table we do not trust.
    if (ops->struct_size >= kMinOpsSize && ops->destroy != nullptr) ops->destroy(self);
    return absl::FailedPreconditionError(
        absl::StrFormat("plugin %s (%s): backend %u: %s", origin, name, index, why));
  }
  return std::unique_ptr<Backend>(new PluginTableBackend(self, *ops));
}

std::unique_ptr<Backend> AdoptSdkBackend(std::unique_ptr<attnkit_sdk::PluginBackend> backend) {
  return std::make_unique<PluginTableBackend>(backend.release(), *attnkit_sdk::internal::Ops());
}

}  // namespace attnkit
