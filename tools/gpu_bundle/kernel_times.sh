#!/usr/bin/env bash
# Per-kernel GPU figures of attnkit's CUDA backends, from inside a bundle
# made by tools/make_gpu_bundle.sh (copied there as kernel_times.sh): Nsight
# Compute (ncu, with --clock-control none: the clocks as they are) over
# `attnkit compare` on each problem, which checks the backend on sampled
# rows and then times it. For each kernel: time, DRAM bytes read and
# throughput, SM throughput, achieved occupancy, grid, block and registers.
# Device time is short: run it beside run.sh in one command. compare's own
# times, printed after the kernels, ran under ncu and are slower than
# normal: speed comes from run.sh's torch_sdpa suite.
#
#   ./kernel_times.sh [--backends=cuda] [--compute=exact,fast] [--kernels=N] [CONFIG.textproto ...]
#
# Without configs: torch_compare.py's three bf16 shapes (prefill causal B1
# H32 T4096 d128, prefill B1 H16 T2048 d64, decode B8 H32/8 Tk8192 d128).
# --kernels: how many kernel launches ncu profiles per run (default 4; the
# rest run unprofiled). Exit 1 when ncu is missing or a run fails.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
backends=cuda
modes=exact,fast
kernels=4
configs=()
for arg in "$@"; do
  case "$arg" in
    --backends=*) backends=${arg#--backends=} ;;
    --compute=*) modes=${arg#--compute=} ;;
    --kernels=*) kernels=${arg#--kernels=} ;;
    --*)
      echo "kernel_times.sh: unknown flag '$arg' (known: --backends=, --compute=, --kernels=)" >&2
      exit 2
      ;;
    *) configs+=("$arg") ;;
  esac
done
if [[ ! $kernels =~ ^[1-9][0-9]*$ ]]; then
  echo "kernel_times.sh: --kernels must be a positive whole number, not '$kernels'" >&2
  exit 2
fi
IFS=, read -ra mode_list <<< "$modes"
for m in "${mode_list[@]}"; do
  if [[ $m != exact && $m != fast ]]; then
    echo "kernel_times.sh: --compute takes exact and/or fast, not '$m'" >&2
    exit 2
  fi
done

ncu=${NCU:-$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)}
if [[ -z $ncu || ! -x $ncu ]]; then
  echo "kernel_times.sh: no ncu (Nsight Compute) found on PATH, in /usr/local/cuda/bin or /opt/nvidia" >&2
  exit 1
fi
# shellcheck source=tools/gpu_bundle/bundle_env.sh
source "$here/bundle_env.sh" && bundle_env "$here" || exit 1

scratch=$(mktemp -d "${TMPDIR:-/tmp}/attnkit_kernel_times.XXXXXX") || exit 1
trap 'rm -rf "$scratch"' EXIT
if ((${#configs[@]} == 0)); then
  write() { echo "$2" > "$scratch/$1.textproto" && configs+=("$scratch/$1.textproto"); }
  write prefill_causal_t4096_d128 'name: "prefill causal B1 H32 T4096 d128 bf16" batch: 1 num_heads: 32
    num_kv_heads: 32 head_dim: 128 q_len: 4096 kv_len: 4096 dtype: BF16 kv_dtype: BF16 seed: 1
    mask { kind: CAUSAL } alignment: TOP_LEFT'
  write prefill_t2048_d64 'name: "prefill B1 H16 T2048 d64 bf16" batch: 1 num_heads: 16
    num_kv_heads: 16 head_dim: 64 q_len: 2048 kv_len: 2048 dtype: BF16 kv_dtype: BF16 seed: 1'
  write decode_b8_k8192_d128 'name: "decode B8 H32/8 Tk8192 d128 bf16" batch: 8 num_heads: 32
    num_kv_heads: 8 head_dim: 128 q_len: 1 kv_len: 8192 dtype: BF16 kv_dtype: BF16 seed: 1'
fi

metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
metrics+=,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active
metrics+=,launch__grid_size,launch__block_size,launch__registers_per_thread
status=0
for config in "${configs[@]}"; do
  for mode in "${mode_list[@]}"; do
    echo "== $(basename "$config" .textproto), compute $mode, backends $backends"
    log=$scratch/run.log
    "$ncu" --clock-control none -c "$kernels" --metrics "$metrics" \
      "$here/bin/attnkit" compare --config="$config" --backends="$backends" --compute="$mode" \
      --plugins="$here/lib/libattnkit_cuda.so" > "$log" 2>&1
    rc=$?
    # The kernels and their figures, then compare's own lines for the backends.
    grep -E '^  [^ ].*\(.*\)x\(.*\)|^    [a-z_]+__[a-z_.]+ ' "$log" | cut -c1-150
    grep -E "^  ($(tr , '|' <<< "$backends")) " "$log" | cut -c1-150
    if ((rc != 0)); then
      echo "kernel_times.sh: ncu or compare exited $rc; its last lines:"
      tail -n 5 "$log" | cut -c1-200
      status=1
    fi
  done
done
exit $status
