#!/usr/bin/env bash
# The GPU check, run from inside a bundle made by tools/make_gpu_bundle.sh
# (copied there as run.sh). Needs glibc >= 2.36, the NVIDIA driver and CUDA
# 13's cuBLAS on the machine; nothing else.
#
#   ./run.sh [--allow_no_gpu] [--budget_s=N]
#
# With a usable GPU every suite runs with ATTNKIT_REQUIRE_BACKENDS=cuda,
# cuda-cublas, so a skipped CUDA case fails. Without one it stops at once
# with one line naming why, unless --allow_no_gpu, which runs the same suites
# with the CUDA cases skipped (the CPU part). The whole run stops at the
# budget (default 360 s); a suite cut off by it fails. Logs and summary.txt go
# to $OUT when set, else ./results. Exit 0 only when every suite passed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
allow_no_gpu=0
budget=360
for arg in "$@"; do
  case "$arg" in
    --allow_no_gpu) allow_no_gpu=1 ;;
    --budget_s=*) budget=${arg#--budget_s=} ;;
    *) echo "run.sh: unknown argument '$arg' (known: --allow_no_gpu, --budget_s=N)" >&2; exit 2 ;;
  esac
done
out=${OUT:-$here/results}
mkdir -p "$out"
start=$SECONDS

# Libraries the bundle carries gzipped (make_gpu_bundle.sh), unpacked once.
for gz in "$here"/lib/*.gz; do
  [[ -e $gz ]] || continue
  lib=${gz%.gz}
  [[ -e $lib ]] && continue
  if ! { gzip -dc "$gz" > "$lib.tmp" && mv "$lib.tmp" "$lib"; }; then
    rm -f "$lib.tmp"
    echo "run.sh: cannot unpack $gz into $lib (needs gzip and a writable bundle)" >&2
    exit 1
  fi
done

# cuBLAS from the CUDA toolkit, or from PyTorch's nvidia-cublas wheel.
cuda_dirs=()
for d in "${CUDA_PATH:-/usr/local/cuda}/lib64" /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 \
  /usr/lib/x86_64-linux-gnu; do
  [[ -d $d ]] && cuda_dirs+=("$d")
done
if command -v python3 > /dev/null; then
  while read -r d; do [[ -d $d ]] && cuda_dirs+=("$d"); done < <(python3 - 2> /dev/null << 'PY'
import importlib
for name in ("nvidia.cublas", "nvidia.cu13", "nvidia.cuda_runtime"):
    try:
        m = importlib.import_module(name)
        for p in m.__path__:
            print(p + "/lib")
    except Exception:
        pass
PY
  )
fi
lib_path="$here/lib"
for d in "${cuda_dirs[@]}"; do lib_path="$lib_path:$d"; done
export LD_LIBRARY_PATH="$lib_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
plugins=(--plugin="$here/lib/libattnkit_cuda.so" --plugin="$here/lib/libattnkit_reference_plugin.so")

# Is the GPU usable? The plugin's own probe says why not.
probe=$("$here/bin/attnkit" backends --plugins="$here/lib/libattnkit_cuda.so" 2>&1)
cuda_line=$(grep -m1 '^cuda:' <<< "$probe")
if [[ $cuda_line != "cuda: available"* ]]; then
  reason=${cuda_line#cuda: }
  reason=${reason#unavailable: }
  [[ -n $reason ]] || reason="the CUDA plugin did not load: $(tail -1 <<< "$probe")"
  if ((!allow_no_gpu)); then
    echo "gpu bundle: FAIL: no usable GPU: $reason (--allow_no_gpu runs the CPU part)"
    exit 1
  fi
  echo "gpu bundle: no usable GPU ($reason); --allow_no_gpu: CUDA cases skip"
else
  export ATTNKIT_REQUIRE_BACKENDS=cuda,cuda-cublas
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2> /dev/null |
    sed 's/^/gpu: /'
fi
echo "commit $(cat "$here/COMMIT" 2> /dev/null), budget ${budget} s"

status=0
rows=()
# suite NAME CAP_S COMMAND...: runs under min(CAP_S, what is left of the budget).
suite() {
  local name=$1 cap=$2
  shift 2
  local left=$((budget - (SECONDS - start)))
  local limit=$((cap < left ? cap : left))
  local t0=$SECONDS rc=0
  if ((limit <= 0)); then
    rows+=("$(printf '%-20s %8s %8s %8s %7s  %s' "$name" - - - 0 'NOT RUN (budget spent)')")
    status=1
    return
  fi
  timeout "$limit" "$@" > "$out/$name.log" 2>&1 || rc=$?
  local passed failed skipped verdict
  passed=$(grep -m1 -oP '^\[  PASSED  \] \K[0-9]+' "$out/$name.log" || echo 0)
  failed=$(grep -m1 -oP '^\[  FAILED  \] \K[0-9]+(?= tests?,)' "$out/$name.log" || echo 0)
  skipped=$(grep -m1 -oP '^\[  SKIPPED \] \K[0-9]+' "$out/$name.log" || echo 0)
  if ((rc == 0)); then
    verdict=pass
  elif ((rc == 124)); then
    verdict="FAIL (cut off after ${limit} s)"
    status=1
  else
    verdict="FAIL (exit $rc)"
    status=1
  fi
  rows+=("$(printf '%-20s %8s %8s %8s %7s  %s' "$name" "$passed" "$failed" "$skipped" \
    "$((SECONDS - t0))" "$verdict")")
}

suite cuda_unit 30 bash -c "'$here/bin/kernel_traits_test' && '$here/bin/params_test' && '$here/bin/tile_schedule_test' && '$here/bin/flash_plan_test'"
suite cuda_plugin 60 "$here/bin/cuda_plugin_test" "$here/lib/libattnkit_cuda.so"
# Case names: conformance .../<backend>_<problem>, property .../<backend>.
suite conformance 150 "$here/bin/conformance_test" "${plugins[@]}" \
  '--gtest_filter=*/cuda_*:*/reference_plugin_*'
suite grad_conformance 90 "$here/bin/grad_conformance_test" "${plugins[@]}" \
  '--gtest_filter=*/cuda_*:*/reference_plugin_*'
suite property 60 "$here/bin/property_test" "${plugins[@]}" \
  '--gtest_filter=*/cuda:*/cuda_cublas:*/reference_plugin'
suite diff_fuzz 60 env DIFF_FUZZ_COUNT=200 "$here/bin/diff_fuzz_test" "${plugins[@]}"
suite concurrency 30 "$here/bin/concurrency_test" "${plugins[@]}"
skip_flag=()
((allow_no_gpu)) && skip_flag=(--allow_skip)
suite cli_check 30 "$here/bin/attnkit" check --plugins="$here/lib/libattnkit_cuda.so" \
  --backends=cuda,cuda-cublas,reference "${skip_flag[@]}"
# Both compute modes on 16-bit problems, beside the conformance grid:
# the default GQA causal prefill (flash kernel) and a split-K decode (decode
# kernel), EXACT and FAST, same and mixed storage types. FAST's bound grants
# P rounded to V's type and the reference rounds Q to K's; EXACT's grants
# neither (fp32 arithmetic and O's rounding only). cuda_plugin_test's
# ComputeModesMatchReferenceOnGpu runs more shapes in both modes.
suite compute_modes 45 bash -c '
  attnkit=$1 plugin=$2; shift 2; rc=0
  for types in "BF16 BF16" "F16 F16" "F32 BF16" "BF16 F16"; do
    read -r q kv <<< "$types"
    for shape in "" "--config.q_len=1 --config.kv_len=4099"; do
      for mode in EXACT FAST; do
        echo "== check q=$q kv=$kv $mode ${shape:-prefill}"
        "$attnkit" check --plugins="$plugin" --backends=cuda,cuda-cublas "$@" \
          --config.dtype=$q --config.kv_dtype=$kv --config.compute=$mode $shape || rc=1
      done
    done
  done
  exit $rc' _ "$here/bin/attnkit" "$here/lib/libattnkit_cuda.so" "${skip_flag[@]}"
# The Python package over the bundle's libattnkit.so (host part always; the
# CUDA part with a GPU). Only CUDA's directories on the library path: the
# package preloads the bundle's own libraries after torch has loaded its
# libstdc++.
if python3 -c 'import numpy' 2> /dev/null; then
  cuda_path=$(IFS=:; echo "${cuda_dirs[*]}")
  suite python 90 env LD_LIBRARY_PATH="$cuda_path" PYTHONPATH="$here/python" \
    ATTNKIT_LIBRARY="$here/lib/libattnkit.so" ATTNKIT_DEPS_DIR="$here/lib" \
    ATTNKIT_PLUGIN_PATH="$here/lib/libattnkit_cuda.so" python3 "$here/python_check.py"
else
  rows+=("$(printf '%-20s %8s %8s %8s %7s  %s' python - - - 0 'not run (python3 has no numpy)')")
fi
not_run() { rows+=("$(printf '%-20s %8s %8s %8s %7s  %s' "$1" - - - 0 "not run ($2)")"); }
if [[ -n ${ATTNKIT_REQUIRE_BACKENDS:-} ]]; then
  suite cuda_bench 90 "$here/bin/cuda_bench" --plugin="$here/lib/libattnkit_cuda.so" \
    --benchmark_min_time=0.3 \
    --benchmark_out="$out/cuda_bench.json" --benchmark_out_format=json
  # PyTorch's SDPA on the same problems, when this Python has torch.
  if python3 -c 'import torch' 2> /dev/null; then
    suite torch_compare 150 python3 "$here/torch_compare.py" --attnkit="$here/bin/attnkit" \
      --plugin="$here/lib/libattnkit_cuda.so" --out="$out/torch"
  else
    not_run torch_compare "python3 has no torch"
  fi
else
  not_run cuda_bench "no GPU"
  not_run torch_compare "no GPU"
fi

{
  printf '%-20s %8s %8s %8s %7s  %s\n' suite passed failed skipped 'time s' result
  printf '%s\n' "${rows[@]}"
  echo "total $((SECONDS - start)) s of ${budget}: $([[ $status -eq 0 ]] && echo PASS || echo FAIL)"
} | tee "$out/summary.txt"
exit $status
