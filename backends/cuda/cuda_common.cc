#include "backends/cuda/cuda_common.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace attnkit {
namespace cuda {
namespace {

// The oldest architecture with machine code in the plugin (sm_80); newer
// majors run it or JIT the compute_90 PTX.
constexpr int kMinMajor = 8;

DeviceInfo Probe() {
  DeviceInfo info;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    info.available = CudaStatus(e, "no usable CUDA device");
    return info;
  }
  if (count == 0) {
    info.available = absl::FailedPreconditionError("no CUDA device is present");
    return info;
  }
  cudaDeviceProp prop;
  info.available = CudaStatus(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  if (!info.available.ok()) return info;
  info.name = prop.name;
  info.major = prop.major;
  info.minor = prop.minor;
  info.num_sms = prop.multiProcessorCount;
  if (prop.major < kMinMajor) {
    info.available = absl::FailedPreconditionError(
        absl::StrFormat("%s has compute capability %d.%d; this build targets sm_80 and newer",
                        prop.name, prop.major, prop.minor));
  }
  return info;
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

const DeviceInfo& Device() {
  static const DeviceInfo* info = new DeviceInfo(Probe());
  return *info;
}

absl::StatusOr<std::unique_ptr<CudaBuffer>> CudaBuffer::Allocate(size_t bytes) {
  ATTNKIT_RETURN_IF_ERROR(Device().available);
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
    buffer_.reset();  // free first, so old and new need not fit together
    ATTNKIT_ASSIGN_OR_RETURN(buffer_, CudaBuffer::Allocate(bytes));
    ++allocations_;
  }
  return buffer_->data();
}

absl::StatusOr<std::unique_ptr<DeviceBuffer>> CudaBackendBase::Allocate(size_t bytes) {
  ATTNKIT_ASSIGN_OR_RETURN(std::unique_ptr<CudaBuffer> buffer, CudaBuffer::Allocate(bytes));
  return std::unique_ptr<DeviceBuffer>(std::move(buffer));
}

CudaBackendBase::~CudaBackendBase() {
  absl::MutexLock lock(&stream_mu_);
  // Pending work still completes; the stream's resources go after it.
  if (owns_stream_) cudaStreamDestroy(stream_);
}

absl::StatusOr<cudaStream_t> CudaBackendBase::Stream() {
  ATTNKIT_RETURN_IF_ERROR(Device().available);
  absl::MutexLock lock(&stream_mu_);
  if (!stream_chosen_) {
    cudaStream_t created = nullptr;
    ATTNKIT_RETURN_IF_ERROR(
        CudaStatus(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking), "cudaStreamCreate"));
    stream_ = created;
    owns_stream_ = stream_chosen_ = true;
  }
  return stream_;
}

absl::Status CudaBackendBase::SetStream(void* stream) {
  ATTNKIT_RETURN_IF_ERROR(Device().available);
  absl::MutexLock lock(&stream_mu_);
  if (owns_stream_) {
    // Work already queued on our own stream finishes before the caller's
    // stream takes over, so results are never read early.
    ATTNKIT_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "kernel execution"));
    cudaStreamDestroy(stream_);
    owns_stream_ = false;
  }
  stream_ = static_cast<cudaStream_t>(stream);
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
  ATTNKIT_ASSIGN_OR_RETURN(const cudaStream_t stream, Stream());
  return CudaStatus(cudaStreamSynchronize(stream), "kernel execution");
}

}  // namespace cuda
}  // namespace attnkit
