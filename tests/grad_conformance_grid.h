// The problem grid of the backward conformance suite: small dense problems
// (MHA, GQA 8/2, MQA; head dims 16, 64, 80, 128; Tq 1 and 37 to 300, Tk 1 to
// 300 both ways round) under every feature the backward contract has: no
// mask, causal and sliding windows in both alignments, kv_lengths with an
// empty and a padded sequence, a dense mask with a fully blocked row, an
// additive bias (dense and broadcast through stride-0 views) with dBias
// asked, softcap, a custom scale, BHTD and BTHD, f32 / bf16 / f16 Q and K/V.
// Every problem returns its LSE (the backward pass reads it).
#ifndef ATTNKIT_TESTS_GRAD_CONFORMANCE_GRID_H_
#define ATTNKIT_TESTS_GRAD_CONFORMANCE_GRID_H_

#include <vector>

#include "absl/status/statusor.h"
#include "core/problem.h"
#include "harness/problem_data.h"

namespace attnkit {

// Which dims of the bias (and of the dense mask, when the problem has one)
// are broadcast through stride 0: a [1, 1, Tq, Tk] bias shared by every
// sequence and head, say. dBias is always dense [B, H, Tq, Tk].
enum class Broadcast { kNone, kBatch, kHeads, kBatchAndHeads };

struct GradCase {
  AttentionProblem problem;  // valid, named, seeded, return_lse
  Broadcast broadcast = Broadcast::kNone;
  // The last query row of the last sequence and head sees no key: every
  // entry of its dense mask row is set (or, without a dense mask, its bias
  // row is -inf). Under a broadcast that row is shared by every sequence or
  // head the broadcast covers.
  bool block_last_row = false;
  bool with_dbias = false;  // ask for dBias (only with additive_bias)
};

// Every case has a unique problem.name; about a hundred in all.
std::vector<GradCase> GradConformanceGrid();

// ProblemData::Random(problem, problem.seed) with the case's broadcast views
// and blocked row applied: the inputs both the backends and the reference
// read.
absl::StatusOr<ProblemData> GradCaseData(const GradCase& c);

}  // namespace attnkit

#endif  // ATTNKIT_TESTS_GRAD_CONFORMANCE_GRID_H_
