// The backward problems both CUDA backward tests run: bwd_plan_test's CPU
// emulation of the kernels' schedule and cuda_plugin_test's GPU kernels.
// One list, so a case added for one is checked by both; plus the fixture
// steps they share (a row that sees no key, bit-exact gradient snapshots).
#ifndef ATTNKIT_BACKENDS_CUDA_BWD_TEST_CASES_H_
#define ATTNKIT_BACKENDS_CUDA_BWD_TEST_CASES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/problem.h"
#include "gtest/gtest.h"
#include "harness/grad_data.h"
#include "harness/problem_data.h"

namespace attnkit {
namespace cuda {

// One backward problem. `problem` carries its dtype and kv_dtype, has
// return_lse set and a name (its Id() plus "_dbias" / "_blockrow").
struct BwdTestCase {
  AttentionProblem problem;
  bool with_dbias = false;      // GradData with a dBias buffer (needs additive_bias)
  bool block_last_row = false;  // BlockLastRow before the forward
};

// MHA, GQA, MQA; head dims 64, 128, 256 and padded ones (16, 80, 200); Tq
// and Tk odd and both ways round; causal in both alignments, sliding
// windows, kv_lengths with an empty sequence, a dense mask and a -inf bias
// each blocking a whole row, bias with and without dBias, softcap, BTHD;
// f32, bf16, f16 and mixed storage; a decode shape; one problem with
// several key blocks and row tiles per block; sinks (with a window, with a
// row that sees only its sink) and ALiBi, alone and together with softcap
// and bias. Every case is valid.
std::vector<BwdTestCase> BackwardTestCases();

// Makes the last query row of the last sequence and head see no key: its
// dense-mask row set to 1 (blocked) when the problem has blocked_mask, else
// its bias row -inf. InvalidArgument when the problem has neither.
absl::Status BlockLastRow(const AttentionProblem& p, ProblemData* data);

// ProblemData::Random(p, seed), with BlockLastRow applied when the case
// asks for it.
absl::StatusOr<ProblemData> BackwardTestData(const BwdTestCase& c, uint64_t seed);

// Success when dQ of the row BlockLastRow blocked is exactly 0 (the row
// sees no key, so it has no gradient and must not be NaN).
::testing::AssertionResult LastRowDqIsZero(const AttentionProblem& p, const GradData& grads);

// dQ, dK, dV and (when present) dBias as raw bytes, concatenated: for
// "the same bits" checks between two runs.
std::string GradientBits(const GradData& grads);

}  // namespace cuda
}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_CUDA_BWD_TEST_CASES_H_
