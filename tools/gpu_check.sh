#!/usr/bin/env bash
# The GPU check for the CUDA backends, on a machine with an sm_80+ GPU:
#   1. builds with CUDA forced on (--config=cuda),
#   2. runs the plugin test, then the conformance and property suites
#      filtered to the "cuda" and "cuda-cublas" backends,
#   3. runs benchmarks/cuda_bench (device-resident data, CUDA events).
# Results go to $1 (default $OUT, else ./gpu_check_results): summary.txt,
# the test logs, cuda_bench.json and cuda_bench.txt. Exit status 0 only when
# every step passed. Budget: under 8 minutes on one H200, build included.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-gpu_check_results}}
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"
jobs=$(nproc)
flags=(--config=cuda --jobs="$jobs" --noshow_progress --test_output=errors)
status=0
step() {  # step NAME TIMEOUT_S COMMAND...: runs it, records the result
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS rc=0
  timeout "$limit" "$@" > "$out/$name.txt" 2>&1 || rc=$?
  echo "$name: $([[ $rc -eq 0 ]] && echo PASS || echo "FAIL (exit $rc)") in $((SECONDS - start)) s" | tee -a "$summary"
  [[ $rc -eq 0 ]] || status=1
  return $rc
}

command -v bazel > /dev/null || { echo "gpu_check: bazel is not installed (see tools/setup.sh)" | tee -a "$summary"; exit 1; }
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || echo "gpu_check: nvidia-smi failed (see nvidia-smi.txt)" | tee -a "$summary"

step build 360 bazel build "${flags[@]}" //backends/cuda:all //tests:conformance_test \
  //tests:property_test //benchmarks:cuda_bench || { cat "$out/build.txt"; exit 1; }

step plugin_test 120 bazel test "${flags[@]}" //backends/cuda:all
# Conformance case names end in /<backend>_<problem>; property tests in /<backend>.
step conformance 300 bazel test "${flags[@]}" //tests:conformance_test //tests:property_test \
  '--test_arg=--gtest_filter=*/cuda_*:*/cuda:*/cuda_cublas'
for t in conformance_test property_test; do
  for log in bazel-testlogs/tests/$t/test.log bazel-testlogs/tests/$t/shard_*_of_*/test.log; do
    [[ -f $log ]] && cp "$log" "$out/${t}_$(basename "$(dirname "$log")").log"
  done
done
cp bazel-testlogs/backends/cuda/cuda_plugin_test/test.log "$out/cuda_plugin_test.log" 2> /dev/null

step benchmark 180 bazel-bin/benchmarks/cuda_bench --benchmark_min_time=0.3 \
  --benchmark_out="$out/cuda_bench.json" --benchmark_out_format=json
cp "$out/benchmark.txt" "$out/cuda_bench.txt" 2> /dev/null

# Per-backend counts from the suites' end-of-run summaries.
grep -h -A3 '^cuda' "$out"/conformance_test_*.log "$out"/property_test_*.log >> "$summary" 2> /dev/null
cat "$summary"
bazel shutdown > /dev/null 2>&1 || true
exit $status
