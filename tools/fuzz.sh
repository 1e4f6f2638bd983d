#!/usr/bin/env bash
# Longer fuzzing runs by hand, with real libFuzzer binaries (clang-14,
# -fsanitize=fuzzer,address,undefined; see --config=fuzz in .bazelrc):
#   tools/fuzz.sh TARGET [SECONDS] [extra libFuzzer flags...]
# TARGET is config, npy or plugin. New inputs accumulate in
# /tmp/attnkit_fuzz/TARGET (pass -jobs=2 to use both cores). A crash leaves
# crash-* in the current directory: fix it, then copy the input into
# tests/fuzz/corpus/TARGET/ so every test run replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: tools/fuzz.sh config|npy|plugin [SECONDS] [libFuzzer flags]}
seconds=${2:-600}
shift $(( $# >= 2 ? 2 : 1 ))
bazel build --config=fuzz "//tests/fuzz:${target}_fuzz_test_bin"
bin=$(bazel info --config=fuzz bazel-bin)/tests/fuzz/${target}_fuzz_test_bin
work=/tmp/attnkit_fuzz/$target
mkdir -p "$work"
exec "$bin" -max_total_time="$seconds" -dict="tests/fuzz/$target.dict" -timeout=20 \
  -rss_limit_mb=3072 -max_len=8192 -print_final_stats=1 "$@" "$work" "tests/fuzz/corpus/$target"
