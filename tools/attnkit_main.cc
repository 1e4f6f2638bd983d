// attnkit: list backends, run a config on .npy tensors, check every backend
// against the fp64 reference, print the cost model, compare and tune backends,
// and run the KV-cache generation demo. Flags are defined here and nowhere
// else; the commands live in tools/cli/.
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "backends/builtin.h"
#include "platform/version.h"
#include "tools/cli/bare_json_flag.h"
#include "tools/cli/command_table.h"
#include "tools/cli/commands.h"
#include "tools/cli/config_flags.h"
#include "tools/cli/ring_command.h"

ABSL_FLAG(std::string, config, "",
          "text-format AttentionConfig (core/config.proto); unset: the built-in example");
ABSL_FLAG(std::string, backend, "", "backend name or 'auto'; overrides the config");
ABSL_FLAG(std::string, backends, "",
          "check, compare, fuzz: comma-separated backends to run (default: all)");
ABSL_FLAG(bool, allow_skip, false,
          "check, fuzz: accept a backend named in --backends that is unavailable (check: or "
          "refuses the problem); refused without --backends, where no skip is an error");
ABSL_FLAG(std::string, q, "", "run: queries .npy, [B, H, Tq, d] (BTHD layout: [B, Tq, H, d])");
ABSL_FLAG(std::string, k, "", "run: keys .npy, [B, Hkv, Tk, d] (BTHD layout: [B, Tk, Hkv, d])");
ABSL_FLAG(std::string, v, "", "run: values .npy, same shape as keys");
ABSL_FLAG(std::string, kv_lengths, "", "run: int32/int64 .npy [B] of valid keys per sequence");
ABSL_FLAG(std::string, mask, "", "run: bool/uint8 .npy [B|1, H|1, Tq, Tk], true = blocked");
ABSL_FLAG(std::string, bias, "", "run: float32 .npy [B|1, H|1, Tq, Tk] added to the scores");
ABSL_FLAG(std::string, sinks, "",
          "run, verify: float32 .npy [H], one attention-sink logit per query head (config.proto "
          "sinks)");
ABSL_FLAG(std::string, alibi_slopes, "",
          "run, verify: float32 .npy [H], one ALiBi slope per query head (config.proto alibi)");
ABSL_FLAG(std::string, out, "", "run: output .npy, same shape as q");
ABSL_FLAG(std::string, lse_out, "", "run: optional log-sum-exp output .npy [B, H, Tq]");
ABSL_FLAG(std::string, o, "", "verify: the output .npy to check, same shape as q");
ABSL_FLAG(std::string, lse, "", "verify: optional float32 log-sum-exp .npy [B, H, Tq] to check");
ABSL_FLAG(std::string, dir, "", "inputs: the directory the .npy files are written to");
ABSL_FLAG(int64_t, sample_rows, 0,
          "verify: check this many query rows spread evenly over the problem (0 = every row)");
ABSL_FLAG(std::string, suite, "standard", "compare: the problem suite when --config is not given");
ABSL_FLAG(int, threads, 0,
          "worker threads of the CPU backends, and the thread count auto's tuning record is "
          "read for (0 = every core)");
ABSL_FLAG(std::string, json, "",
          "write the command's report as JSON to this file, or to stdout with --json=- or a "
          "bare --json (then nothing else is printed there); int64 fields are numbers");
ABSL_FLAG(std::string, svg, "",
          "compare: write a bar chart (% of the machine limit per problem and backend), and a "
          "PNG twin beside it when rsvg-convert is installed");
ABSL_FLAG(std::string, html, "",
          "compare: write one self-contained page with the chart, the table and the machine");
ABSL_FLAG(bool, wide, false, "check, compare: print tables at full width (default: 120 columns)");
ABSL_FLAG(bool, grad, false,
          "check, compare, fuzz, ring: the backward pass too, as if the config said backward: true "
          "(check: gradients against the fp64 reference; compare: times the backward pass; "
          "fuzz: random dense problems' gradients)");
ABSL_FLAG(std::string, compute, "",
          "run, verify, check, compare, generate, fuzz: exact or fast, the config's compute "
          "(fast: Q may be rounded to K's storage type and P to V's; fuzz: every problem in that "
          "mode)");
ABSL_FLAG(std::string, mask_convention, "attnkit",
          "run, verify: how --mask reads: attnkit (true = blocked) or torch (true = take part)");
ABSL_FLAG(std::string, baseline, "", "compare: an earlier --json report; marks >10% slowdowns");
ABSL_FLAG(
    bool, refresh, false,
    "peak: re-measure instead of showing the cached limits (compare and tune always measure)");
ABSL_FLAG(int64_t, layers, 1,
          "cost: also print the KV cache of this many layers; generate: layers in the stack; "
          "train: Transformer blocks (default 2 there)");
ABSL_FLAG(int64_t, prompt_len, 128, "generate: prompt tokens (prefill)");
ABSL_FLAG(int64_t, new_tokens, 16, "generate: tokens decoded one at a time with the KV cache");
ABSL_FLAG(int64_t, chunk, 0, "generate: prefill chunk size (0 = the whole prompt at once)");
ABSL_FLAG(bool, verify, true, "generate: check the last hidden state against a full recompute");
ABSL_FLAG(bool, paged, false,
          "generate: paged KV caches: a pool of pages per layer, read through block tables");
ABSL_FLAG(int64_t, page_size, 0,
          "generate: tokens per page of a paged cache, a power of two in [16, 256]");
ABSL_FLAG(int64_t, count, 100, "fuzz: number of random problems");
ABSL_FLAG(uint64_t, seed, 1,
          "fuzz, train: seed of the run (fuzz: problems and inputs; train: weights and batches "
          "follow from it)");
ABSL_FLAG(std::string, repro_dir, "/tmp", "fuzz: directory for shrunk failing configs");
ABSL_FLAG(std::string, plugins, "",
          "':'-separated backend plugin libraries to load (besides $ATTNKIT_PLUGIN_PATH)");
ABSL_FLAG(std::string, task, "copy",
          "train: copy (the sequence again after a separator) or reverse (it reversed)");
ABSL_FLAG(int64_t, steps, 300, "train: Adam steps, each on a fresh random batch");
ABSL_FLAG(int64_t, seq, 8, "train: source tokens per sequence; the model reads 2 * seq tokens");
ABSL_FLAG(int64_t, vocab, 16, "train: vocabulary size, the separator token included");
ABSL_FLAG(int64_t, dim, 64, "train: model dimension (head_dim = dim / heads)");
ABSL_FLAG(int64_t, heads, 4, "train: query heads per attention layer");
ABSL_FLAG(int64_t, kv_heads, 2, "train: key/value heads (GQA; = heads: MHA, 1: MQA)");
ABSL_FLAG(double, lr, 3e-3, "train: Adam learning rate");
ABSL_FLAG(int64_t, batch, 32, "train: sequences per step");
ABSL_FLAG(int64_t, log_every, 0, "train: print a line every N steps (0 = about 20 lines)");
ABSL_FLAG(std::string, strategy, "ring",
          "ring: ring (K/V blocks travel around the ranks), ulysses (all-to-all from sequence "
          "to heads) or auto (the cost model's choice from the measured link and compute rate)");
ABSL_FLAG(bool, check, false,
          "ring: gather the output (with --grad also dQ, dK, dV) on rank 0 and compare it with "
          "the single-process fp64 reference; the reference holds the whole problem on rank 0, "
          "beyond memory_budget_bytes (which bounds each rank's share)");
ABSL_FLAG(double, timeout, 60,
          "ring: seconds any one transfer or collective may wait for another rank before the "
          "job ends with an error naming it");
ABSL_FLAG(int, repeats, 1, "ring: runs of the problem; the table shows the fastest");
ABSL_FLAG(std::string, inject_fault, "",
          "ring, for tests: stall:R (rank R sleeps far past --timeout before the ring starts) "
          "or exit:R (rank R exits at once there)");

namespace {

// Plugins built together with this binary (its Bazel data, e.g. the CUDA
// plugin when CUDA is built), as paths inside the runfiles tree.
// Every backend is a plugin beside the binary (its runfiles); a CPU backend
// whose plugin is missing falls back to the copy linked into attnkit, and
// `attnkit backends` says so and where it looked.
constexpr const char* kBundledPlugins[] = {
    "backends/plugins/libattnkit_highway.so", "backends/plugins/libattnkit_blas.so",
    "backends/plugins/libattnkit_onednn.so", "backends/plugins/libattnkit_reference.so",
    "backends/cuda/libattnkit_cuda.so"};

std::string RealPath(const std::string& path) {
  char buffer[PATH_MAX];
  return realpath(path.c_str(), buffer) != nullptr ? std::string(buffer) : path;
}

// The runfiles directories that may hold bundled plugins: Bazel's test and
// run environments, then <binary>.runfiles next to the executable.
std::vector<std::string> RunfilesDirs(const char* argv0) {
  std::vector<std::string> dirs;
  for (const char* env : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* dir = std::getenv(env)) dirs.push_back(dir);
  }
  dirs.push_back(std::string(argv0) + ".runfiles");
  dirs.push_back(RealPath("/proc/self/exe") + ".runfiles");
  return dirs;
}

// Where the bundled plugin `relative` (a runfiles path) may be: in each
// runfiles folder, then in the `plugins` folder beside the binary (an
// installed or copied attnkit: bin/attnkit next to bin/plugins/*.so).
std::vector<std::string> PluginCandidates(const std::vector<std::string>& runfiles,
                                          const std::string& exe_dir, const char* relative) {
  std::vector<std::string> out;
  for (const std::string& dir : runfiles) out.push_back(dir + "/" + relative);
  const char* base = std::strrchr(relative, '/');
  out.push_back(exe_dir + "/plugins/" + (base != nullptr ? base + 1 : relative));
  return out;
}

// Loads each bundled plugin it finds, unless the same file was already named
// by --plugins or $ATTNKIT_PLUGIN_PATH (`loaded`). Returns the folders it
// looked in.
std::vector<std::string> LoadBundledPlugins(attnkit::BackendRegistry& registry, const char* argv0,
                                            const std::set<std::string>& loaded) {
  std::vector<std::string> runfiles;
  for (const std::string& dir : RunfilesDirs(argv0)) {
    const std::string folder = dir + "/attnkit";
    if (std::find(runfiles.begin(), runfiles.end(), folder) == runfiles.end()) {
      runfiles.push_back(folder);
    }
  }
  const std::string exe = RealPath("/proc/self/exe");
  const std::string exe_dir = exe.substr(0, exe.rfind('/'));
  for (const char* relative : kBundledPlugins) {
    for (const std::string& path : PluginCandidates(runfiles, exe_dir, relative)) {
      if (access(path.c_str(), F_OK) != 0) continue;
      if (loaded.count(RealPath(path)) == 0) {
        const absl::Status s = registry.LoadPlugin(path);
        if (!s.ok()) {
          std::fprintf(stderr, "attnkit: warning: %s\n", std::string(s.message()).c_str());
        }
      }
      break;
    }
  }
  std::vector<std::string> looked = runfiles;
  looked.push_back(exe_dir + "/plugins");
  return looked;
}

}  // namespace

int main(int argc, char** argv) {
  // --version and --help are answered before Abseil parses (its own would
  // print Abseil's build text and every flag of every library).
  std::string first_positional;
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] != '-') {
      first_positional = argv[i];
      break;
    }
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--version" || a == "-version") {
      std::printf("attnkit %s (commit %s)\n", attnkit::AttnkitVersion(), attnkit::AttnkitCommit());
      return 0;
    }
    if (a == "--help" || a == "-help" || a == "-h" || a == "--helpfull" || a == "--helpshort") {
      const attnkit::CommandSpec* spec = attnkit::FindCommand(first_positional);
      std::fputs((spec != nullptr && spec->name != "help" ? attnkit::CommandHelp(*spec)
                                                          : attnkit::Overview())
                     .c_str(),
                 stdout);
      return 0;
    }
  }
  absl::SetProgramUsageMessage(attnkit::Overview());
  // --config.FIELD=VALUE flags follow the config's descriptor, not Abseil's
  // registry (which would refuse them): they are taken out before it parses.
  attnkit::SplitArgs split = attnkit::SplitConfigFlags(argc, argv);
  attnkit::ExpandBareJsonFlag(
      &split.rest, [](const std::string& word) { return attnkit::FindCommand(word) != nullptr; });
  std::vector<char*> args = absl::ParseCommandLine(split.rest_argc(), split.rest.data());
  if (args.size() < 2) {
    std::fprintf(stderr, "attnkit: expected a command\n\n%s", attnkit::Overview().c_str());
    return 2;
  }
  const std::string command = args[1];
  const attnkit::CommandSpec* spec = attnkit::FindCommand(command);
  if (spec == nullptr) {
    std::fprintf(stderr, "attnkit: unknown command '%s'\n\n%s", command.c_str(),
                 attnkit::Overview().c_str());
    return 2;
  }
  if (command == "help") {
    if (args.size() > 3) {
      std::fprintf(stderr, "attnkit help: expected at most one command\n");
      return 2;
    }
    if (args.size() == 3) {
      const attnkit::CommandSpec* about = attnkit::FindCommand(args[2]);
      if (about == nullptr) {
        std::fprintf(stderr, "attnkit help: unknown command '%s'\n\n%s", args[2],
                     attnkit::Overview().c_str());
        return 2;
      }
      std::fputs(attnkit::CommandHelp(*about).c_str(), stdout);
    } else {
      std::fputs(attnkit::Overview().c_str(), stdout);
    }
    return 0;
  }
  if (args.size() > 2) {
    std::fprintf(stderr, "attnkit %s: unexpected argument '%s' (flags are --name=value)\n",
                 command.c_str(), args[2]);
    return 2;
  }
  // A flag the command does not read is an error, not silently ignored.
  const absl::Status flags_ok =
      attnkit::CheckFlagsForCommand(*spec, attnkit::FlagNamesOnCommandLine(argc, argv));
  if (!flags_ok.ok()) {
    std::fprintf(stderr, "attnkit %s: error: %s\n", command.c_str(),
                 std::string(flags_ok.message()).c_str());
    return 2;
  }
  // A bad --config.* flag is a usage error too, found before any work.
  attnkit::AttentionConfig scratch;
  const absl::Status config_flags_ok =
      attnkit::ApplyConfigFlags(split.config_flags, command, &scratch);
  if (!config_flags_ok.ok()) {
    std::fprintf(stderr, "attnkit %s: error: %s\n", command.c_str(),
                 std::string(config_flags_ok.message()).c_str());
    return 2;
  }

  // The registry, with every plugin loaded, on first use: commands that need
  // no backend (cost, verify, inputs, peak) load no plugin and probe no GPU.
  auto registry = [&argv]() -> attnkit::BackendRegistry& {
    static attnkit::BackendRegistry* loaded = [&argv] {
      auto* r = new attnkit::BackendRegistry();
      std::set<std::string> named;
      std::string paths = absl::GetFlag(FLAGS_plugins);
      if (const char* env = std::getenv(attnkit::kPluginPathEnv)) {
        paths = absl::StrCat(paths, ":", env);
      }
      for (absl::string_view path : absl::StrSplit(paths, ':', absl::SkipEmpty())) {
        // The same file named twice (flag and environment) loads once.
        if (!named.insert(RealPath(std::string(path))).second) continue;
        const absl::Status s = r->LoadPlugin(std::string(path));
        if (!s.ok()) {
          std::fprintf(stderr, "attnkit: warning: %s\n", std::string(s.message()).c_str());
        }
      }
      const std::vector<std::string> looked = LoadBundledPlugins(*r, argv[0], named);
      // CPU backends no plugin provided: the linked-in copies, through the
      // same C table (names already registered are refused and kept).
      for (const std::string& name : attnkit::BuiltinBackendNames()) {
        if (r->Find(name).ok()) continue;
        r->Register(attnkit::LinkedThroughCAbi(attnkit::MakeBuiltinBackend(name)),
                    absl::StrCat("linked into attnkit (no plugin for it in ",
                                 absl::StrJoin(looked, ", "), ")"))
            .IgnoreError();
      }
      return r;
    }();
    return *loaded;
  };

  attnkit::CliOptions options;
  options.config = absl::GetFlag(FLAGS_config);
  options.config_flags = split.config_flags;
  options.backend = absl::GetFlag(FLAGS_backend);
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_backends), ',', absl::SkipEmpty())) {
    options.backends.emplace_back(name);
  }
  options.allow_skip = absl::GetFlag(FLAGS_allow_skip);
  options.q = absl::GetFlag(FLAGS_q);
  options.k = absl::GetFlag(FLAGS_k);
  options.v = absl::GetFlag(FLAGS_v);
  options.kv_lengths = absl::GetFlag(FLAGS_kv_lengths);
  options.mask = absl::GetFlag(FLAGS_mask);
  options.bias = absl::GetFlag(FLAGS_bias);
  options.sinks = absl::GetFlag(FLAGS_sinks);
  options.alibi_slopes = absl::GetFlag(FLAGS_alibi_slopes);
  options.out = absl::GetFlag(FLAGS_out);
  options.lse_out = absl::GetFlag(FLAGS_lse_out);
  options.o = absl::GetFlag(FLAGS_o);
  options.lse = absl::GetFlag(FLAGS_lse);
  options.dir = absl::GetFlag(FLAGS_dir);
  options.sample_rows = absl::GetFlag(FLAGS_sample_rows);
  options.suite = absl::GetFlag(FLAGS_suite);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.json = absl::GetFlag(FLAGS_json);
  options.svg = absl::GetFlag(FLAGS_svg);
  options.html = absl::GetFlag(FLAGS_html);
  options.wide = absl::GetFlag(FLAGS_wide);
  options.grad = absl::GetFlag(FLAGS_grad);
  options.compute = absl::GetFlag(FLAGS_compute);
  options.mask_convention = absl::GetFlag(FLAGS_mask_convention);
  options.baseline = absl::GetFlag(FLAGS_baseline);
  options.refresh = absl::GetFlag(FLAGS_refresh);
  options.layers = absl::GetFlag(FLAGS_layers);
  attnkit::GenerateOptions generate;
  generate.prompt_len = absl::GetFlag(FLAGS_prompt_len);
  generate.new_tokens = absl::GetFlag(FLAGS_new_tokens);
  generate.chunk = absl::GetFlag(FLAGS_chunk);
  generate.verify = absl::GetFlag(FLAGS_verify);
  generate.paged = absl::GetFlag(FLAGS_paged);
  generate.page_size = absl::GetFlag(FLAGS_page_size);
  options.count = absl::GetFlag(FLAGS_count);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.repro_dir = absl::GetFlag(FLAGS_repro_dir);
  attnkit::TrainOptions train;
  train.task = absl::GetFlag(FLAGS_task);
  train.steps = absl::GetFlag(FLAGS_steps);
  train.seq = absl::GetFlag(FLAGS_seq);
  train.vocab = absl::GetFlag(FLAGS_vocab);
  train.dim = absl::GetFlag(FLAGS_dim);
  train.heads = absl::GetFlag(FLAGS_heads);
  train.kv_heads = absl::GetFlag(FLAGS_kv_heads);
  train.lr = absl::GetFlag(FLAGS_lr);
  train.batch = absl::GetFlag(FLAGS_batch);
  train.log_every = absl::GetFlag(FLAGS_log_every);
  attnkit::RingOptions ring;
  ring.strategy = absl::GetFlag(FLAGS_strategy);
  ring.check = absl::GetFlag(FLAGS_check);
  ring.timeout_s = absl::GetFlag(FLAGS_timeout);
  ring.repeats = absl::GetFlag(FLAGS_repeats);
  ring.inject_fault = absl::GetFlag(FLAGS_inject_fault);
  if (command == "ring") {
    // ring's own default: one thread per rank, unless --threads is given.
    const std::vector<std::string> given = attnkit::FlagNamesOnCommandLine(argc, argv);
    if (std::find(given.begin(), given.end(), "threads") == given.end()) options.threads = 1;
  }
  if (command == "train") {
    // train's own default depth: two blocks, unless --layers is given.
    const std::vector<std::string> given = attnkit::FlagNamesOnCommandLine(argc, argv);
    if (std::find(given.begin(), given.end(), "layers") == given.end()) options.layers = 2;
  }

  absl::Status status;
  if (command == "backends") {
    status = attnkit::BackendsCommand(registry(), options, std::cout);
  } else if (command == "run") {
    status = attnkit::RunCommand(registry(), options, std::cout);
  } else if (command == "verify") {
    status = attnkit::VerifyCommand(options, std::cout);
  } else if (command == "inputs") {
    status = attnkit::InputsCommand(options, std::cout);
  } else if (command == "check") {
    status = attnkit::CheckCommand(registry(), options, std::cout);
  } else if (command == "cost") {
    status = attnkit::CostCommand(options, std::cout);
  } else if (command == "peak") {
    status = attnkit::PeakCommand(options, std::cout);
  } else if (command == "compare") {
    status = attnkit::CompareCommand(registry(), options, std::cout, std::cerr);
  } else if (command == "fuzz") {
    status = attnkit::FuzzCommand(registry(), options, std::cout);
  } else if (command == "tune") {
    status = attnkit::TuneCommand(registry(), options, std::cout, std::cerr);
  } else if (command == "generate") {
    status = attnkit::GenerateCommand(registry(), options, generate, std::cout);
  } else if (command == "train") {
    status = attnkit::TrainCommand(registry(), options, train, std::cout);
  } else if (command == "ring") {
    status = attnkit::RingCommand(registry(), options, ring, std::cout);
  }
  std::cout.flush();
  if (!status.ok()) {
    std::fprintf(stderr, "attnkit %s: error: %s\n", command.c_str(),
                 std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
