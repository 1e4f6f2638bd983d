#include "backends/cuda/devices.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace attnkit {
namespace cuda {
namespace {

std::string Label(const DeviceInfo& d) {
  return absl::StrFormat("device %d (%s)", d.ordinal, d.name);
}

}  // namespace

absl::Status CheckComputeCapability(const DeviceInfo& d) {
  if (d.major >= kMinMajor) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrFormat("%s has compute capability %d.%d; this build targets sm_80 and newer",
                      Label(d), d.major, d.minor));
}

absl::Status CheckCurrentDevice(const DeviceTable& table, int current) {
  if (!table.probe.ok()) return table.probe;
  if (table.devices.empty()) return absl::FailedPreconditionError("no CUDA device is present");
  if (current < 0 || current >= static_cast<int>(table.devices.size())) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the current CUDA device is %d, but only %d were probed", current, table.devices.size()));
  }
  const DeviceInfo& d = table.devices[current];
  if (d.usable.ok()) return absl::OkStatus();
  std::vector<std::string> usable;
  for (const DeviceInfo& other : table.devices) {
    if (other.usable.ok()) usable.push_back(Label(other));
  }
  std::string message(d.usable.message());
  if (usable.empty()) {
    absl::StrAppend(&message, table.devices.size() > 1 ? "; no other device is usable" : "");
  } else {
    absl::StrAppend(&message, "; usable: ", absl::StrJoin(usable, ", "),
                    " (make one current, e.g. torch.cuda.set_device, or list it first in "
                    "CUDA_VISIBLE_DEVICES)");
  }
  return absl::Status(d.usable.code(), message);
}

std::string DescribeDevices(const DeviceTable& table) {
  if (!table.probe.ok()) return std::string(table.probe.message());
  if (table.devices.empty()) return "no CUDA device is present";
  std::vector<std::string> parts;
  for (const DeviceInfo& d : table.devices) {
    std::string part = absl::StrFormat("device %d: %s (sm_%d%d, %d SMs)", d.ordinal, d.name,
                                       d.major, d.minor, d.num_sms);
    if (!d.usable.ok()) absl::StrAppend(&part, " unusable: ", d.usable.message());
    parts.push_back(std::move(part));
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace cuda
}  // namespace attnkit
