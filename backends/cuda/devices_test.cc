// Which device a call runs on and what the backends say when it cannot, from
// device tables as cuda_common.cc fills them: every device counts, not only
// device 0 (issue 33), and a shared-memory opt-in is kept per device.
#include "backends/cuda/devices.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "backends/cuda/per_device.h"
#include "gtest/gtest.h"

namespace attnkit {
namespace cuda {
namespace {

DeviceInfo Make(int ordinal, const std::string& name, int major, int minor, int sms) {
  DeviceInfo d;
  d.ordinal = ordinal;
  d.name = name;
  d.major = major;
  d.minor = minor;
  d.num_sms = sms;
  d.usable = CheckComputeCapability(d);
  return d;
}

TEST(DevicesTest, ComputeCapabilityBelowEightIsRefusedWithTheDevicesName) {
  EXPECT_TRUE(CheckComputeCapability(Make(0, "NVIDIA H200", 9, 0, 132)).ok());
  EXPECT_TRUE(CheckComputeCapability(Make(0, "NVIDIA A100", 8, 0, 108)).ok());
  const absl::Status old = CheckComputeCapability(Make(2, "Tesla V100", 7, 0, 80));
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(old.message(),
            "device 2 (Tesla V100) has compute capability 7.0; this build targets sm_80 and newer");
}

TEST(DevicesTest, ProbeErrorsAndNoDevice) {
  DeviceTable none;
  EXPECT_EQ(CheckCurrentDevice(none, 0).message(), "no CUDA device is present");
  DeviceTable failed;
  failed.probe = absl::FailedPreconditionError("no usable CUDA device: driver too old");
  EXPECT_EQ(CheckCurrentDevice(failed, 0), failed.probe);
  EXPECT_EQ(DescribeDevices(failed), "no usable CUDA device: driver too old");
}

// The device the call is on decides, whichever its ordinal: device 0 being
// old no longer hides a usable device 1, and device 0 being usable no longer
// vouches for an old device 1.
TEST(DevicesTest, TheCurrentDeviceDecides) {
  DeviceTable t;
  t.devices = {Make(0, "Tesla V100", 7, 0, 80), Make(1, "NVIDIA H200", 9, 0, 132)};
  EXPECT_TRUE(CheckCurrentDevice(t, 1).ok());
  const absl::Status on_old = CheckCurrentDevice(t, 0);
  EXPECT_EQ(on_old.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StartsWith(on_old.message(), "device 0 (Tesla V100) has compute capability"))
      << on_old;
  EXPECT_TRUE(absl::StrContains(on_old.message(), "usable: device 1 (NVIDIA H200)")) << on_old;

  DeviceTable reversed;
  reversed.devices = {Make(0, "NVIDIA H200", 9, 0, 132), Make(1, "Tesla V100", 7, 0, 80)};
  EXPECT_TRUE(CheckCurrentDevice(reversed, 0).ok());
  EXPECT_FALSE(CheckCurrentDevice(reversed, 1).ok());
  EXPECT_FALSE(CheckCurrentDevice(reversed, 2).ok());  // not probed

  DeviceTable all_old;
  all_old.devices = {Make(0, "Tesla V100", 7, 0, 80), Make(1, "Tesla T4", 7, 5, 40)};
  EXPECT_TRUE(
      absl::EndsWith(CheckCurrentDevice(all_old, 1).message(), "; no other device is usable"));
}

TEST(DevicesTest, DescribeNamesEveryDevice) {
  DeviceTable t;
  t.devices = {Make(0, "NVIDIA H200", 9, 0, 132), Make(1, "Tesla V100", 7, 0, 80)};
  const std::string text = DescribeDevices(t);
  EXPECT_TRUE(absl::StrContains(text, "device 0: NVIDIA H200 (sm_90, 132 SMs)")) << text;
  EXPECT_TRUE(absl::StrContains(text, "device 1: Tesla V100 (sm_70, 80 SMs) unusable:")) << text;
}

// The shared-memory opt-in: once per device (the old process-wide static
// ran it on the first device only), its result kept, failures included.
TEST(PerDeviceOnceTest, OncePerDeviceAndResultKept) {
  PerDeviceOnce once;
  std::vector<int> calls(4, 0);
  auto opt_in = [&](int device, int result) {
    return once.Get(device, [&] {
      ++calls[device];
      return result;
    });
  };
  EXPECT_EQ(opt_in(0, 0), 0);
  EXPECT_EQ(opt_in(0, 7), 0);  // cached: not called again
  EXPECT_EQ(opt_in(1, 0), 0);  // a second device gets its own call
  EXPECT_EQ(opt_in(3, 98), 98);
  EXPECT_EQ(opt_in(3, 0), 98);  // a failure is kept and reported again
  EXPECT_EQ(calls, (std::vector<int>{1, 1, 0, 1}));
  int beyond = 0;
  for (int i = 0; i < 2; ++i) once.Get(PerDeviceOnce::kMaxDevices, [&] { return ++beyond; });
  EXPECT_EQ(beyond, 2);  // past the table: computed every time, never wrong
}

}  // namespace
}  // namespace cuda
}  // namespace attnkit
