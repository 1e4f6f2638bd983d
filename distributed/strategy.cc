#include "distributed/strategy.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace attnkit {
namespace dist {

absl::string_view StrategyName(Strategy s) {
  switch (s) {
    case Strategy::kRing:
      return "ring";
    case Strategy::kUlysses:
      return "ulysses";
    case Strategy::kAuto:
      return "auto";
  }
  return "unknown";
}

absl::StatusOr<Strategy> ParseStrategy(absl::string_view name) {
  for (Strategy s : {Strategy::kRing, Strategy::kUlysses, Strategy::kAuto}) {
    if (name == StrategyName(s)) return s;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("strategy (", name, ") must be ring, ulysses or auto"));
}

}  // namespace dist
}  // namespace attnkit
