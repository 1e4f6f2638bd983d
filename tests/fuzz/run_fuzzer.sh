#!/usr/bin/env bash
# Runs one fuzz target for a bounded time over its checked-in corpus:
#   run_fuzzer.sh BINARY CORPUS_DIR DICT [SECONDS]
# BINARY is a real libFuzzer binary under --config=fuzz and our replay-and-
# mutate driver (tests/fuzz/fuzz_driver.cc) otherwise; both take these flags.
# $FUZZ_SECONDS overrides the time (e.g. --test_env=FUZZ_SECONDS=60).
# New inputs go to a scratch directory; crashes to the test's outputs.
set -euo pipefail
bin=$1 corpus=$2 dict=$3
seconds=${FUZZ_SECONDS:-${4:-3}}
scratch=${TEST_TMPDIR:-$(mktemp -d)}/new_inputs
artifacts=${TEST_UNDECLARED_OUTPUTS_DIR:-${TEST_TMPDIR:-/tmp}}/
mkdir -p "$scratch"
exec "$bin" -max_total_time="$seconds" -seed="${FUZZ_SEED:-1}" -dict="$dict" \
  -artifact_prefix="$artifacts" -timeout=20 -rss_limit_mb=3072 -max_len=8192 \
  -print_final_stats=1 "$scratch" "$corpus"
