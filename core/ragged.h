// A ragged (variable-length) batch as its sequences: each one a batch-1
// problem whose tensors are views into the packed ones, so a backend can run
// each sequence with its dense code (or plan one work list over all of them)
// and the reference and the oracle check it row by row.
#ifndef ATTNKIT_CORE_RAGGED_H_
#define ATTNKIT_CORE_RAGGED_H_

#include <cstdint>
#include <vector>

#include "core/backend.h"
#include "core/problem.h"

namespace attnkit {

struct SequenceCall {
  int64_t index = 0;         // b, the sequence in the batch
  int64_t q_offset = 0;      // its first row in the packed Q and O (cu_seqlens_q[b])
  AttentionProblem problem;  // batch 1, q_len = q_lengths[b], BTHD views
  AttentionArgs args;
};

// The sequences of a ragged problem that have queries (q_lengths[b] > 0), in
// batch order. Sequence b's problem has q_len = q_lengths[b] and kv_len =
// kv_lengths[b] (a sequence with no keys: kv_len 1 and kv_lengths {0}, so
// its rows are fully blocked); paged K/V stay paged, with block table row b.
// Offsets come from the problem's lengths, which ValidateHostIndexTensors
// has checked against cu_seqlens. `p` must be ragged and `a` valid for it.
std::vector<SequenceCall> RaggedSequences(const AttentionProblem& p, const AttentionArgs& a);

}  // namespace attnkit

#endif  // ATTNKIT_CORE_RAGGED_H_
