// The attnkit subcommands as library functions: they take options, not flags
// (flags live only in tools/attnkit_main.cc), write reports to `out`, and
// return a status whose message is the one line printed on failure.
#ifndef ATTNKIT_TOOLS_CLI_COMMANDS_H_
#define ATTNKIT_TOOLS_CLI_COMMANDS_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/config.pb.h"
#include "plugin/registry.h"
#include "tools/cli/config_flags.h"

namespace attnkit {

struct CliOptions {
  std::string config;   // path of a text-format AttentionConfig; "" = built-in default
  std::string backend;  // overrides the config's backend when set
  std::vector<std::string> backends;  // check: restrict to these names
  bool allow_skip = false;            // check, fuzz: a named backend that cannot run is no error
  std::string q, k, v;                // run: .npy inputs
  std::string kv_lengths;             // run: optional int32/int64 [B]
  std::string mask;                   // run: optional bool/uint8 [B|1, H|1, Tq, Tk], true = blocked
  std::string bias;                   // run: optional float32 [B|1, H|1, Tq, Tk]
  std::string sinks;                  // run, verify: optional float32 [H]
  std::string alibi_slopes;           // run, verify: optional float32 [H]
  std::string out, lse_out;           // run: outputs
  std::string o, lse;                 // verify: the output (and lse) .npy to check
  int64_t sample_rows = 0;            // verify: check this many rows spread evenly; 0 = all
  std::string dir;                    // inputs: where the .npy files go
  std::string suite;                  // compare: "standard" (used when config is empty)
  int threads = 0;                    // compare, peak, tune: 0 = every core
  std::string json;                   // every command's JSON report: a file, or "-" for stdout
  std::string svg;                    // compare: chart file (and a .png twin with rsvg-convert)
  std::string html;                   // compare: one self-contained page
  bool wide = false;                  // check, compare: tables at full width
  bool grad = false;  // check, compare, fuzz: the backward pass too (backward: true)
  // run, verify, check, compare, generate: "exact" or "fast" (any case) sets
  // the config's compute; fuzz: every problem in that mode; "" = the
  // config's (fuzz: drawn).
  std::string compute;
  std::string mask_convention = "attnkit";  // run: --mask true = blocked; "torch": true = take part
  std::string baseline;                     // compare: an earlier --json report
  bool refresh = false;                     // peak: re-measure instead of reading the cache
  int64_t layers = 1;              // cost: KV cache for this many layers; generate: stack depth
  int64_t count = 100;             // fuzz: problems to draw
  uint64_t seed = 1;               // fuzz: the run follows from it
  std::string repro_dir = "/tmp";  // fuzz: where shrunk failing configs go
  // --config.FIELD=VALUE overrides of the config, in command-line order.
  std::vector<ConfigFlag> config_flags;
};

// `attnkit generate` beyond the shared options.
struct GenerateOptions {
  int64_t prompt_len = 128;  // P tokens of prefill
  int64_t new_tokens = 16;   // K decode steps
  int64_t chunk = 0;         // prefill chunk size; 0 = the whole prompt in one call
  bool verify = true;        // recompute the whole sequence and compare the last hidden state
  bool paged = false;        // paged KV caches (also when the config sets page_size)
  int64_t page_size = 0;     // tokens per page; 0 = the config's page_size, else 16
};

// `attnkit train` beyond the shared options (backend, layers, seed, threads,
// json): a tiny model (ops/sequence_model.h) on a synthetic task.
struct TrainOptions {
  std::string task = "copy";  // copy | reverse (ops/train_task.h)
  int64_t steps = 300;        // Adam steps, one fresh random batch each
  int64_t seq = 8;            // source tokens per sequence; the model reads 2 * seq
  int64_t vocab = 16;         // tokens, the separator included
  int64_t dim = 64;           // model dim D
  int64_t heads = 4;
  int64_t kv_heads = 2;
  double lr = 3e-3;
  int64_t batch = 32;     // sequences per step
  int64_t log_every = 0;  // print every N steps; 0 = about 20 lines in all
};

// The config of --config, or the built-in default when none is given, with
// the --config.* flags applied in order (then --compute and --grad).
absl::StatusOr<AttentionConfig> LoadCliConfig(const CliOptions& options);

// --compute: "" (nullopt: leave the config's), "exact" or "fast" in any
// case; InvalidArgument naming the flag, the value and both modes otherwise.
absl::StatusOr<std::optional<ComputeProto>> ParseComputeFlag(const std::string& value);
// Sets config's compute from options.compute (EXACT as unset, its default).
absl::Status ApplyComputeFlag(const CliOptions& options, AttentionConfig* config);

// check and fuzz: FailedPrecondition naming the backends `skipped` (each with
// why) when --backends named them and --allow_skip was not given; `where`
// ("" or " on <problem>") says what they did not run.
absl::Status RefuseNamedSkips(const CliOptions& options, const std::vector<std::string>& skipped,
                              const std::string& where);
// check and fuzz: InvalidArgument for --allow_skip without --backends, where
// it would change nothing (no backend's skip fails the command then).
absl::Status CheckAllowSkipHasBackends(const CliOptions& options);

// `attnkit backends`: each backend, available or why not, and capabilities
// (--json: the capabilities as data).
absl::Status BackendsCommand(const BackendRegistry& registry, const CliOptions& options,
                             std::ostream& out);
// `attnkit run`: one backend on .npy tensors, outputs written whole or not at all.
absl::Status RunCommand(const BackendRegistry& registry, const CliOptions& options,
                        std::ostream& out);
// `attnkit verify`: an output produced elsewhere (options.o, optionally
// options.lse) for the .npy inputs of options, checked against the fp64
// reference with the oracle of oracle/compare.h. FailedPrecondition, naming the
// first bad value, when it disagrees.
absl::Status VerifyCommand(const CliOptions& options, std::ostream& out);
// `attnkit inputs`: the config's random inputs (those `check` uses) as .npy
// files in options.dir, written as one set.
absl::Status InputsCommand(const CliOptions& options, std::ostream& out);
// `attnkit check`: every (selected) backend on random data against the
// reference. FailedPrecondition when any backend that ran is wrong, or when a
// backend named in options.backends was unavailable or refused the problem
// (unless options.allow_skip).
absl::Status CheckCommand(const BackendRegistry& registry, const CliOptions& options,
                          std::ostream& out);
// `attnkit fuzz`: random valid problems on every (selected) backend against
// the reference; each mismatch is shrunk and printed with a one-line
// `attnkit check` reproduction. FailedPrecondition when any is found.
absl::Status FuzzCommand(const BackendRegistry& registry, const CliOptions& options,
                         std::ostream& out);
// `attnkit cost`: FLOPs, bytes, score size, KV-cache bytes (for
// options.layers layers too), parameters.
absl::Status CostCommand(const CliOptions& options, std::ostream& out);
// `attnkit peak`: the machine's limits (cached per CPU model; --refresh).
absl::Status PeakCommand(const CliOptions& options, std::ostream& out);
// `attnkit compare`: every backend side by side on a config or a suite;
// progress goes to `progress`. FailedPrecondition when a backend is wrong.
absl::Status CompareCommand(const BackendRegistry& registry, const CliOptions& options,
                            std::ostream& out, std::ostream& progress);
// `attnkit tune`: records the fastest backends per shape class.
absl::Status TuneCommand(const BackendRegistry& registry, const CliOptions& options,
                         std::ostream& out, std::ostream& progress);

// --json: writes `json` to options.json, whole or not at all, and says so
// on `out`; "-" prints it on `out` instead (then the command prints nothing
// else there).
absl::Status EmitJson(const CliOptions& options, const std::string& json, std::ostream& out);
inline bool JsonToStdout(const CliOptions& options) { return options.json == "-"; }

// options.threads, or every core when it is 0.
int ThreadCount(const CliOptions& options);
// `attnkit generate`: a stack of options.layers attention layers (random
// weights, residual connections) prefills P tokens, decodes K more with the
// KV cache (dense or paged, in the config's kv_dtype), reports tokens per
// second and cache memory, and checks the last hidden state against a full
// recompute. FailedPrecondition when it differs.
absl::Status GenerateCommand(const BackendRegistry& registry, const CliOptions& options,
                             const GenerateOptions& gen, std::ostream& out);
// `attnkit train`: trains a tiny Transformer (embedding, options.layers pre-norm
// blocks, output projection) with Adam on the copy or reverse task; prints
// step, loss, accuracy on the target tokens and tokens/s, then the backend
// that ran attention forward and backward. InvalidArgument naming the flag,
// its value and the rule for a bad flag; --json: the whole loss curve.
absl::Status TrainCommand(const BackendRegistry& registry, const CliOptions& options,
                          const TrainOptions& train, std::ostream& out);

}  // namespace attnkit

#endif  // ATTNKIT_TOOLS_CLI_COMMANDS_H_
