// The grid problem of the planted-bug tests (tests/oracle_test.cc for the
// forward's oracle, tests/grad_oracle_test.cc for the gradients'): GQA 4/2,
// a bottom-right sliding window narrower than Tk, softcap 4, an additive
// bias and the LSE, so that every planted bug changes the answer.
#ifndef ATTNKIT_TESTS_ORACLE_GRID_H_
#define ATTNKIT_TESTS_ORACLE_GRID_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/problem.h"
#include "harness/problem_data.h"

namespace attnkit {

// q_len queries over tk keys of head dim d; named "q<dtype>_kv<dtype>_d<d>_tk<tk>".
AttentionProblem OracleGridProblem(DType q_dtype, DType kv_dtype, int64_t d, int64_t tk,
                                   int64_t q_len);

// Random inputs from `seed` with Q scaled by 6, so scores spread over about
// +-4: real attention is peaked, and U(-1, 1) queries give near-uniform
// weights under which a scale or softcap bug hides in the noise.
absl::StatusOr<ProblemData> OracleGridData(const AttentionProblem& p, uint64_t seed);

}  // namespace attnkit

#endif  // ATTNKIT_TESTS_ORACLE_GRID_H_
