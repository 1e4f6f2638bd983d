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
#include "backends/cuda/devices.h"
#include "backends/cuda/stream_order.h"
#include "core/backend.h"

namespace attnkit {
namespace cuda {

// OK for cudaSuccess; otherwise Internal (FailedPrecondition for a missing or
// too old driver or device, ResourceExhausted for out of memory) with
// "<what>: <CUDA's text> (<error name>)".
absl::Status CudaStatus(cudaError_t error, absl::string_view what);

// Every CUDA device, probed once per process (devices.h).
const DeviceTable& Devices();

// The device of the calling thread (cudaGetDevice: the caller's choice, 0 by
// default), which the backends run on, or why they cannot run there.
absl::StatusOr<const DeviceInfo*> CurrentDevice();

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
// backend: Available() is the current device's check; Allocate is cudaMalloc;
// Upload(At) and Download copy on the backend's stream and wait for it (host
// memory is pageable, and the copy must order with the kernels); Synchronize
// waits for the stream and reports kernel errors. The stream is created on
// first use (non-blocking: it does not wait for the legacy default stream)
// unless the caller set one with SetStream. The backend's scratch memory is
// ordered across stream changes (stream_order.h): SetStream records an event
// on the stream it leaves, and a call on another stream waits for it on the
// device (ScratchStream).
class CudaBackendBase : public Backend {
 public:
  ~CudaBackendBase() override;
  absl::Status Available() const override;
  bool UsesHostMemory() const override { return false; }
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(size_t bytes) override;
  absl::Status Upload(const void* host, DeviceBuffer* dst, size_t bytes) override;
  absl::Status UploadAt(const void* host, DeviceBuffer* dst, size_t dst_offset,
                        size_t bytes) override;
  absl::Status Download(const DeviceBuffer& src, void* host, size_t bytes) override;
  absl::Status Synchronize() override;
  absl::Status SetStream(void* stream) override;

 protected:
  // The stream of a Forward or Backward that uses the backend's scratch
  // memory, after making it wait (on the device) for the calls a previous
  // stream may still be running on that memory. Held for the whole call, so
  // that SetStream cannot change streams between this and the launches.
  absl::StatusOr<cudaStream_t> ScratchStream() ABSL_EXCLUSIVE_LOCKS_REQUIRED(call_mu_)
      ABSL_LOCKS_EXCLUDED(stream_mu_);

  // Serialises the calls that use the scratch memory, and SetStream.
  absl::Mutex call_mu_ ABSL_ACQUIRED_BEFORE(stream_mu_);

 private:
  // The stream every launch and copy of this backend goes to: the caller's
  // (SetStream) or the backend's own, created here on first use.
  absl::StatusOr<cudaStream_t> StreamLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(stream_mu_);
  absl::StatusOr<cudaStream_t> Stream() ABSL_LOCKS_EXCLUDED(stream_mu_);
  // A host <-> device copy of `bytes` on Stream(), waited for.
  absl::Status CopyAndWait(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                           absl::string_view what);

  absl::Mutex stream_mu_;
  cudaStream_t stream_ ABSL_GUARDED_BY(stream_mu_) = nullptr;
  bool stream_chosen_ ABSL_GUARDED_BY(stream_mu_) = false;  // own created or caller's set
  bool owns_stream_ ABSL_GUARDED_BY(stream_mu_) = false;
  ScratchOrder order_ ABSL_GUARDED_BY(stream_mu_);
  cudaEvent_t switch_event_ ABSL_GUARDED_BY(stream_mu_) = nullptr;  // created on first switch
};

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_CUDA_COMMON_H_
