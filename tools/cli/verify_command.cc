// `attnkit verify`: checks an output some other implementation produced
// (PyTorch, FlashAttention, a kernel under development) against the fp64
// reference with the same oracle as `check`, from .npy files.
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "io/json_writer.h"
#include "io/npy.h"
#include "oracle/compare.h"
#include "oracle/reference.h"
#include "tools/cli/commands.h"
#include "tools/cli/npy_problem.h"

namespace attnkit {

absl::Status VerifyCommand(const CliOptions& options, std::ostream& out) {
  if (options.o.empty()) {
    return absl::InvalidArgumentError("--o is required: the output .npy to check");
  }
  if (options.sample_rows < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--sample_rows (%d) must be >= 0 (0 checks every row)", options.sample_rows));
  }
  ATTNKIT_ASSIGN_OR_RETURN(NpyProblem loaded, LoadNpyProblem(options, !options.lse.empty()));
  const AttentionProblem& p = loaded.problem;
  ProblemData& data = loaded.data;
  // O in the config's dtype: a float32 file holding bf16 values (NumPy has no
  // bfloat16) converts exactly.
  ATTNKIT_ASSIGN_OR_RETURN(data.o, LoadAttentionTensor("o", options.o, p.dtype, p.layout, p.batch,
                                                       p.num_heads, p.q_len, p.value_dim()));
  if (!options.lse.empty()) {
    ATTNKIT_ASSIGN_OR_RETURN(NpyArray lse, ReadNpy(options.lse));
    const std::vector<int64_t> want = {p.batch, p.num_heads, p.q_len};
    if (lse.shape != want || lse.tensor.view().dtype != DType::kF32) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--lse=%s must be a float32 array of shape (%s); it has %s shape (%s)",
                          options.lse, absl::StrJoin(want, ", "),
                          DTypeName(lse.tensor.view().dtype), absl::StrJoin(lse.shape, ", ")));
    }
    data.lse = std::move(lse.tensor);
  }
  const AttentionArgs args = data.args();
  const Comparison c = options.sample_rows > 0
                           ? CompareSampledRows(p, args, options.sample_rows)
                           : CompareToReference(p, args, ComputeReference(p, args));
  JsonWriter w;
  w.BeginObject();
  WriteBuildInfo(w);
  w.Field("id", p.Id()).Field("o", options.o).Field("passed", c.ok());
  w.Field("checked", c.checked).Field("mismatches", c.mismatches);
  w.Field("non_finite", c.non_finite).Field("poisoned_rows", c.poisoned_rows);
  w.Field("max_abs_err", c.max_abs_err).Field("max_rel_err", c.max_rel_err);
  w.Field("max_lse_err", c.max_lse_err).Field("max_bound", c.max_bound);
  w.Field("max_bound_fraction", c.max_bound_fraction).Field("first_failure", c.first_failure);
  w.Field("sampled_rows", options.sample_rows);
  w.EndObject();
  ATTNKIT_RETURN_IF_ERROR(EmitJson(options, w.str(), out));
  if (JsonToStdout(options)) {
    if (!c.ok()) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s disagrees with the reference on %s", options.o, p.Id()));
    }
    return absl::OkStatus();
  }
  out << absl::StrFormat(
      "verify %s: %s; %d values checked, max abs err %.3e, max bound %.3e, err/bound %.3f%s\n",
      p.Id(), c.ok() ? "pass" : "FAIL", c.checked, c.max_abs_err, c.max_bound, c.max_bound_fraction,
      c.poisoned_rows > 0 ? absl::StrFormat(", %d rows read NaN/Inf", c.poisoned_rows) : "");
  if (!c.ok()) {
    out << "  first mismatch: " << c.first_failure << "\n";
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s disagrees with the reference on %s: %d of %d values outside the bound%s; first: %s",
        options.o, p.Id(), c.mismatches, c.checked, c.non_finite ? ", non-finite values" : "",
        c.first_failure));
  }
  return absl::OkStatus();
}

}  // namespace attnkit
