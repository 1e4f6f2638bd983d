#include "tools/diff_fuzz/grad_fuzz.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/problem.h"
#include "core/problem_config.h"
#include "core/status_macros.h"
#include "harness/execute.h"
#include "harness/grad_data.h"
#include "harness/problem_data.h"
#include "io/config_io.h"
#include "oracle/compare_grad.h"
#include "oracle/reference_backward.h"
#include "tools/diff_fuzz/random_config.h"

namespace attnkit {
namespace {

// The problems with a backward pass: dense float K/V, one query count for
// every sequence, the LSE returned, finite inputs.
bool HasBackward(const AttentionProblem& p) {
  return !p.is_paged() && !p.is_ragged() && !IsScaledKv(p.kv_dtype) && p.return_lse &&
         p.nonfinite_inputs == 0;
}

}  // namespace

AttentionConfig RandomGradConfig(std::mt19937_64& rng, double max_work) {
  for (;;) {
    AttentionConfig c = RandomConfig(rng, max_work);
    c.set_page_size(0);
    c.set_num_pages(0);
    if (c.kv_dtype() == INT8 || c.kv_dtype() == FP8_E4M3 || c.kv_dtype() == FP8_E5M2) {
      c.set_kv_dtype(c.dtype());  // no gradient of scaled K/V
    }
    // A ragged config's kv_lengths stay: a padded dense batch (its dense
    // mask and bias were dropped when it was drawn ragged).
    c.clear_q_lengths();
    c.set_return_lse(true);
    c.set_nonfinite_inputs(0);
    // FAST backward needs one dtype for Q and K/V (core/problem.cc).
    const absl::StatusOr<AttentionProblem> drawn = ProblemFromConfig(c);
    if (drawn.ok() && drawn->dtype != drawn->kv_dtype) c.clear_compute();
    // The edits keep a config valid but for rules on the dense form (none
    // today); draw again rather than hand the fuzzer an invalid one.
    if (ProblemFromConfig(c).ok()) return c;
  }
}

absl::Status CheckGradOnBackend(const AttentionConfig& config, Backend* backend, bool* ran) {
  if (ran != nullptr) *ran = false;
  ATTNKIT_ASSIGN_OR_RETURN(const AttentionProblem p, ProblemFromConfig(config));
  if (!HasBackward(p) || !backend->SupportsBackward(p).ok() || !backend->Supports(p).ok()) {
    return absl::OkStatus();
  }
  if (ran != nullptr) *ran = true;
  // The inputs and dO of `attnkit check --grad`: ProblemData::Random(p,
  // p.seed) and GradData::Random(p, p.seed, ..).
  ATTNKIT_ASSIGN_OR_RETURN(ProblemData data, ProblemData::Random(p, p.seed));
  const bool with_dbias = p.additive_bias && backend->Caps().backward.bias_grad;
  ATTNKIT_ASSIGN_OR_RETURN(GradData grads, GradData::Random(p, p.seed, with_dbias));
  const ReferenceGradients ref = ComputeReferenceBackward(p, data.args(), grads.d_o.view());
  PoisonOutputs(data);
  RunInfo info;
  const absl::Status forward = RunOnBackend(backend, p, data, &info);
  if (!forward.ok()) return absl::InternalError(absl::StrCat("forward error: ", forward.message()));
  PoisonGradients(grads);
  const absl::Status backward = RunBackwardOnBackend(backend, p, data, grads, &info);
  if (!backward.ok()) {
    return absl::InternalError(absl::StrCat("backward error: ", backward.message()));
  }
  const Comparison c = CompareGradients(p, grads.args(), ref);
  if (c.ok()) return absl::OkStatus();
  return absl::InternalError(absl::StrFormat(
      "[%s] backward%s: %d of %d gradient elements outside tolerance%s; max abs error %.3g; "
      "first: %s",
      info.kernel, with_dbias ? " with dbias" : "", c.mismatches, c.checked,
      c.non_finite ? ", non-finite gradient" : "", c.max_abs_err, c.first_failure));
}

AttentionConfig ShrinkGrad(const AttentionConfig& failing, Backend* backend, int max_steps) {
  return ShrinkWhile(
      failing, [backend](const AttentionConfig& c) { return !CheckGradOnBackend(c, backend).ok(); },
      max_steps);
}

FuzzReport FuzzBackendGradients(const std::vector<Backend*>& backends, const FuzzOptions& options,
                                const std::function<void(const std::string&)>& progress) {
  FuzzCampaign backward;
  backward.what = "backward ";
  backward.name_prefix = "grad-fuzz";
  backward.check_flags = " --grad";
  backward.backward = true;
  backward.draw = [](std::mt19937_64& rng) { return RandomGradConfig(rng); };
  backward.check = [](const AttentionConfig& c, Backend* b, bool* ran) {
    return CheckGradOnBackend(c, b, ran);
  };
  return RunFuzzCampaign(backends, options, backward, progress);
}

}  // namespace attnkit
