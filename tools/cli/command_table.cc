#include "tools/cli/command_table.h"

#include <algorithm>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/config.pb.h"
#include "tools/cli/config_flags.h"

namespace attnkit {

const std::vector<CommandSpec>& Commands() {
  static const auto* commands = new std::vector<CommandSpec>{
      {"backends",
       "each backend: available or why not, where it was loaded from, its capabilities",
       {},
       {"json", "plugins"},
       {"attnkit backends", "attnkit backends --json=- | jq '.backends[].name'"}},
      {"run",
       "one backend on .npy tensors; says which backend and kernel ran and why; outputs are "
       "written whole or not at all",
       {"q", "k", "v", "out"},
       {"config", "backend", "compute", "kv_lengths", "mask", "mask_convention", "bias", "sinks",
        "alibi_slopes", "lse_out", "threads", "json", "plugins"},
       {"attnkit run --q=q.npy --k=k.npy --v=v.npy --out=o.npy   (shapes from the arrays)",
        "attnkit run --config=gqa.textproto --q=q.npy --k=k.npy --v=v.npy --out=o.npy "
        "--mask=m.npy --mask_convention=torch --backend=blas"},
       {{"config", "the shapes come from the arrays (reported)"},
        {"backend", "the config's, else auto"},
        {"compute", "the config's, else exact"}}},
      {"check",
       "every backend on the config's random inputs against the fp64 reference: error as a "
       "fraction of the oracle's bound, pass/fail",
       {},
       {"config", "backends", "allow_skip", "grad", "compute", "json", "wide", "plugins"},
       {"attnkit check --config=gqa.textproto", "attnkit check --backends=highway,blas --json=-",
        "attnkit check --config=gqa.textproto --config.mask.kind=sliding_window "
        "--config.mask.window_left=128",
        "attnkit check --config=gqa.textproto --grad   (dQ, dK, dV against the fp64 reference)",
        "attnkit check --config.dtype=bf16 --compute=fast   (Q rounded to bf16 before Q.K)"},
       {{"compute", "the config's, else exact"}}},
      {"verify",
       "an output another implementation produced, against the fp64 reference with check's "
       "oracle",
       {"q", "k", "v", "o"},
       {"config", "compute", "lse", "sample_rows", "kv_lengths", "mask", "mask_convention", "bias",
        "sinks", "alibi_slopes", "json"},
       {"attnkit verify --config=gqa.textproto --q=q.npy --k=k.npy --v=v.npy --o=torch_o.npy",
        "attnkit verify --config=bf16.textproto --compute=fast --q=q.npy --k=k.npy --v=v.npy "
        "--o=fast_kernel_o.npy   (the bound of a kernel that rounds Q and P)"},
       {{"config", "the shapes come from the arrays"}, {"compute", "the config's, else exact"}}},
      {"inputs",
       "the config's random inputs (those check and compare use) as .npy files",
       {"dir"},
       {"config"},
       {"attnkit inputs --config=gqa.textproto --dir=/tmp/gqa"}},
      {"cost",
       "useful FLOPs, bytes moved, score size, KV-cache bytes (for N layers), parameters",
       {},
       {"config", "layers", "json"},
       {"attnkit cost --config=decode.textproto --layers=32",
        "attnkit cost --config.num_heads=32 --config.head_dim=128 --config.q_len=1 "
        "--config.kv_len=4096"}},
      {"generate",
       "prefill + KV-cached decode (dense or paged cache) through N attention layers: tokens/s "
       "per phase and the backend each phase ran on, checked against a full recompute",
       {},
       {"config", "layers", "prompt_len", "new_tokens", "chunk", "verify", "paged", "page_size",
        "backend", "compute", "threads", "json", "plugins"},
       {"attnkit generate --layers=4 --prompt_len=512 --new_tokens=32 --chunk=128",
        "attnkit generate --config=int8.textproto --paged --page_size=64",
        "attnkit generate --config.kv_dtype=bf16 --compute=fast   (Q rounded to the cache's type)"},
       {{"backend", "the config's, else auto (chosen per call: prefill and decode may differ)"},
        {"compute", "the config's, else exact"},
        {"paged", "false, unless the config sets page_size"},
        {"page_size", "the config's page_size, else 16"}}},
      {"compare",
       "every backend (and auto) on the same data, each checked then timed, as % of this "
       "machine's limits measured in the same run",
       {},
       {"config", "suite", "backends", "threads", "grad", "compute", "json", "svg", "html",
        "baseline", "wide", "plugins"},
       {"attnkit compare --suite=standard --json=run.json --svg=run.svg --html=run.html",
        "attnkit compare --config=decode.textproto --baseline=yesterday.json",
        "attnkit compare --grad   (the backward pass of every suite problem that has one)",
        "attnkit compare --compute=fast   (every suite problem computed FAST where allowed)"},
       {{"config", "the suite; with --config.* flags alone, the built-in example"},
        {"compute", "each config's, else exact"}}},
      {"peak",
       "this machine's limits: peak FMA per Highway target, read bandwidth, OpenBLAS sgemm",
       {},
       {"threads", "refresh", "json"},
       {"attnkit peak --refresh", "attnkit peak --json=- | jq .limits.read_gbps"}},
      {"tune",
       "times the backends per shape class (decode, short and long prefill) and K/V dtype and "
       "records the order auto then uses on this machine and thread count",
       {},
       {"threads", "backends", "json", "plugins"},
       {"attnkit tune --threads=2"}},
      {"fuzz",
       "random valid problems on every backend against the reference; mismatches are shrunk "
       "and printed as a one-line check",
       {},
       {"count", "seed", "backends", "allow_skip", "grad", "compute", "repro_dir", "json",
        "plugins"},
       {"attnkit fuzz --count=500 --seed=7",
        "attnkit fuzz --grad --count=200   (dQ, dK, dV of random dense problems)",
        "attnkit fuzz --compute=fast --backends=highway   (every problem FAST)"},
       {{"compute", "drawn: fast for about a third of the 16-bit and int8 K/V problems"}}},
      {"train",
       "trains a tiny Transformer (attention backward pass on the chosen backend, Adam) on the "
       "copy or reverse task: loss, accuracy on the target tokens, tokens/s",
       {},
       {"task", "layers", "backend", "steps", "seq", "vocab", "dim", "heads", "kv_heads", "lr",
        "batch", "log_every", "seed", "threads", "json", "plugins"},
       {"attnkit train --task=copy --layers=2",
        "attnkit train --task=reverse --backend=blas --steps=400 --json=curve.json",
        "attnkit train --backend=reference --dim=32 --batch=8 --steps=150   (the slow one)"},
       {{"layers", "2"},
        {"backend",
         "auto: the first of cuda, highway, blas, onednn, reference that trains on the host"},
        {"log_every", "about 20 lines per run"}}},
      {"ring",
       "one problem sharded over the ranks of an MPI job (mpirun -np N attnkit ring): ring or "
       "Ulysses attention; per rank compute time, bytes sent, network wait and overlap; --check "
       "compares the gathered result with the fp64 reference",
       {},
       {"config", "strategy", "check", "grad", "backend", "threads", "timeout", "repeats",
        "inject_fault", "plugins"},
       {"mpirun -np 4 attnkit ring --config=long_causal.textproto --check",
        "mpirun -np 2 attnkit ring --config=gqa.textproto --strategy=auto --repeats=5",
        "mpirun -np 2 attnkit ring --config=gqa.textproto --grad --check   (dQ, dK, dV too)",
        "attnkit ring --check   (one rank, without mpirun)"},
       {{"backend", "the config's, else highway"},
        {"threads", "1 (the ranks share the machine's cores)"}}},
      {"help",
       "this overview, or one command's flags with defaults and examples",
       {},
       {},
       {"attnkit help run", "attnkit run --help"}},
  };
  return *commands;
}

const CommandSpec* FindCommand(const std::string& name) {
  for (const CommandSpec& c : Commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

namespace {

bool ReadsFlag(const CommandSpec& c, const std::string& name) {
  return std::find(c.required.begin(), c.required.end(), name) != c.required.end() ||
         std::find(c.optional.begin(), c.optional.end(), name) != c.optional.end();
}

std::string Synopsis(const CommandSpec& c) {
  std::string s = c.name;
  for (const std::string& f : c.required) absl::StrAppend(&s, " --", f, "=...");
  if (!c.optional.empty()) absl::StrAppend(&s, " [flags]");
  return s;
}

}  // namespace

std::string Overview() {
  std::string out =
      "attnkit COMMAND [flags]   (attnkit help COMMAND: its flags, defaults and examples)\n\n";
  for (const CommandSpec& c : Commands()) {
    absl::StrAppend(&out, "  ", Synopsis(c), "\n      ", c.summary, "\n");
  }
  absl::StrAppend(&out, "  --version\n      attnkit's version and the commit it was built from\n");
  return out;
}

std::string CommandHelp(const CommandSpec& c) {
  std::string out =
      absl::StrCat("attnkit ", c.name, ": ", c.summary, "\n\nusage: attnkit ", Synopsis(c), "\n");
  const auto describe = [&out, &c](const std::string& name, bool required) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    std::string help = flag != nullptr ? flag->Help() : "";
    // Shared help texts start with the commands they concern ("run, verify:").
    const size_t colon = help.find(": ");
    if (colon != std::string::npos &&
        help.find_first_not_of("abcdefghijklmnopqrstuvwxyz, ") == colon) {
      help = help.substr(colon + 2);
    }
    std::string def = flag != nullptr ? flag->DefaultValue() : "";
    for (const auto& [f, meaning] : c.defaults) {
      if (f == name) def = meaning;
    }
    if (required) {
      def = "required";
    } else if (def.empty()) {
      def = "default: unset";
    } else {
      def = absl::StrCat("default: ", def);
    }
    absl::StrAppendFormat(&out, "  --%-16s %s\n  %-18s (%s)\n", name, help, "", def);
  };
  if (!c.required.empty() || !c.optional.empty()) out += "\nflags:\n";
  for (const std::string& f : c.required) describe(f, true);
  for (const std::string& f : c.optional) describe(f, false);
  if (ReadsFlag(c, "config")) {
    out +=
        "\nconfig fields (set over the --config file or the default, in command-line order;\n"
        "a list is comma-separated, an empty value clears the field):\n";
    for (const ConfigFlagDoc& doc : ConfigFlagDocs(*AttentionConfig::descriptor())) {
      absl::StrAppend(&out, "  ", doc.usage, "\n");
    }
  }
  if (!c.examples.empty()) {
    out += "\nexamples:\n";
    for (const std::string& e : c.examples) absl::StrAppend(&out, "  ", e, "\n");
  }
  return out;
}

absl::Status CheckFlagsForCommand(const CommandSpec& c, const std::vector<std::string>& given) {
  for (const std::string& name : given) {
    // --config.FIELD flags belong to the commands that read a config.
    const bool config_field = absl::StartsWith(name, "config.") && ReadsFlag(c, "config");
    if (config_field || ReadsFlag(c, name)) continue;
    std::vector<std::string> reads;
    for (const std::string& f : c.required) reads.push_back("--" + f);
    for (const std::string& f : c.optional) reads.push_back("--" + f);
    return absl::InvalidArgumentError(absl::StrFormat(
        "--%s is not a flag of %s; it reads %s (attnkit help %s)", name, c.name,
        reads.empty() ? std::string("no flags") : absl::StrJoin(reads, ", "), c.name));
  }
  return absl::OkStatus();
}

std::vector<std::string> FlagNamesOnCommandLine(int argc, char** argv) {
  std::vector<std::string> names;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (a == "--") break;
    if (!absl::StartsWith(a, "-") || a == "-") continue;
    a.remove_prefix(absl::StartsWith(a, "--") ? 2 : 1);
    std::string name(a.substr(0, a.find('=')));
    // --noNAME for a boolean NAME.
    if (absl::FindCommandLineFlag(name) == nullptr && absl::StartsWith(name, "no") &&
        absl::FindCommandLineFlag(name.substr(2)) != nullptr) {
      name = name.substr(2);
    }
    names.push_back(name);
  }
  return names;
}

}  // namespace attnkit
