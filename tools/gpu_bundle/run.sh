#!/usr/bin/env bash
# The GPU check, run from inside a bundle made by tools/make_gpu_bundle.sh
# (copied there as run.sh). Needs glibc >= 2.36, the NVIDIA driver and CUDA
# 13's cuBLAS on the machine; nothing else.
#
#   ./run.sh [--allow_no_gpu] [--budget_s=N] [--suites=A,B] [--plan] [--fake=SPEC]
#
# The GPU machine gives a run about 15 minutes in all and brings back only
# $OUT (at most 8 files of 16 MiB) and the last 12,000 characters of output.
# So the suites run in order of value, each under its own cap, and the caps
# with the set-up reserve fit in the default budget (SUITES below; --plan
# prints them). $OUT gets at most six small files: summary.txt, results.json
# (every suite's counts and times, the benchmark's numbers) and the trimmed
# log of each failing suite (at most four, 256 KiB each). Full logs, inputs,
# .npy files and benchmark output stay in a scratch folder removed at the
# end. The output ends with a one-screen summary. Exit 0 only when every
# suite passed.
#
# --suites=A,B runs only the suites named (a rerun of what failed, on what
# is left of the machine's time); the others are listed as not selected and
# do not fail the run.
#
# With a usable GPU every suite runs with ATTNKIT_REQUIRE_BACKENDS=cuda,
# cuda-cublas, so a skipped CUDA case fails. Without one it stops at once
# with one line naming why, unless --allow_no_gpu, which runs the same suites
# with the CUDA cases skipped (the CPU part). --fake=SPEC runs stand-in
# suites instead of the bundle's binaries (no GPU or bundle needed) on a
# simulated clock, for the self-test of this script (run_test.sh): SPEC is a
# comma-separated list of SUITE=BEHAVIOUR or *=BEHAVIOUR, where BEHAVIOUR is
# pass, fail, overrun (uses its whole limit and is cut off), big (passes
# after 20 MiB of log) or bigfail.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)

# name:cap_s, in order of value. Left out of the GPU run (they ran on the
# CPU before the bundle was made, or another suite covers them): the
# reference plugin, the CUDA host unit tests, property_test, diff_fuzz_test,
# the CLI check and compute-mode sweeps (the conformance grid's FAST twins
# and cuda_plugin_test's ComputeModesMatchReferenceOnGpu run both modes).
# Caps from the first GPU runs (H200, 2026-12-04): conformance 21 s, plugin
# 34 s (once each fp64 reference was computed once and the two-stream
# test's side by side), python 24 s, grad_conformance 3 s, concurrency 0 s;
# torch_sdpa 82 s for six `attnkit compare` runs (each measures the
# machine's limits first), now nine with bf16's FAST twins.
SUITES=(conformance:60 plugin:80 torch_sdpa:160 python:40 grad_conformance:20 concurrency:20)
# Unpacking libraries, the GPU probe and the summary, before and after.
RESERVE_S=30
DEFAULT_BUDGET_S=420
MAX_OUT_LOGS=4
LOG_BYTES=262144

allow_no_gpu=0
budget=$DEFAULT_BUDGET_S
plan=0
fake=""
only=""
for arg in "$@"; do
  case "$arg" in
    --allow_no_gpu) allow_no_gpu=1 ;;
    --suites=*) only=${arg#--suites=} ;;
    --budget_s=*) budget=${arg#--budget_s=} ;;
    --plan) plan=1 ;;
    --fake=*) fake=${arg#--fake=} ;;
    *)
      echo "run.sh: unknown argument '$arg' (known: --allow_no_gpu, --budget_s=N, --suites=A,B, --plan, --fake=SPEC)" >&2
      exit 2
      ;;
  esac
done
if [[ ! $budget =~ ^[0-9]+$ ]]; then
  echo "run.sh: --budget_s must be a whole number of seconds, not '$budget'" >&2
  exit 2
fi

if [[ -n $only ]]; then
  IFS=, read -ra wanted <<< "$only"
  for w in "${wanted[@]}"; do
    known=0
    for s in "${SUITES[@]}"; do [[ ${s%%:*} == "$w" ]] && known=1; done
    if ((!known)); then
      echo "run.sh: --suites names '$w', which is not a suite (known: ${SUITES[*]%%:*})" >&2
      exit 2
    fi
  done
fi
selected() { [[ -z $only || ",$only," == *",$1,"* ]]; }

if ((plan)); then
  sum=0
  for s in "${SUITES[@]}"; do
    echo "suite ${s%%:*} cap ${s##*:}"
    sum=$((sum + ${s##*:}))
  done
  echo "caps $sum reserve $RESERVE_S budget $budget default $DEFAULT_BUDGET_S"
  exit 0
fi

out=${OUT:-$here/results}
mkdir -p "$out"
# Only this run's files: an earlier run's into the same folder go first.
for s in summary.txt results.json "${SUITES[@]%%:*}"; do
  [[ $s == *.* ]] && rm -f "$out/$s" || rm -f "$out/$s.log"
done
scratch=$(mktemp -d "${TMPDIR:-/tmp}/attnkit_gpu_bundle.XXXXXX") || exit 1
trap 'rm -rf "$scratch"' EXIT
start=$SECONDS
virtual_s=0 # --fake: seconds the stand-in suites pretend to take
elapsed() { echo $((SECONDS - start + virtual_s)); }

json_str() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=$(tr -d '\000-\010\013-\037' <<< "$s" | tr '\t\n' '  ')
  printf '"%s"' "${s% }"
}

commit=$(cat "$here/COMMIT" 2> /dev/null || echo unknown)
gpu=""
mode=gpu
if [[ -n $fake ]]; then
  mode=fake
  virtual_s=20 # as if unpacking and the probe had taken that long
  gpu="fake GPU (--fake=$fake)"
  export ATTNKIT_REQUIRE_BACKENDS=cuda,cuda-cublas
else
  # The bundle's libraries unpacked, and CUDA's on the library path
  # (bundle_env.sh: sets cuda_dirs).
  # shellcheck source=tools/gpu_bundle/bundle_env.sh
  source "$here/bundle_env.sh" && bundle_env "$here" || exit 1

  # Is the GPU usable? The plugin's own probe says why not.
  probe=$("$here/bin/attnkit" backends --plugins="$here/lib/libattnkit_cuda.so" 2>&1)
  cuda_line=$(grep -m1 '^cuda:' <<< "$probe")
  if [[ $cuda_line != "cuda: available"* ]]; then
    reason=${cuda_line#cuda: }
    reason=${reason#unavailable: }
    [[ -n $reason ]] || reason="the CUDA plugin did not load: $(tail -1 <<< "$probe")"
    if ((!allow_no_gpu)); then
      line="gpu bundle: FAIL: no usable GPU: $reason (--allow_no_gpu runs the CPU part)"
      echo "$line" > "$out/summary.txt"
      printf '{"commit": %s, "mode": "no_gpu", "verdict": "FAIL", "reason": %s, "suites": []}\n' \
        "$(json_str "$commit")" "$(json_str "$reason")" > "$out/results.json"
      echo "$line"
      exit 1
    fi
    mode=no_gpu
    gpu="none ($reason)"
    echo "gpu bundle: no usable GPU ($reason); --allow_no_gpu: CUDA cases skip"
  else
    export ATTNKIT_REQUIRE_BACKENDS=cuda,cuda-cublas
    gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
      2> /dev/null | paste -sd ';' -)
    gpu=${gpu:-"a usable GPU (nvidia-smi gave nothing)"}
  fi
fi
echo "gpu bundle: commit $commit, budget ${budget} s, $(elapsed) s of set-up; logs under $scratch"

status=0
out_files=(summary.txt results.json)
rows=()      # the summary table
json_rows=() # results.json's suites
excerpts=()  # a few failure lines per failing suite, for the screen
kept_logs=0
have_gpu() { [[ -n ${ATTNKIT_REQUIRE_BACKENDS:-} ]]; }

cap_of() {
  local s
  for s in "${SUITES[@]}"; do [[ ${s%%:*} == "$1" ]] && echo "${s##*:}" && return; done
  echo 0
}

# A stand-in suite for --fake: gtest-like output; overrun pretends to take
# its whole limit and be cut off (exit 124).
fake_behaviour() {
  local name=$1 b=pass item
  IFS=, read -ra items <<< "$fake"
  for item in "${items[@]}"; do
    [[ ${item%%=*} == "*" ]] && b=${item#*=}
  done
  for item in "${items[@]}"; do
    [[ ${item%%=*} == "$name" ]] && b=${item#*=}
  done
  echo "$b"
}
fake_suite() {
  local name=$1 behaviour=$2
  echo "[==========] Running 3 tests from 1 test suite. ($name, fake)"
  case "$behaviour" in
    big | bigfail)
      yes "[ RUN      ] Fake.Padding: a line of log that a real suite might print" |
        head -c $((20 << 20))
      echo
      ;;
  esac
  case "$behaviour" in
    pass | big)
      echo "[       OK ] Fake/Case.Run/cuda_gqa_d64 (1 ms)"
      echo "[       OK ] Fake/Case.Run/cuda_gqa_d64_fast (1 ms)"
      echo "[       OK ] Fake/Case.Run/cuda_cublas_gqa_d64 (1 ms)"
      echo "[  PASSED  ] 3 tests."
      return 0
      ;;
    fail | bigfail)
      echo "fake_test.cc:12: Failure"
      echo "Expected equality of these values: $name's output and the reference"
      echo "[  FAILED  ] Fake.Case1"
      echo "[  PASSED  ] 1 test."
      echo "[  FAILED  ] 2 tests, listed below:"
      return 1
      ;;
    overrun)
      echo "[ RUN      ] Fake.Slow"
      return 124
      ;;
    *)
      echo "fake: unknown behaviour '$behaviour'"
      return 2
      ;;
  esac
}

# The trimmed copy of a failing suite's log that goes to $OUT: the failure
# lines with a little context, then the end of the log.
trim_log() {
  local log=$1 lines
  lines=$(wc -l < "$log")
  {
    echo "== $(basename "$log" .log): $lines lines; failure lines first, then the last 150 lines"
    grep -n -m 150 -A 3 -e 'Failure' -e '\[  FAILED  \]' -e 'FAIL' -e 'rror' "$log" | cut -c1-400
    echo "== last 150 lines"
    tail -n 150 "$log" | cut -c1-400
  } | head -c "$LOG_BYTES"
}

# suite NAME COMMAND...: runs under min(cap, what is left of the budget),
# its whole log in the scratch folder.
suite() {
  local name=$1 cap
  shift
  if ! selected "$name"; then
    not_run "$name" "not selected"
    echo "[$name] not selected"
    return
  fi
  cap=$(cap_of "$name")
  local left=$((budget - $(elapsed)))
  local limit=$((cap < left ? cap : left))
  local log="$scratch/$name.log" t0 rc=0
  t0=$(elapsed)
  if ((limit <= 0)); then
    record "$name" "$cap" 0 0 - - - 'NOT RUN (budget spent)' ""
    status=1
    return
  fi
  if [[ -n $fake ]]; then
    local behaviour
    behaviour=$(fake_behaviour "$name")
    fake_suite "$name" "$behaviour" > "$log" 2>&1 || rc=$?
    if ((rc == 124)); then virtual_s=$((virtual_s + limit)); else virtual_s=$((virtual_s + 1)); fi
  else
    timeout -k 10 "$limit" "$@" > "$log" 2>&1 || rc=$?
    ((rc == 137)) && rc=124 # killed 10 s after the TERM
  fi
  local passed failed skipped verdict
  passed=$(grep -m1 -aoP '^\[  PASSED  \] \K[0-9]+' "$log" || echo 0)
  failed=$(grep -m1 -aoP '^\[  FAILED  \] \K[0-9]+(?= tests?,)' "$log" || echo 0)
  skipped=$(grep -m1 -aoP '^\[  SKIPPED \] \K[0-9]+' "$log" || echo 0)
  if ((rc == 0)); then
    verdict=pass
  elif ((rc == 124)); then
    verdict="FAIL (cut off after ${limit} s)"
    status=1
  else
    verdict="FAIL (exit $rc)"
    status=1
  fi
  local kept=""
  if ((rc != 0)); then
    if ((kept_logs < MAX_OUT_LOGS)); then
      trim_log "$log" > "$out/$name.log"
      kept="$name.log"
      kept_logs=$((kept_logs + 1))
      out_files+=("$kept")
    fi
    local lines
    lines=$(grep -a -m 4 -e 'Failure' -e '\[  FAILED  \]' -e 'FAIL' -e 'rror' "$log" | cut -c1-200)
    [[ -n $lines ]] || lines=$(tail -n 3 "$log" | cut -c1-200)
    excerpts+=("[$name] ${kept:-log not kept (only $MAX_OUT_LOGS are)}" "$(sed 's/^/    /' <<< "$lines")")
  fi
  local detail=""
  if [[ $name == conformance ]]; then
    # Both compute modes: the grid's FAST twins end in _fast.
    local fast exact
    fast=$(grep -ac '^\[       OK \] .*_fast ' "$log")
    exact=$(($(grep -ac '^\[       OK \] ' "$log") - fast))
    detail="passed: exact $exact, fast $fast"
  fi
  record "$name" "$cap" "$limit" $(($(elapsed) - t0)) "$passed" "$failed" "$skipped" "$verdict" \
    "$kept" "$detail"
  echo "[$name] $(($(elapsed) - t0)) s: $verdict (passed $passed, failed $failed, skipped $skipped)"
}

json_num() { [[ $1 =~ ^[0-9]+$ ]] && echo "$1" || echo null; }

# record NAME CAP LIMIT TIME PASSED FAILED SKIPPED RESULT LOG [DETAIL]
record() {
  rows+=("$(printf '%-17s %7s %7s %7s %6s %5s  %s' "$1" "$5" "$6" "$7" "$4" "$2" "$8${10:+; ${10}}")")
  json_rows+=("$(printf '{"name": %s, "cap_s": %s, "limit_s": %s, "time_s": %s, "passed": %s, "failed": %s, "skipped": %s, "result": %s, "log": %s, "detail": %s}' \
    "$(json_str "$1")" "$2" "$3" "$4" "$(json_num "$5")" "$(json_num "$6")" "$(json_num "$7")" \
    "$(json_str "$8")" \
    "$([[ -n $9 ]] && json_str "$9" || echo null)" "$(json_str "${10:-}")")")
}

not_run() {
  record "$1" "$(cap_of "$1")" 0 0 - - - "not run ($2)" ""
}

bin=$here/bin
cuda_so=$here/lib/libattnkit_cuda.so
has_torch=0
has_numpy=0
if [[ -n $fake ]]; then
  has_torch=1
  has_numpy=1
else
  python3 -c 'import torch' 2> /dev/null && has_torch=1
  python3 -c 'import numpy' 2> /dev/null && has_numpy=1
fi
bench_json=$scratch/bench.json

# 1. The conformance grid on both CUDA backends, every third case (problems
# spread over the grid, EXACT and their FAST twins alike).
# Case names: .../<backend>_<problem>[_fast].
GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=0 suite conformance "$bin/conformance_test" \
  --plugin="$cuda_so" '--gtest_filter=*/cuda_*'
# 2. The plugin's own GPU tests: small problems, decode and split-K, two
# streams, serving (paged, int8, ragged), both compute modes, backward.
suite plugin "$bin/cuda_plugin_test" "$cuda_so"
# 3. The benchmark against PyTorch's SDPA (torch_compare.py: same inputs,
# torch's output verified by the oracle, times side by side), or without
# torch the Google Benchmark suite alone.
if ! have_gpu; then
  not_run torch_sdpa "no GPU"
elif ((has_torch)); then
  suite torch_sdpa python3 "$here/torch_compare.py" --attnkit="$bin/attnkit" --plugin="$cuda_so" \
    --out="$scratch/torch" --json="$bench_json"
else
  suite torch_sdpa "$bin/cuda_bench" --plugin="$cuda_so" --benchmark_min_time=0.3 \
    --benchmark_out="$scratch/cuda_bench.json" --benchmark_out_format=json
fi
# 4. The Python package over the bundle's libattnkit.so (host part always;
# the CUDA part with a GPU), outputs checked by `attnkit verify`. Only CUDA's
# directories on the library path: the package preloads the bundle's own
# libraries after torch has loaded its libstdc++.
if ((has_numpy)); then
  cuda_path=$(IFS=:; echo "${cuda_dirs[*]:-}")
  suite python env LD_LIBRARY_PATH="$cuda_path" PYTHONPATH="$here/python" \
    ATTNKIT_LIBRARY="$here/lib/libattnkit.so" ATTNKIT_DEPS_DIR="$here/lib" \
    ATTNKIT_PLUGIN_PATH="$cuda_so" ATTNKIT_CLI="$bin/attnkit" TMPDIR="$scratch" \
    python3 "$here/python_check.py"
else
  not_run python "python3 has no numpy"
fi
# 5. The backward pass on the gradient grid (only "cuda" has one).
suite grad_conformance "$bin/grad_conformance_test" --plugin="$cuda_so" '--gtest_filter=*/cuda_*'
# 6. Threads sharing the CUDA backends (the registry's own concurrency test
# needs the reference plugin and ran here).
suite concurrency "$bin/concurrency_test" --plugin="$cuda_so" '--gtest_filter=*/cuda*'

# The benchmark's numbers for results.json: torch_compare's JSON, or
# cuda_bench's reduced to name, time and counters.
bench="null"
if [[ -s $bench_json ]]; then
  bench=$(head -c 1048576 "$bench_json")
elif [[ -s $scratch/cuda_bench.json ]] && command -v python3 > /dev/null; then
  bench=$(python3 - "$scratch/cuda_bench.json" << 'PY' 2> /dev/null || echo null
import json, sys
d = json.load(open(sys.argv[1]))
keep = ("name", "real_time", "time_unit", "error_occurred", "error_message", "label")
rows = [{k: v for k, v in b.items() if k in keep or k[:1].isupper() or k.endswith("_per_second")}
        for b in d.get("benchmarks", [])]
print(json.dumps({"source": "cuda_bench", "benchmarks": rows}))
PY
  )
fi

verdict=$([[ $status -eq 0 ]] && echo PASS || echo FAIL)
total=$(elapsed)
{
  printf '{"commit": %s, "mode": "%s", "gpu": %s, "budget_s": %s, "total_s": %s, "verdict": "%s",\n' \
    "$(json_str "$commit")" "$mode" "$(json_str "$gpu")" "$budget" "$total" "$verdict"
  echo ' "suites": ['
  for i in "${!json_rows[@]}"; do
    printf '  %s%s\n' "${json_rows[$i]}" "$([[ $i -lt $((${#json_rows[@]} - 1)) ]] && echo ,)"
  done
  echo ' ],'
  printf ' "benchmark": %s}\n' "${bench:-null}"
} > "$out/results.json"

# The one-screen summary: the last thing printed, and summary.txt.
{
  echo "==== gpu bundle: $verdict ($mode), commit $commit"
  echo "gpu: $gpu"
  printf '%-17s %7s %7s %7s %6s %5s  %s\n' suite passed failed skipped time cap result
  printf '%s\n' "${rows[@]}"
  echo "total $total s of ${budget}: $verdict"
  if ((${#excerpts[@]} > 0)); then
    echo "failures (first lines; trimmed logs in \$OUT):"
    printf '%s\n' "${excerpts[@]}"
  fi
  echo "\$OUT ($out): ${out_files[*]}"
} | head -n 60 | cut -c1-220 | tee "$out/summary.txt"
exit $status
