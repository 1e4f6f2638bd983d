// Test helpers for the Highway backend: a problem grid and a comparison of a
// backend's output against the fp64 reference with dtype-based tolerances.
#ifndef ATTNKIT_BACKENDS_HIGHWAY_FLASH_TEST_UTIL_H_
#define ATTNKIT_BACKENDS_HIGHWAY_FLASH_TEST_UTIL_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/backend.h"
#include "core/problem.h"
#include "harness/problem_data.h"

namespace attnkit {

// A problem with defaults filled (scale 1/sqrt(d), model_dim H*d).
AttentionProblem MakeTestProblem(int64_t batch, int64_t heads, int64_t kv_heads, int64_t q_len,
                                 int64_t kv_len, int64_t head_dim);

// A grid covering masks, both alignments, windows, padding (incl. fully
// blocked rows), dense mask, bias, softcap, GQA/MQA, both layouts, dtypes,
// odd sizes and head dims; `small` keeps only a representative subset.
std::vector<AttentionProblem> TestGrid(bool small);

// Decode-shaped problems (a few query rows per KV head) for the direct
// decode path and its packed score tiles: every row-group count, keys that
// fill no whole vector or tile, structured masks inside an item, bias and
// softcap, head dims whose tiles hold fewer keys than a vector, padding,
// paged and int8 K/V, 16-bit caches.
std::vector<AttentionProblem> DecodeTileGrid();

// Runs `backend` on random data for `p` and compares o (and lse) with
// ComputeReference: |x - ref| <= tol * (1 + |ref|), tol from the dtype; any
// NaN fails. `kernel` receives RunInfo::kernel.
absl::Status CheckAgainstReference(Backend* backend, const AttentionProblem& p,
                                   std::string* kernel = nullptr);

// Copies of o and lse after running `backend` on seed-1 data for `p`.
absl::StatusOr<std::vector<float>> RunToVector(Backend* backend, const AttentionProblem& p);

}  // namespace attnkit

#endif  // ATTNKIT_BACKENDS_HIGHWAY_FLASH_TEST_UTIL_H_
