// The two ways distributed attention splits the work over ranks.
//   ring:    sequence-sharded; K/V blocks travel around a ring of ranks while
//            each computes its queries against the block it holds, and the
//            partial outputs merge exactly through their log-sum-exp (Ring
//            Attention, Liu et al. 2023).
//   ulysses: an all-to-all reshards Q, K, V from sequence to heads, each rank
//            runs whole-sequence attention on H/N heads, and a second
//            all-to-all brings O back (DeepSpeed-Ulysses, Jacobs et al. 2023).
//   auto:    the cost model (distributed/cost_model.h) picks one.
#ifndef ATTNKIT_DISTRIBUTED_STRATEGY_H_
#define ATTNKIT_DISTRIBUTED_STRATEGY_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attnkit {
namespace dist {

enum class Strategy { kRing, kUlysses, kAuto };

absl::string_view StrategyName(Strategy s);  // "ring", "ulysses", "auto"
// InvalidArgument "strategy (x) must be ring, ulysses or auto".
absl::StatusOr<Strategy> ParseStrategy(absl::string_view name);

}  // namespace dist
}  // namespace attnkit

#endif  // ATTNKIT_DISTRIBUTED_STRATEGY_H_
