// isa_report: which instruction sets a test run exercises. Prints the CPU
// model, its SIMD extensions (from /proc/cpuinfo), the Highway targets
// compiled into attnkit, those this CPU supports under any
// $ATTNKIT_HWY_TARGET cap, and the one HWY_DYNAMIC_DISPATCH picks. .ci/run
// prints it above each suite so a CI log says which code paths ran.
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/highway/sdpa.h"
#include "harness/machine_kernels.h"
#include "hwy/targets.h"
#include "platform/hwy_target_cap.h"
#include "platform/machine_info.h"

namespace {

// The SIMD-relevant flags present, in a fixed order from oldest to newest.
std::string SimdFlags(const std::string& flags) {
  std::set<std::string> have;
  std::istringstream words(flags);
  for (std::string w; words >> w;) have.insert(w);
  static const char* const kOrder[] = {
      "sse4_2",      "avx",        "avx2",         "fma",           "f16c",
      "avx512f",     "avx512dq",   "avx512cd",     "avx512bw",      "avx512vl",
      "avx512_vnni", "avx512vbmi", "avx512_vbmi2", "avx512_bitalg", "avx512_vpopcntdq",
      "avx512ifma",  "vaes",       "vpclmulqdq",   "gfni",          "avx512_bf16",
      "avx512_fp16", "amx_tile",   "amx_bf16",     "amx_int8",      "avx_vnni"};
  std::string out;
  for (const char* f : kOrder) {
    if (have.count(f) != 0) out += (out.empty() ? "" : " ") + std::string(f);
  }
  return out.empty() ? "(unknown)" : out;
}

}  // namespace

int main() {
  const std::string model = attnkit::CpuInfoField("model name");
  // Virtual machines often hide the marketing name; family/model still tell.
  std::printf("cpu:      %s (%s family %s model %s)\n", model.empty() ? "(unknown)" : model.c_str(),
              attnkit::CpuInfoField("vendor_id").c_str(),
              attnkit::CpuInfoField("cpu family").c_str(), attnkit::CpuInfoField("model").c_str());
  std::printf("simd:     %s\n", SimdFlags(attnkit::CpuInfoField("flags")).c_str());
  std::printf("highway:  compiled %s\n", attnkit::HighwayTargetNames(HWY_TARGETS).c_str());
  absl::StatusOr<int64_t> cap = attnkit::CapHighwayTargetsFromEnv();
  if (!cap.ok()) {
    std::printf("highway:  cap rejected: %s\n", cap.status().ToString().c_str());
    return 1;
  }
  if (*cap != 0) {
    std::printf("highway:  capped at %s by ATTNKIT_HWY_TARGET\n", hwy::TargetName(*cap));
  }
  // Listing the targets asks Highway for the supported set, which in 1.0.3
  // would lift the cap for dispatch (see SupportedHighwayTargets); the
  // dispatched line below is a real HWY_DYNAMIC_DISPATCH made after it.
  const std::vector<int64_t> available = attnkit::AvailableFlashTargets();
  int64_t mask = 0;
  for (int64_t t : available) mask |= t;
  std::printf("highway:  runs here %s\n", attnkit::HighwayTargetNames(mask).c_str());
  std::printf("highway:  dispatched %s\n", attnkit::DispatchedHighwayTarget().c_str());
  return 0;
}
