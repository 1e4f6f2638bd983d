// Differential fuzzing: random valid problems on every backend against the
// fp64 reference; a mismatch is shrunk to a small config and written to a
// file that `attnkit check --config=F --backends=NAME` reproduces (inputs,
// including the NaN / Inf placement, follow from the config's seed).
#ifndef ATTNKIT_TOOLS_DIFF_FUZZ_DIFF_FUZZ_H_
#define ATTNKIT_TOOLS_DIFF_FUZZ_DIFF_FUZZ_H_

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/backend.h"
#include "core/config.pb.h"

namespace attnkit {

// Runs `config` on `backend` against the reference. OK when it matches or is
// unsupported (*ran says which); otherwise an error saying what went wrong.
absl::Status CheckOnBackend(const AttentionConfig& config, Backend* backend, bool* ran = nullptr);

// Greedily applies size and feature reductions while CheckOnBackend still
// fails; returns the smallest failing config found.
AttentionConfig Shrink(const AttentionConfig& failing, Backend* backend, int max_steps = 400);
// The same reductions while `fails` holds (it is asked only about configs
// ProblemFromConfig accepts): the shrinker of other checks (the gradient
// fuzzer's, tools/diff_fuzz/grad_fuzz.h).
AttentionConfig ShrinkWhile(const AttentionConfig& failing,
                            const std::function<bool(const AttentionConfig&)>& fails,
                            int max_steps = 400);

// The compute mode of the problems: as drawn (RandomConfig), or every one
// EXACT, or every one FAST (forward problems; f32 K/V included, where FAST
// is EXACT and every backend must take it).
enum class FuzzCompute { kDrawn, kExact, kFast };

struct FuzzOptions {
  int64_t count = 100;             // problems to draw
  uint64_t seed = 1;               // the whole run follows from it
  std::string repro_dir = "/tmp";  // where shrunk configs are written
  FuzzCompute compute = FuzzCompute::kDrawn;
};

struct FuzzFinding {
  std::string backend;
  std::string message;  // the mismatch on the shrunk problem
  std::string config_path;
  std::string command;  // one line that reproduces it
};

// One available backend's share of a campaign.
struct FuzzTally {
  std::string backend;
  int64_t runs = 0;         // problems it ran
  int64_t unsupported = 0;  // problems it declined through Supports()
  int64_t mismatches = 0;   // problems it got wrong
};

struct FuzzReport {
  int64_t problems = 0;
  int64_t fast_problems = 0;  // of them, compute FAST
  int64_t runs = 0;           // (problem, backend) pairs that ran
  int64_t unsupported = 0;    // pairs a working backend declined through Supports()
  // The same per available backend, in the order given: a backend that
  // declines every problem shows here, where the sums above hide it.
  std::vector<FuzzTally> per_backend;
  // Backends that cannot run here at all (Available() fails: no GPU, a bad
  // plugin), as "name: reason"; they are not run and not counted above.
  std::vector<std::string> unavailable;
  std::vector<FuzzFinding> findings;
};

// FailedPrecondition naming each backend of `named` that was available but
// ran none of the report's problems (declined every one): a named backend
// must be exercised, not merely not wrong. OK when `named` is empty.
absl::Status RequireNamedBackendsRan(const FuzzReport& report,
                                     const std::vector<std::string>& named);

// Draws options.count problems and checks each on every backend in
// available one of `backends`; `progress` (may be empty) gets one line per
// unavailable backend, one per finding and a summary every 100 problems.
FuzzReport FuzzBackends(const std::vector<Backend*>& backends, const FuzzOptions& options,
                        const std::function<void(const std::string&)>& progress);

// What one campaign draws and checks (the forward's, or the backward's in
// grad_fuzz.h): RunFuzzCampaign is the loop both share.
struct FuzzCampaign {
  std::string what;         // "" (forward) or "backward ", in messages
  std::string name_prefix;  // configs are named <prefix>-<seed>-<n>
  std::string check_flags;  // extra `attnkit check` flags of the repro line
  bool backward = false;    // checks the backward pass (FAST only where dtype == kv_dtype)
  std::function<AttentionConfig(std::mt19937_64& rng)> draw;
  // OK when the backend matches the reference or declines (*ran = false).
  std::function<absl::Status(const AttentionConfig&, Backend*, bool* ran)> check;
};
// Findings are shrunk (ShrinkWhile the check fails) and written as
// attnkit_<name_prefix with '-' as '_'>_<seed>_<n>_<backend>.textproto.
FuzzReport RunFuzzCampaign(const std::vector<Backend*>& backends, const FuzzOptions& options,
                           const FuzzCampaign& campaign,
                           const std::function<void(const std::string&)>& progress);

}  // namespace attnkit

#endif  // ATTNKIT_TOOLS_DIFF_FUZZ_DIFF_FUZZ_H_
