#!/usr/bin/env bash
# kernel_times.sh without a GPU or Nsight Compute: a stand-in ncu (which
# records its arguments, prints one kernel with its metrics and runs the
# command) over a stand-in attnkit, in a bundle-shaped folder. Checks that
# each problem runs once per compute mode under --clock-control none with
# the plugin, that the kernel lines and compare's backend lines come
# through, that bad flags are refused (exit 2), and that a missing ncu or a
# failing run gives exit 1 with the reason.
#
#   kernel_times_test.sh [KERNEL_TIMES_SH]   (default: tools/gpu_bundle/kernel_times.sh)
set -uo pipefail
script=${1:-tools/gpu_bundle/kernel_times.sh}
env_sh=$(dirname "$script")/bundle_env.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

bundle=$tmp/bundle
mkdir -p "$bundle/bin" "$bundle/lib"
cp "$script" "$bundle/kernel_times.sh"
cp "$env_sh" "$bundle/bundle_env.sh"
: > "$bundle/lib/libattnkit_cuda.so"
cat > "$bundle/bin/attnkit" << 'SH'
#!/usr/bin/env bash
# Stand-in attnkit: compare's table line for cuda; exit 3 when told to fail.
[[ -n ${FAKE_COMPARE_FAILS:-} ]] && { echo "compare: cuda failed"; exit 3; }
echo "  cuda    flash-wmma-bf16 d128     1.234  ok"
SH
cat > "$tmp/ncu" << 'SH'
#!/usr/bin/env bash
# Stand-in ncu: records its arguments, prints one kernel, runs the command.
echo "$*" >> "$NCU_ARGS"
while [[ $1 == --* || $1 == -c ]]; do
  case "$1" in
    --clock-control | -c | --metrics) shift 2 ;;
    *) shift ;;
  esac
done
echo "  void FlashKernel<128>(FlashParams) (64, 32, 1)x(128, 1, 1), Context 1, Stream 13, Device 0, CC 9.0"
echo "    gpu__time_duration.sum                       ms         1.10"
exec "$@"
SH
chmod +x "$bundle/kernel_times.sh" "$bundle/bin/attnkit" "$tmp/ncu"

echo "== the default problems, both modes"
args=$tmp/args
: > "$args"
out=$(NCU="$tmp/ncu" NCU_ARGS=$args "$bundle/kernel_times.sh" 2>&1)
rc=$?
((rc == 0)) || fail "default: exit $rc: $out"
[[ $(wc -l < "$args") -eq 6 ]] || fail "default: $(wc -l < "$args") runs, not 3 problems x 2 modes"
[[ $(grep -c -- '--clock-control none' "$args") -eq 6 ]] || fail "default: a run without --clock-control none"
[[ $(grep -c -- '--compute=fast' "$args") -eq 3 ]] || fail "default: not 3 FAST runs"
[[ $(grep -c -- "--plugins=$bundle/lib/libattnkit_cuda.so" "$args") -eq 6 ]] ||
  fail "default: a run without the bundle's plugin"
grep -q 'decode_b8_k8192_d128, compute exact' <<< "$out" || fail "default: no decode header"
[[ $(grep -c 'FlashKernel<128>' <<< "$out") -eq 6 ]] || fail "default: kernel lines lost"
[[ $(grep -c 'gpu__time_duration.sum' <<< "$out") -eq 6 ]] || fail "default: metric lines lost"
[[ $(grep -c '^  cuda ' <<< "$out") -eq 6 ]] || fail "default: compare's cuda lines lost"

echo "== one config, one mode"
: > "$args"
echo 'name: "x"' > "$tmp/x.textproto"
NCU="$tmp/ncu" NCU_ARGS=$args "$bundle/kernel_times.sh" --compute=fast --kernels=2 "$tmp/x.textproto" \
  > /dev/null 2>&1 || fail "one: exit $?"
[[ $(wc -l < "$args") -eq 1 ]] || fail "one: $(wc -l < "$args") runs"
grep -q -- "-c 2 .*--config=$tmp/x.textproto .*--compute=fast" "$args" || fail "one: $(cat "$args")"

echo "== bad flags: exit 2"
for bad in --compute=fastest --kernels=0 --frobnicate; do
  NCU="$tmp/ncu" NCU_ARGS=$args "$bundle/kernel_times.sh" "$bad" > "$tmp/bad" 2>&1
  rc=$?
  ((rc == 2)) || fail "$bad: exit $rc, not 2"
  grep -q "kernel_times.sh: " "$tmp/bad" || fail "$bad: no message"
done

echo "== no ncu: exit 1 with the reason"
NCU=$tmp/no_such_ncu PATH=/usr/bin:/bin "$bundle/kernel_times.sh" > "$tmp/none" 2>&1
rc=$?
((rc == 1)) || fail "no ncu: exit $rc"
grep -q "no ncu" "$tmp/none" || fail "no ncu: $(cat "$tmp/none")"

echo "== a failing run: exit 1, its last lines shown"
FAKE_COMPARE_FAILS=1 NCU="$tmp/ncu" NCU_ARGS=$args "$bundle/kernel_times.sh" "$tmp/x.textproto" \
  > "$tmp/failing" 2>&1
rc=$?
((rc == 1)) || fail "failing: exit $rc"
grep -q "compare: cuda failed" "$tmp/failing" || fail "failing: the reason was not shown"

if ((failures)); then
  echo "kernel_times_test: $failures failure(s)"
  exit 1
fi
echo "kernel_times_test: PASS"
