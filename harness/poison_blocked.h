// Puts NaN, +Inf and -Inf into inputs. Into the ones a problem never reads,
// so a backend that reads them (a padded key row, a fully blocked query row,
// the bias of a blocked pair) cannot hide it: with IEEE arithmetic one such
// value spreads into the output (0 * Inf = NaN, NaN + x = NaN). Or anywhere,
// to check that exactly the rows that read one come out NaN.
#ifndef ATTNKIT_HARNESS_POISON_BLOCKED_H_
#define ATTNKIT_HARNESS_POISON_BLOCKED_H_

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

// Sets `count` elements, drawn from `seed` uniformly over Q, K, V and (with
// p.additive_bias) the bias, to NaN, +Inf or -Inf, whether the problem reads
// them or not: the rows that read one must give NaN, the others must not
// change (oracle/reference.h); a -inf bias blocks its pair.
void PoisonRandomInputs(const AttentionProblem& p, const AttentionArgs& a, int64_t count,
                        uint64_t seed);

}  // namespace attnkit

#endif  // ATTNKIT_HARNESS_POISON_BLOCKED_H_
