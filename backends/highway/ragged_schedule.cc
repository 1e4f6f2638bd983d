// The schedule of a ragged batch (ragged_schedule.h): cost estimates,
// split-K per sequence and the work list in start order.
#include "backends/highway/ragged_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/highway/flash_params.h"
#include "backends/highway/tiling.h"

namespace attnkit {
namespace highway_plan {

RaggedSchedule PlanRagged(const FlashParams* params, size_t n, const KernelShape& k) {
  RaggedSchedule s;
  std::vector<RaggedPart>& parts = s.parts;
  parts.resize(n);
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    RaggedPart& part = parts[i];
    part.p = &params[i];
    part.t = PlanTiling(params[i], k);
    const Tiling& t = part.t;
    const double rows = static_cast<double>(
        std::min(t.heads_per_chunk * t.q_tile, params[i].group * params[i].q_len));
    part.item_cost = (rows + 8) * static_cast<double>(params[i].KvLength(0));
    total += part.item_cost * static_cast<double>(t.base_items);
  }
  const double target = total / 32;
  size_t scratch = 0, shared = 0;
  std::vector<RaggedWork>& work = s.work;
  for (size_t i = 0; i < n; ++i) {
    RaggedPart& part = parts[i];
    Tiling& t = part.t;
    const int64_t key_tiles = CeilDiv(part.p->kv_len, t.key_tile);
    const int64_t wanted =
        target > 0 ? static_cast<int64_t>(std::ceil(part.item_cost / target)) : 1;
    t.splits = std::max<int64_t>(
        1, std::min({wanted, kMinItemsBeforeSplit, std::max<int64_t>(1, key_tiles / 2)}));
    t.partial_floats = PartialFloats(t);
    part.partials_at = shared;
    shared += RoundUp(static_cast<int64_t>(t.partial_floats), kAlignFloats);
    scratch = std::max(scratch, t.scratch_floats);
    for (int64_t base = 0; base < t.base_items; ++base) {
      for (int64_t split = 0; split < t.splits; ++split) {
        work.push_back(
            {part.item_cost / static_cast<double>(t.splits), static_cast<int64_t>(i), base, split});
      }
    }
  }
  s.scratch_floats = scratch;
  s.shared_floats = shared;
  std::stable_sort(work.begin(), work.end(),
                   [](const RaggedWork& a, const RaggedWork& b) { return a.cost > b.cost; });
  for (size_t i = 0; i < n; ++i) {
    if (parts[i].t.splits == 1) continue;
    for (int64_t base = 0; base < parts[i].t.base_items; ++base) {
      s.merges.emplace_back(static_cast<int64_t>(i), base);
    }
  }
  // Report the plan of the sequence with the most work.
  for (size_t i = 1; i < n; ++i) {
    if (parts[i].item_cost * static_cast<double>(parts[i].t.base_items) >
        parts[s.busiest].item_cost * static_cast<double>(parts[s.busiest].t.base_items)) {
      s.busiest = i;
    }
  }
  return s;
}

}  // namespace highway_plan
}  // namespace attnkit
