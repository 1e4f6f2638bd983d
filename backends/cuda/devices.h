// The CUDA devices of the machine as the backends see them, and which one a
// call runs on: plain C++ (no CUDA types), so the choice and its messages are
// tested without a GPU (devices_test). cuda_common.cc fills it from the
// runtime once per process.
#ifndef ATTNKIT_BACKENDS_CUDA_DEVICES_H_
#define ATTNKIT_BACKENDS_CUDA_DEVICES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace attnkit {
namespace cuda {

// The oldest architecture with machine code in the plugin (sm_80); newer
// majors run it or JIT the compute_90 PTX.
inline constexpr int kMinMajor = 8;

// One device as cudaGetDeviceProperties describes it.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int major = 0, minor = 0;
  int num_sms = 0;
  absl::Status usable;  // OK, or why the backends cannot run on it
};

// Every device, probed once: `probe` is OK unless the runtime could not
// count them (no driver, too old a driver); `devices` is in CUDA's order.
struct DeviceTable {
  absl::Status probe;
  std::vector<DeviceInfo> devices;
};

// OK for compute capability >= kMinMajor.0, else FailedPrecondition naming
// the device and its capability.
absl::Status CheckComputeCapability(const DeviceInfo& d);

// The device a call on `current` (cudaGetDevice of the calling thread: 0
// unless the caller, e.g. PyTorch, chose another) runs on, or why none can:
// the probe's error, "no CUDA device is present", or the current device's
// reason followed by the devices that are usable and how to select one.
// The backends never switch the caller's device themselves.
absl::Status CheckCurrentDevice(const DeviceTable& table, int current);

// "device 0: NVIDIA H200 (sm_90, 132 SMs); device 1: ... (unusable: ...)".
std::string DescribeDevices(const DeviceTable& table);

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_DEVICES_H_
