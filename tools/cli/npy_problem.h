// A problem and its tensors from .npy files: what `run` executes and `verify`
// checks. Files hold the layout's own order: [B, H, T, d] for BHTD,
// [B, T, H, d] for BTHD (no copy either way).
#ifndef ATTNKIT_TOOLS_CLI_NPY_PROBLEM_H_
#define ATTNKIT_TOOLS_CLI_NPY_PROBLEM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/problem.h"
#include "core/tensor.h"
#include "harness/problem_data.h"
#include "tools/cli/commands.h"

namespace attnkit {

struct NpyProblem {
  AttentionProblem problem;
  ProblemData data;  // q, k, v (and kv_lengths, mask, bias) loaded; o (and lse) allocated
  // Without --config: the config read off the arrays (then the --config.*
  // flags), as text ("" when a config was given).
  std::string inferred_config;
  // One line per conversion made on load ("--q=x.npy: float64 converted to
  // float32"), for the command to print.
  std::vector<std::string> notes;
};

// The config of options (backend overridden by --backend; --kv_lengths,
// --mask, --bias and want_lse switch on their options), validated and checked
// against its memory budget before anything is loaded; then --q, --k, --v
// (float32, float16 or float64 files, converted to the config's dtypes) and
// the optional inputs, each checked against the problem's shape. Without
// --config the shapes come from the arrays (InferConfigFromArrays); the
// --config.* flags apply over either. The mask
// is read with options.mask_convention ("attnkit": true = blocked; "torch":
// true = take part).
absl::StatusOr<NpyProblem> LoadNpyProblem(const CliOptions& options, bool want_lse);
// Unimplemented, naming the feature, for a paged, ragged or int8-K/V
// problem: the .npy exchange of inputs, run and verify is for dense float
// K/V (their block tables, offsets and scales have no files yet).
absl::Status RequireDenseForNpy(const AttentionProblem& p);

// The config that --q and --k describe: batch, heads, lengths and head_dim,
// the layout (BHTD [B, H, T, d] or BTHD [B, T, H, d]: the reading in which
// the KV heads divide the query heads; when both do, the one with no more
// KV heads than keys), dtype from q's file (float16 stays f16). No mask.
// v_path (optional) sets value_head_dim when V's last dim differs from Q's.
absl::StatusOr<AttentionConfig> InferConfigFromArrays(const std::string& q_path,
                                                      const std::string& k_path,
                                                      const std::string& v_path = "");

// Loads a [B, heads, T, d] tensor of `layout` from `path` (named by `flag` in
// errors), float32, float16 or float64, converted to `dtype`; a conversion
// from float64 adds a line to `notes` (may be null).
absl::StatusOr<Tensor> LoadAttentionTensor(const std::string& flag, const std::string& path,
                                           DType dtype, Layout layout, int64_t b, int64_t heads,
                                           int64_t t, int64_t d,
                                           std::vector<std::string>* notes = nullptr);

// `v` with dims 1 and 2 swapped for BTHD, so that serialising it in C order
// writes memory order (the file order above).
TensorView FileOrderView(TensorView v, Layout layout);

}  // namespace attnkit

#endif  // ATTNKIT_TOOLS_CLI_NPY_PROBLEM_H_
