// The schedule of a ragged batch: each sequence's tiling, split-K from the
// batch's work estimate, and the order work items start in. Plain C++,
// compiled once; it depends on the shapes only.
#ifndef ATTNKIT_BACKENDS_HIGHWAY_RAGGED_SCHEDULE_H_
#define ATTNKIT_BACKENDS_HIGHWAY_RAGGED_SCHEDULE_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "backends/highway/flash_params.h"
#include "backends/highway/tiling.h"

namespace attnkit {
namespace highway_plan {

// One sequence of a ragged batch: its problem, its plan and where its
// split-K partials live in the shared area.
struct RaggedPart {
  const FlashParams* p;
  Tiling t;
  size_t partials_at = 0;  // floats into the shared area
  double item_cost = 0;    // work estimate of one base item
};

// One unit of parallel work of a ragged batch.
struct RaggedWork {
  double cost;
  int64_t part, base, split;
};

struct RaggedSchedule {
  std::vector<RaggedPart> parts;
  std::vector<RaggedWork> work;  // in the order they start: decreasing cost
  // (part, base) of the split items, whose partials are merged afterwards.
  std::vector<std::pair<int64_t, int64_t>> merges;
  size_t scratch_floats = 0;  // per thread: the largest part's
  size_t shared_floats = 0;   // every part's split-K partials
  size_t busiest = 0;         // the part with the most work (its plan is reported)
};

// A ragged batch: every sequence's items in one parallel loop, so a long
// sequence next to many short ones does not leave threads idle. Work is
// estimated per item as (query rows + 8) x keys: visible pairs, plus a
// per-key term for the K/V bytes a decode row reads. An item whose estimate
// exceeds 1/32 of the batch's total is split over its keys (split-K, at most
// 16 ways), and items start in decreasing order of cost, each taken by the
// next free thread. The plan depends on the shapes only, so the output is
// the same bit for bit for any thread count.
RaggedSchedule PlanRagged(const FlashParams* params, size_t n, const KernelShape& k);

}  // namespace highway_plan
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_HIGHWAY_RAGGED_SCHEDULE_H_
