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
#include "absl/synchronization/mutex.h"
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

// The Backend memory interface over device memory and one stream per
// backend: Available() is the device probe; Allocate is cudaMalloc; Upload(At)
// and Download copy on the backend's stream and wait for it (host memory is
// pageable, and the copy must order with the kernels); Synchronize waits for
// the stream and reports kernel errors. The stream is created on first use
// (non-blocking: it does not wait for the legacy default stream) unless the
// caller set one with SetStream.
class CudaBackendBase : public Backend {
 public:
  ~CudaBackendBase() override;
  absl::Status Available() const override { return Device().available; }
  bool UsesHostMemory() const override { return false; }
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(size_t bytes) override;
  absl::Status Upload(const void* host, DeviceBuffer* dst, size_t bytes) override;
  absl::Status UploadAt(const void* host, DeviceBuffer* dst, size_t dst_offset,
                        size_t bytes) override;
  absl::Status Download(const DeviceBuffer& src, void* host, size_t bytes) override;
  absl::Status Synchronize() override;
  absl::Status SetStream(void* stream) override;

 protected:
  // The stream every launch and copy of this backend goes to: the caller's
  // (SetStream) or the backend's own, created here on first use.
  absl::StatusOr<cudaStream_t> Stream() ABSL_LOCKS_EXCLUDED(stream_mu_);

 private:
  // A host <-> device copy of `bytes` on Stream(), waited for.
  absl::Status CopyAndWait(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                           absl::string_view what);

  absl::Mutex stream_mu_;
  cudaStream_t stream_ ABSL_GUARDED_BY(stream_mu_) = nullptr;
  bool stream_chosen_ ABSL_GUARDED_BY(stream_mu_) = false;  // own created or caller's set
  bool owns_stream_ ABSL_GUARDED_BY(stream_mu_) = false;
};

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_CUDA_COMMON_H_
