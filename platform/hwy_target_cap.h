// A process-wide ceiling on Highway's run-time dispatch. With
// ATTNKIT_HWY_TARGET=AVX2 every HWY_DYNAMIC_DISPATCH in the process (both CPU
// backends' kernels) and every per-target test (hwy::TestWithParamTarget)
// stops at AVX2, so a whole run can be held to 256-bit vectors on an
// AVX-512 machine. The use-after-return ASan pass needs exactly that: its
// fake stack frames are 32-byte aligned, and 512-bit spills are not.
#ifndef ATTNKIT_PLATFORM_HWY_TARGET_CAP_H_
#define ATTNKIT_PLATFORM_HWY_TARGET_CAP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace attnkit {

// The Highway target bit named `name` (case-insensitive, as hwy::TargetName
// spells it: "AVX3_DL", "AVX2", "SCALAR", ...), compiled here or not.
absl::StatusOr<int64_t> HighwayTargetByName(const std::string& name);

// Disables every target better than `target` for the rest of the process
// (hwy::DisableTargets: lower bits are better targets).
void CapHighwayTargets(int64_t target);

// Applies $ATTNKIT_HWY_TARGET when it is set and names a target. Returns the
// target applied, 0 when the variable is unset or empty, or an error naming
// the value. Run once at start-up by this library's static initializer.
absl::StatusOr<int64_t> CapHighwayTargetsFromEnv();

// hwy::SupportedTargets() (under the cap and any test mock), with dispatch
// made to agree with it. Highway 1.0.3's SupportedTargets() re-detects the
// CPU and, as a side effect, points HWY_DYNAMIC_DISPATCH at the *uncapped*
// set until the next DisableTargets; one call (a backend listing its targets)
// would silently lift the cap. Call this instead of hwy::SupportedTargets()
// and hwy::SupportedAndGeneratedTargets() everywhere in attnkit.
int64_t SupportedHighwayTargets();

// The set bits of `targets`, one target each, best (lowest bit) first.
std::vector<int64_t> HighwayTargetList(int64_t targets);

// "AVX3_DL AVX3 AVX2 SSE4 SCALAR": the names of the set bits of `targets`,
// best first.
std::string HighwayTargetNames(int64_t targets);

}  // namespace attnkit

#endif  // ATTNKIT_PLATFORM_HWY_TARGET_CAP_H_
