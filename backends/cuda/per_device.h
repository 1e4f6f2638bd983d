// A value computed once per CUDA device ordinal: a kernel's shared-memory
// opt-in (cudaFuncSetAttribute applies to the current device only, so a
// process-wide "once" leaves every other device at the 48 KiB default).
// Plain C++, shared by host code and the .cu launchers; per_device_test.
#ifndef ATTNKIT_BACKENDS_CUDA_PER_DEVICE_H_
#define ATTNKIT_BACKENDS_CUDA_PER_DEVICE_H_

#include <atomic>
#include <climits>

namespace attnkit {
namespace cuda {

class PerDeviceOnce {
 public:
  // Devices with a cached value; a larger ordinal computes every time.
  static constexpr int kMaxDevices = 64;

  PerDeviceOnce() {
    for (std::atomic<int>& v : values_) v.store(kUnset, std::memory_order_relaxed);
  }

  // fn() the first time for `device`, its result after that. Two threads
  // that race on a new device may both call fn (which must be idempotent,
  // as cudaFuncSetAttribute is); every caller gets fn's result.
  template <class Fn>
  int Get(int device, Fn&& fn) {
    if (device < 0 || device >= kMaxDevices) return fn();
    std::atomic<int>& slot = values_[device];
    int v = slot.load(std::memory_order_acquire);
    if (v != kUnset) return v;
    v = fn();
    slot.store(v, std::memory_order_release);
    return v;
  }

 private:
  static constexpr int kUnset = INT_MIN;
  std::atomic<int> values_[kMaxDevices];
};

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_PER_DEVICE_H_
