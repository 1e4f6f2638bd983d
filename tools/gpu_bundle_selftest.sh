#!/usr/bin/env bash
# The GPU bundle on a machine without a GPU (CI, this build machine): builds
# it (under 61 MiB or the build fails), then checks that its runner
#   - stops with exit 1 and one line naming why the GPU is unusable, leaving
#     only summary.txt and results.json in $OUT,
#   - with --allow_no_gpu runs every suite and passes (CUDA cases skipped),
#     leaving at most six small files in $OUT and no scratch behind, and
#   - keeps the GPU machine's limits (tools/gpu_bundle/run_test.sh on the
#     bundle's own run.sh: the budget arithmetic, $OUT's file count and
#     sizes under simulated runs, the closing summary), and its
#     kernel_times.sh works beside its bundle_env.sh (kernel_times_test.sh).
# On a machine with a usable GPU it says so and runs the bundle for real.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-out/gpu_bundle}
tools/make_gpu_bundle.sh "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# check_out DIR MAX: at most MAX files in DIR, each under 16 MiB, 64 MiB in all.
check_out() {
  local n total
  n=$(find "$1" -type f | wc -l)
  total=$(du -sb "$1" | cut -f1)
  if ((n > $2)) || find "$1" -type f -size +16M | grep -q . || ((total > 64 << 20)); then
    echo "gpu_bundle_selftest: FAIL: \$OUT holds $n files, $total bytes (at most $2 files):"
    ls -la "$1"
    exit 1
  fi
  echo "\$OUT: $n files, $total bytes: $(ls "$1" | paste -sd ' ' -)"
}

rc=0
mkdir -p "$tmp/first"
first=$(OUT=$tmp/first "$dir/run.sh" 2>&1) || rc=$?
if [[ $first != *"gpu bundle: FAIL: no usable GPU:"* ]]; then
  echo "gpu_bundle_selftest: a GPU is usable here; the bundle ran for real (exit $rc):"
  echo "$first"
  exit $rc
fi
lines=$(wc -l <<< "$first")
if ((rc != 1 || lines != 1)); then
  echo "gpu_bundle_selftest: FAIL: without a GPU run.sh must exit 1 with one line; got exit $rc:"
  echo "$first"
  exit 1
fi
echo "without a GPU: exit 1, '$first'"
check_out "$tmp/first" 2

mkdir -p "$tmp/cpu" "$tmp/scratch"
OUT=$tmp/cpu TMPDIR=$tmp/scratch "$dir/run.sh" --allow_no_gpu
check_out "$tmp/cpu" 6
if [[ -n $(ls -A "$tmp/scratch") ]]; then
  echo "gpu_bundle_selftest: FAIL: run.sh left its scratch folder behind: $(ls "$tmp/scratch")"
  exit 1
fi

tools/gpu_bundle/run_test.sh "$dir/run.sh"
tools/gpu_bundle/kernel_times_test.sh "$dir/kernel_times.sh"
echo "gpu_bundle_selftest: PASS"
