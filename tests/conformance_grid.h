// The problem grid of the conformance suite: sizes, head dims, GQA ratios,
// masks, alignments, padding, dense masks, bias, softcap, LSE, layouts and
// dtypes, chosen so every feature meets odd and tiny shapes; then a serving
// family: paged K/V (page sizes 16 to 256, shared pages), ragged batches
// (prefill chunks mixed with decodes, sequences without queries or keys)
// and int8 K/V (dense, paged, ragged); then NaN and Inf inputs; last, FAST
// twins (compute FAST, the same inputs) of problems with 16-bit or int8 K/V.
#ifndef ATTNKIT_TESTS_CONFORMANCE_GRID_H_
#define ATTNKIT_TESTS_CONFORMANCE_GRID_H_

#include <vector>

#include "core/problem.h"

namespace attnkit {

// Every problem is valid and has a unique Id(); its seed is set.
std::vector<AttentionProblem> ConformanceGrid();

}  // namespace attnkit

#endif  // ATTNKIT_TESTS_CONFORMANCE_GRID_H_
