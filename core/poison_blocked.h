// Puts NaN, +Inf and -Inf into the inputs a problem never reads, so a
// backend that reads them (a padded key row, a fully blocked query row, the
// bias of a blocked pair) cannot hide it: with IEEE arithmetic one such
// value spreads into the output (0 * Inf = NaN, NaN + x = NaN).
#ifndef ATTNKIT_CORE_POISON_BLOCKED_H_
#define ATTNKIT_CORE_POISON_BLOCKED_H_

#include <cstdint>

#include "core/backend.h"
#include "core/problem.h"

namespace attnkit {

// Poisons, in host tensors filled for `p` (mask already drawn):
//   k, v [B, G, Tk, d]: rows j that no query of any head of kv head g sees;
//   q [B, H, Tq, d]:    rows i that see no key at all;
//   bias [B, H, Tq, Tk]: every blocked pair.
// Which of NaN, +Inf, -Inf goes where is drawn from `seed`.
void PoisonBlockedInputs(const AttentionProblem& p, const AttentionArgs& a, uint64_t seed);

}  // namespace attnkit

#endif  // ATTNKIT_CORE_POISON_BLOCKED_H_
