// What both CUDA backends share: CUDA errors as absl::Status, the device
// check behind Available(), device memory, and a grow-only workspace.
#ifndef ATTNKIT_BACKENDS_CUDA_CUDA_COMMON_H_
#define ATTNKIT_BACKENDS_CUDA_CUDA_COMMON_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/backend.h"

namespace attnkit {
namespace cuda {

// OK for cudaSuccess; otherwise Internal (FailedPrecondition for a missing or
// too old driver or device, ResourceExhausted for out of memory) with
// "<what>: <CUDA's text> (<error name>)".
absl::Status CudaStatus(cudaError_t error, absl::string_view what);

// The device the backends run on (device 0), probed once per process.
struct DeviceInfo {
  absl::Status available;  // why the backends cannot run, or OK
  std::string name;
  int major = 0, minor = 0;
  int num_sms = 0;
};
const DeviceInfo& Device();

// Device memory from cudaMalloc, freed with cudaFree.
class CudaBuffer : public DeviceBuffer {
 public:
  static absl::StatusOr<std::unique_ptr<CudaBuffer>> Allocate(size_t bytes);
  ~CudaBuffer() override;
  void* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  CudaBuffer(void* data, size_t size) : data_(data), size_(size) {}
  void* data_;
  size_t size_;
};

// Scratch device memory that only grows, so steady-state calls allocate
// nothing. Not thread-safe; the owning backend serialises its calls.
class Workspace {
 public:
  // A buffer of at least `bytes`, valid until the next call.
  absl::StatusOr<void*> Get(size_t bytes);
  // cudaMalloc calls made so far (each growth is one).
  int64_t allocations() const { return allocations_; }

 private:
  std::unique_ptr<CudaBuffer> buffer_;
  int64_t allocations_ = 0;
};

// The Backend memory interface over device memory and the default stream:
// Available() is the device probe; Allocate/Upload(At)/Download use cudaMalloc
// and cudaMemcpy; Synchronize waits for the stream and reports kernel errors.
class CudaBackendBase : public Backend {
 public:
  absl::Status Available() const override { return Device().available; }
  bool UsesHostMemory() const override { return false; }
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(size_t bytes) override;
  absl::Status Upload(const void* host, DeviceBuffer* dst, size_t bytes) override;
  absl::Status UploadAt(const void* host, DeviceBuffer* dst, size_t dst_offset,
                        size_t bytes) override;
  absl::Status Download(const DeviceBuffer& src, void* host, size_t bytes) override;
  absl::Status Synchronize() override;

 protected:
  static constexpr cudaStream_t kStream = nullptr;  // the legacy default stream
};

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_CUDA_COMMON_H_
