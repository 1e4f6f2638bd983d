// A problem and its tensors from .npy files: what `run` executes and `verify`
// checks. Files hold the layout's own order: [B, H, T, d] for BHTD,
// [B, T, H, d] for BTHD (no copy either way).
#ifndef ATTNKIT_TOOLS_CLI_NPY_PROBLEM_H_
#define ATTNKIT_TOOLS_CLI_NPY_PROBLEM_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/problem.h"
#include "core/problem_data.h"
#include "core/tensor.h"
#include "tools/cli/commands.h"

namespace attnkit {

struct NpyProblem {
  AttentionProblem problem;
  ProblemData data;  // q, k, v (and kv_lengths, mask, bias) loaded; o (and lse) allocated
};

// The config of options (backend overridden by --backend; --kv_lengths,
// --mask, --bias and want_lse switch on their options), validated and checked
// against its memory budget before anything is loaded; then --q, --k, --v
// (float32 or float16 files, converted to the config's dtypes) and the
// optional inputs, each checked against the problem's shape.
absl::StatusOr<NpyProblem> LoadNpyProblem(const CliOptions& options, bool want_lse);

// Loads a [B, heads, T, d] tensor of `layout` from `path` (named by `flag` in
// errors), float32 or float16, converted to `dtype`.
absl::StatusOr<Tensor> LoadAttentionTensor(const std::string& flag, const std::string& path,
                                           DType dtype, Layout layout, int64_t b, int64_t heads,
                                           int64_t t, int64_t d);

// `v` with dims 1 and 2 swapped for BTHD, so that serialising it in C order
// writes memory order (the file order above).
TensorView FileOrderView(TensorView v, Layout layout);

}  // namespace attnkit

#endif  // ATTNKIT_TOOLS_CLI_NPY_PROBLEM_H_
