#include "platform/hwy_target_cap.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "hwy/targets.h"

namespace attnkit {

absl::StatusOr<int64_t> HighwayTargetByName(const std::string& name) {
  std::string upper;
  for (char c : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::string known;
  for (int bit = 0; bit < 63; ++bit) {
    const int64_t target = int64_t{1} << bit;
    const std::string target_name = hwy::TargetName(target);
    if (target_name == "Unknown") continue;
    if (upper == target_name) return target;
    absl::StrAppend(&known, known.empty() ? "" : ", ", target_name);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "ATTNKIT_HWY_TARGET ('", name, "') is not a Highway target name; known: ", known));
}

void CapHighwayTargets(int64_t target) {
  // target - 1 has exactly the bits below target's, i.e. the better targets.
  hwy::DisableTargets(target - 1);
}

absl::StatusOr<int64_t> CapHighwayTargetsFromEnv() {
  const char* env = std::getenv("ATTNKIT_HWY_TARGET");
  if (env == nullptr || *env == '\0') return 0;
  absl::StatusOr<int64_t> target = HighwayTargetByName(env);
  if (!target.ok()) return target.status();
  CapHighwayTargets(*target);
  return *target;
}

int64_t SupportedHighwayTargets() {
  const int64_t targets = hwy::SupportedTargets();
  hwy::GetChosenTarget().Update(targets);
  return targets;
}

std::vector<int64_t> HighwayTargetList(int64_t targets) {
  std::vector<int64_t> list;
  for (; targets != 0; targets &= targets - 1) list.push_back(targets & -targets);
  return list;
}

std::string HighwayTargetNames(int64_t targets) {
  std::string names;
  for (int64_t t : HighwayTargetList(targets)) {
    absl::StrAppend(&names, names.empty() ? "" : " ", hwy::TargetName(t));
  }
  return names;
}

namespace {

// Before main, so that gtest's per-target instantiation (evaluated in
// InitGoogleTest) and the first dispatch both see the cap. A bad value is
// reported here; the highway backend also reports it as unavailable.
const bool kCapApplied = [] {
  absl::StatusOr<int64_t> applied = CapHighwayTargetsFromEnv();
  if (!applied.ok()) std::fprintf(stderr, "attnkit: %s\n", applied.status().ToString().c_str());
  return applied.ok();
}();

}  // namespace
}  // namespace attnkit
