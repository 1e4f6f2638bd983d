// Differential fuzzing of the backward pass: random dense problems (the
// forward fuzzer's generator, restricted to what Backward takes) run forward
// then backward on every backend with one, dQ / dK / dV (and dBias) compared
// with the fp64 reference backward (oracle/compare_grad.h); a mismatch is
// shrunk with the forward fuzzer's reductions and written to a config file.
#ifndef ATTNKIT_TOOLS_DIFF_FUZZ_GRAD_FUZZ_H_
#define ATTNKIT_TOOLS_DIFF_FUZZ_GRAD_FUZZ_H_

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/backend.h"
#include "core/config.pb.h"
#include "tools/diff_fuzz/diff_fuzz.h"

namespace attnkit {

// RandomConfig(rng, max_work) made a backward problem: dense float K/V (no
// pages; int8 K/V become the query dtype), no ragged batch (q_lengths
// dropped, the kv_lengths kept as padding), return_lse on, and no NaN / Inf
// inputs (nonfinite_inputs 0). poison_blocked stays as drawn: the backward
// may no more read what the forward never reads.
AttentionConfig RandomGradConfig(std::mt19937_64& rng, double max_work = 1e6);

// Runs `config` forward and then backward on `backend` (its own O and LSE
// feed its backward; dO from GradData::Random(p, p.seed), dBias asked when
// the problem has a bias and the backend claims backward.bias_grad) against
// the reference backward. OK when the gradients match, or when the backend's
// backward does not take the problem or the problem has none (paged, int8,
// ragged, no LSE, NaN inputs); *ran says whether it ran.
absl::Status CheckGradOnBackend(const AttentionConfig& config, Backend* backend,
                                bool* ran = nullptr);

// ShrinkWhile(failing, CheckGradOnBackend fails on backend).
AttentionConfig ShrinkGrad(const AttentionConfig& failing, Backend* backend, int max_steps = 400);

// FuzzBackends for gradients: options.count problems from RandomGradConfig,
// each on every available backend. A finding's config is written as
// attnkit_grad_fuzz_<seed>_<n>_<backend>.textproto in options.repro_dir;
// its command is `attnkit check --grad --config=F --backends=NAME`.
// report.unsupported counts pairs whose backward the backend declined
// (every problem of a backend without a backward pass).
FuzzReport FuzzBackendGradients(const std::vector<Backend*>& backends, const FuzzOptions& options,
                                const std::function<void(const std::string&)>& progress);

}  // namespace attnkit

#endif  // ATTNKIT_TOOLS_DIFF_FUZZ_GRAD_FUZZ_H_
