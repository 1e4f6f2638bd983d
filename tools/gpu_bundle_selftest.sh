#!/usr/bin/env bash
# The GPU bundle on a machine without a GPU (CI, this build machine): builds
# it (under 60 MiB or the build fails), then checks that its runner
#   - stops with exit 1 and one line naming why the GPU is unusable, and
#   - with --allow_no_gpu runs every suite and passes (CUDA cases skipped).
# On a machine with a usable GPU it says so and runs the bundle for real.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-out/gpu_bundle}
tools/make_gpu_bundle.sh "$dir"
rc=0
first=$("$dir/run.sh" 2>&1) || rc=$?
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
OUT=$(mktemp -d) "$dir/run.sh" --allow_no_gpu
echo "gpu_bundle_selftest: PASS"
