#include "backends/cuda/cuda_common.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace attnkit {
namespace cuda {
namespace {

DeviceTable Probe() {
  DeviceTable table;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    table.probe = CudaStatus(e, "no usable CUDA device");
    return table;
  }
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    DeviceInfo info;
    info.ordinal = ordinal;
    cudaDeviceProp prop;
    info.usable = CudaStatus(cudaGetDeviceProperties(&prop, ordinal),
                             absl::StrFormat("cudaGetDeviceProperties(%d)", ordinal));
    if (info.usable.ok()) {
      info.name = prop.name;
      info.major = prop.major;
      info.minor = prop.minor;
      info.num_sms = prop.multiProcessorCount;
      info.usable = CheckComputeCapability(info);
    }
    table.devices.push_back(std::move(info));
  }
  return table;
}

}  // namespace

absl::Status CudaStatus(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  // Clear a non-sticky error so that the next call does not report it again.
  cudaGetLastError();
  const std::string message =
      absl::StrFormat("%s: %s (%s)", what, cudaGetErrorString(error), cudaGetErrorName(error));
  switch (error) {
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return absl::FailedPreconditionError(message);
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

const DeviceTable& Devices() {
  static const DeviceTable* table = new DeviceTable(Probe());
  return *table;
}

absl::StatusOr<const DeviceInfo*> CurrentDevice() {
  const DeviceTable& table = Devices();
  ATTNKIT_RETURN_IF_ERROR(table.probe);
  int current = 0;
  if (!table.devices.empty()) {
    ATTNKIT_RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&current), "cudaGetDevice"));
  }
  ATTNKIT_RETURN_IF_ERROR(CheckCurrentDevice(table, current));
  return &table.devices[current];
}

absl::StatusOr<std::unique_ptr<CudaBuffer>> CudaBuffer::Allocate(size_t bytes) {
  ATTNKIT_RETURN_IF_ERROR(CurrentDevice().status());
  // Never a null pointer: an empty view means "absent" to ValidateArgs.
  const size_t rounded = bytes == 0 ? 256 : (bytes + 255) / 256 * 256;
  void* data = nullptr;
  ATTNKIT_RETURN_IF_ERROR(
      CudaStatus(cudaMalloc(&data, rounded), absl::StrFormat("cudaMalloc(%u bytes)", rounded)));
  return std::unique_ptr<CudaBuffer>(new CudaBuffer(data, bytes));
}

CudaBuffer::~CudaBuffer() { cudaFree(data_); }

absl::StatusOr<void*> Workspace::Get(size_t bytes) {
  if (buffer_ == nullptr || buffer_->size() < bytes) {
    // Free first, so old and new need not fit together; cudaFree waits for
    // the device, so no queued kernel still reads the old buffer.
    buffer_.reset();
    ATTNKIT_ASSIGN_OR_RETURN(buffer_, CudaBuffer::Allocate(bytes));
    ++allocations_;
  }
  return buffer_->data();
}

absl::Status CudaBackendBase::Available() const { return CurrentDevice().status(); }

absl::StatusOr<std::unique_ptr<DeviceBuffer>> CudaBackendBase::Allocate(size_t bytes) {
  ATTNKIT_ASSIGN_OR_RETURN(std::unique_ptr<CudaBuffer> buffer, CudaBuffer::Allocate(bytes));
  return std::unique_ptr<DeviceBuffer>(std::move(buffer));
}

CudaBackendBase::~CudaBackendBase() {
  absl::MutexLock lock(&stream_mu_);
  // Pending work still completes; the stream's and the event's resources go
  // after it.
  if (owns_stream_) cudaStreamDestroy(stream_);
  if (switch_event_ != nullptr) cudaEventDestroy(switch_event_);
}

absl::StatusOr<cudaStream_t> CudaBackendBase::StreamLocked() {
  ATTNKIT_RETURN_IF_ERROR(CurrentDevice().status());
  if (!stream_chosen_) {
    cudaStream_t created = nullptr;
    ATTNKIT_RETURN_IF_ERROR(
        CudaStatus(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking), "cudaStreamCreate"));
    stream_ = created;
    owns_stream_ = stream_chosen_ = true;
  }
  return stream_;
}

absl::StatusOr<cudaStream_t> CudaBackendBase::Stream() {
  absl::MutexLock lock(&stream_mu_);
  return StreamLocked();
}

absl::StatusOr<cudaStream_t> CudaBackendBase::ScratchStream() {
  absl::MutexLock lock(&stream_mu_);
  ATTNKIT_ASSIGN_OR_RETURN(const cudaStream_t stream, StreamLocked());
  if (order_.WaitBeforeUse(stream)) {
    // The scratch was last used on another stream, which recorded the event
    // when SetStream left it: this stream's next kernels wait for it.
    ATTNKIT_RETURN_IF_ERROR(
        CudaStatus(cudaStreamWaitEvent(stream, switch_event_, 0), "cudaStreamWaitEvent"));
  }
  return stream;
}

absl::Status CudaBackendBase::SetStream(void* stream) {
  ATTNKIT_RETURN_IF_ERROR(CurrentDevice().status());
  absl::MutexLock call_lock(&call_mu_);
  absl::MutexLock lock(&stream_mu_);
  const cudaStream_t next = static_cast<cudaStream_t>(stream);
  if (stream_chosen_ && stream_ == next) return absl::OkStatus();
  if (owns_stream_) {
    // Work already queued on our own stream finishes before the caller's
    // stream takes over, so results are never read early.
    ATTNKIT_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "kernel execution"));
    order_.Finished(stream_, order_.uses());
    cudaStreamDestroy(stream_);
    owns_stream_ = false;
  } else if (stream_chosen_ && order_.RecordOnSwitch(stream_, next)) {
    if (switch_event_ == nullptr) {
      ATTNKIT_RETURN_IF_ERROR(CudaStatus(
          cudaEventCreateWithFlags(&switch_event_, cudaEventDisableTiming), "cudaEventCreate"));
    }
    ATTNKIT_RETURN_IF_ERROR(
        CudaStatus(cudaEventRecord(switch_event_, stream_), "cudaEventRecord on the old stream"));
    order_.Recorded();
  }
  stream_ = next;
  stream_chosen_ = true;
  return absl::OkStatus();
}

absl::Status CudaBackendBase::CopyAndWait(void* dst, const void* src, size_t bytes,
                                          cudaMemcpyKind kind, absl::string_view what) {
  if (bytes == 0) return absl::OkStatus();
  ATTNKIT_ASSIGN_OR_RETURN(const cudaStream_t stream, Stream());
  ATTNKIT_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(dst, src, bytes, kind, stream), what));
  return CudaStatus(cudaStreamSynchronize(stream), what);
}

absl::Status CudaBackendBase::Upload(const void* host, DeviceBuffer* dst, size_t bytes) {
  if (bytes > dst->size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("upload of %u bytes into a buffer of %u bytes", bytes, dst->size()));
  }
  return CopyAndWait(dst->data(), host, bytes, cudaMemcpyHostToDevice, "upload");
}

absl::Status CudaBackendBase::UploadAt(const void* host, DeviceBuffer* dst, size_t dst_offset,
                                       size_t bytes) {
  ATTNKIT_RETURN_IF_ERROR(CheckUploadRange(*dst, dst_offset, bytes));
  return CopyAndWait(static_cast<char*>(dst->data()) + dst_offset, host, bytes,
                     cudaMemcpyHostToDevice, "upload");
}

absl::Status CudaBackendBase::Download(const DeviceBuffer& src, void* host, size_t bytes) {
  if (bytes > src.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("download of %u bytes from a buffer of %u bytes", bytes, src.size()));
  }
  return CopyAndWait(host, src.data(), bytes, cudaMemcpyDeviceToHost, "download");
}

absl::Status CudaBackendBase::Synchronize() {
  cudaStream_t stream = nullptr;
  long long uses = 0;
  {
    absl::MutexLock lock(&stream_mu_);
    ATTNKIT_ASSIGN_OR_RETURN(stream, StreamLocked());
    uses = order_.uses();
  }
  ATTNKIT_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "kernel execution"));
  absl::MutexLock lock(&stream_mu_);
  order_.Finished(stream, uses);
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace attnkit
