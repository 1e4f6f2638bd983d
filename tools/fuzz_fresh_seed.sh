#!/usr/bin/env bash
# The differential fuzzer (forward and backward) on a seed drawn afresh each
# run, so CI explores new problems every time instead of replaying the fixed
# seeds of //tests:diff_fuzz_test. The seed is printed first: a failure is
# replayed with the same command (it also prints a shrunk `attnkit check`
# reproduction). Needs bazel-bin/tools/attnkit (tools/test.sh builds it).
#
#   tools/fuzz_fresh_seed.sh [SEED]      (default: drawn from the clock)
set -euo pipefail
cd "$(dirname "$0")/.."
seed=${1:-$(( $(date +%s%N) % 1000000007 ))}
bin=bazel-bin/tools/attnkit
backends=highway,blas,onednn,reference
repro=$(mktemp -d)
echo "fuzz_fresh_seed: seed $seed; replay: tools/fuzz_fresh_seed.sh $seed"
"$bin" fuzz --count=2000 --seed="$seed" --backends=$backends --repro_dir="$repro"
"$bin" fuzz --grad --count=3000 --seed="$seed" --backends=$backends --repro_dir="$repro"
rm -rf "$repro"  # kept when a run fails: its shrunk configs are the reproduction
