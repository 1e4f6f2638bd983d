#!/usr/bin/env bash
# Runs an MPI program under mpirun for a Bazel test (distributed/mpi_test.bzl):
#   mpi_run_test.sh [--expect_failure] [--expect_output=ERE] [--timeout_s=S] NP BINARY [ARGS...]
# Ranks share this machine: --oversubscribe (more ranks than cores), shared
# memory only (--mca btl self,vader), no core binding (other tests run beside
# us). Open MPI's session directory goes under $TEST_TMPDIR (TMPDIR), inside
# the sandbox and cleaned with the test, and so do vader's shared-memory
# segments (btl_vader_backing_directory). Their default,
# /dev/shm/vader_segment.<host>.<jobid>.<rank>, is shared by every sandbox,
# and the job id derives from mpirun's PID, which is the same in every
# linux-sandbox (each has its own PID namespace): concurrent tests mapped each
# other's segments and crashed in mca_btl_vader_poll_handle_frag or hung.
# `timeout` ends a hung job before Bazel's own limit, so the log says so.
# --expect_failure: the job must exit nonzero (not by the timeout).
# --expect_output: the combined output must match the extended regex.
set -uo pipefail
expect_failure=0
expect_output=""
timeout_s=""
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --expect_failure) expect_failure=1 ;;
    --expect_output=*) expect_output=${1#*=} ;;
    --timeout_s=*) timeout_s=${1#*=} ;;
    *) echo "mpi_run_test: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
if [[ $# -lt 2 ]]; then
  echo "usage: mpi_run_test.sh [--expect_failure] [--expect_output=ERE] [--timeout_s=S] NP BINARY [ARGS...]" >&2
  exit 2
fi
np=$1
binary=$2
shift 2
# Bazel's limit (TEST_TIMEOUT) less 15 s for the report, unless given.
if [[ -z $timeout_s ]]; then
  timeout_s=$(( ${TEST_TIMEOUT:-300} > 45 ? ${TEST_TIMEOUT:-300} - 15 : 30 ))
fi

# We may run as root (containers, CI); Open MPI refuses that unless told.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export TMPDIR=${TEST_TMPDIR:-$(mktemp -d)}
# LeakSanitizer (--config=asan) would report Open MPI's own allocations,
# which it keeps until exit by design: they are suppressed by module. Most come
# from components MPI_Finalize has unloaded, which only the slow unwinder
# traces back through libmpi / libopen-pal (the fast one needs frame pointers).
if [[ -n ${ASAN_OPTIONS:-} ]]; then
  supp="$TMPDIR/lsan_mpi.supp"
  printf 'leak:%s\n' libmpi.so libopen-pal.so libopen-rte.so libpmix.so libhwloc.so \
    libevent mca_ > "$supp"
  export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$supp"
  export ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0"
fi


log="$TMPDIR/mpirun.log"
start=$(date +%s.%N)
timeout --kill-after=10 "$timeout_s" \
  mpirun --oversubscribe --bind-to none --mca btl self,vader \
  --mca btl_vader_backing_directory "$TMPDIR" -np "$np" "$binary" "$@" \
  > >(tee "$log") 2>&1
rc=$?
wait  # for tee
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')
echo "mpi_run_test: mpirun -np $np $(basename "$binary") exited $rc after $elapsed s"

if [[ $rc -eq 124 || $rc -eq 137 ]]; then
  echo "mpi_run_test: FAIL: the job did not finish within $timeout_s s (a hang)"
  exit 1
fi
if [[ -n $expect_output ]] && ! grep -Eq -- "$expect_output" "$log"; then
  echo "mpi_run_test: FAIL: the output does not match /$expect_output/"
  exit 1
fi
if [[ $expect_failure -eq 1 ]]; then
  if [[ $rc -eq 0 ]]; then
    echo "mpi_run_test: FAIL: the job was expected to fail but exited 0"
    exit 1
  fi
  echo "mpi_run_test: PASS: the job failed as expected (exit $rc)"
  exit 0
fi
exit $rc
