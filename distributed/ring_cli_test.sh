#!/usr/bin/env bash
# `attnkit ring` as a user runs it under mpirun (issue 19), on shared memory:
#   a. a causal GQA problem one process refuses (memory_budget_bytes) runs on
#      4 ranks, each holding its share, and passes --check; on 1 rank it is
#      refused before anything is allocated
#   b. Ulysses and auto pass --check where Ulysses applies (Ulysses with
#      --grad at 4 ranks, where two ranks share each K/V head)
#   c. --grad --check on 2 ranks (dQ, dK, dV against the fp64 reference)
#   d. a rank that stalls ends the job nonzero, with the Communicator's
#      deadline error, well within a minute
#   e. one rank without mpirun (Open MPI's singleton init)
# Arguments: the attnkit binary, then the testdata directory (any file in it).
set -uo pipefail
bin=$PWD/$1
data=$(dirname "$PWD/$2")
tmp=${TEST_TMPDIR:-$(mktemp -d)}
export ATTNKIT_CACHE_DIR=$tmp/cache
# We may run as root (containers, CI); Open MPI's session directory in the
# sandbox (as distributed/mpi_run_test.sh does).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export TMPDIR=$tmp
# Every Bazel sandbox has its own PID namespace, so concurrent jobs get the
# same Open MPI job id and would share vader's /dev/shm segment files (lost
# messages, hangs): keep them in this test's directory (distributed/mpi_run_test.sh).
export OMPI_MCA_btl_vader_backing_directory=$tmp
# LeakSanitizer (--config=asan) would report Open MPI's own allocations,
# which it keeps until exit by design. Many are made in components Open MPI
# has dlclose'd by then ("<unknown module>"): only the slow unwinder reaches
# a frame in libmpi or libopen-pal that a suppression can match.
if [[ -n ${ASAN_OPTIONS:-} ]]; then
  export ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0"
  printf 'leak:%s\n' libmpi.so libopen-pal.so libopen-rte.so libpmix.so libhwloc.so \
    libevent mca_ > "$tmp/lsan_mpi.supp"
  export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$tmp/lsan_mpi.supp"
fi
fail() {
  echo "FAIL: $*"
  exit 1
}
start=$SECONDS
step() { echo "--- $* (at $((SECONDS - start)) s)"; }
# ring NP OUT ERR ARGS...: mpirun -np NP attnkit ring ARGS; returns its status.
ring() {
  local np=$1 out=$2 err=$3
  shift 3
  # Ranks share the cores (--oversubscribe, no binding), shared memory only.
  timeout --kill-after=10 120 mpirun --oversubscribe --bind-to none --mca btl self,vader \
    -np "$np" "$bin" ring --threads=1 "$@" > "$out" 2> "$err"
}
show() { echo "stdout:"; cat "$1"; echo "stderr:"; cat "$2"; }

over=$data/causal_gqa_over_budget.textproto
uly=$data/ulysses_gqa_padding.textproto
grad=$data/causal_gqa_grad.textproto

step "a. one process refuses the over-budget problem"
"$bin" run --config="$over" --q="$tmp/none.npy" --k="$tmp/none.npy" --v="$tmp/none.npy" \
  --out="$tmp/o.npy" > "$tmp/out" 2> "$tmp/err" && fail "run accepted $over: $(cat "$tmp/out")"
grep -q 'memory_budget_bytes (8388608)' "$tmp/err" || fail "run's refusal: $(cat "$tmp/err")"

step "a. mpirun -np 4 ring --check on it"
ring 4 "$tmp/out" "$tmp/err" --config="$over" --check || { show "$tmp/out" "$tmp/err"; fail "np 4 exited $?"; }
grep -q '^check O and LSE: pass' "$tmp/out" || { show "$tmp/out" "$tmp/err"; fail "np 4 check"; }
grep -q 'on 4 ranks: strategy ring' "$tmp/out" || fail "np 4 header: $(cat "$tmp/out")"
grep -q 'zigzag' "$tmp/out" || fail "causal ring is not zigzag: $(cat "$tmp/out")"
[[ $(grep -cE '^ +[0-3] ' "$tmp/out") -eq 4 ]] || fail "want a row per rank: $(cat "$tmp/out")"
cat "$tmp/out"

step "a. the same problem on one rank is refused before allocating"
ring 1 "$tmp/out" "$tmp/err" --config="$over" && fail "np 1 accepted the over-budget problem"
grep -q 'attnkit ring: rank 0: RESOURCE_EXHAUSTED: .* bytes per rank on 1 ranks, more than memory_budget_bytes (8388608)' "$tmp/err" ||
  { show "$tmp/out" "$tmp/err"; fail "np 1 refusal"; }

step "b. Ulysses and auto on 2 ranks"
for s in ulysses auto; do
  ring 2 "$tmp/out" "$tmp/err" --config="$uly" --strategy=$s --check ||
    { show "$tmp/out" "$tmp/err"; fail "--strategy=$s exited $?"; }
  grep -q '^check O and LSE: pass' "$tmp/out" || { show "$tmp/out" "$tmp/err"; fail "$s check"; }
done
ring 4 "$tmp/out" "$tmp/err" --config="$uly" --strategy=ulysses --check --grad ||
  { show "$tmp/out" "$tmp/err"; fail "ulysses np 4 exited $?"; }
grep -q '^check dQ, dK, dV: pass' "$tmp/out" || { show "$tmp/out" "$tmp/err"; fail "ulysses grad"; }
grep -q 'on 4 ranks: strategy ulysses' "$tmp/out" || fail "ulysses header: $(cat "$tmp/out")"
grep -q '^check O and LSE: pass' "$tmp/out" || { show "$tmp/out" "$tmp/err"; fail "ulysses np 4"; }

step "c. --grad --check on 2 ranks"
ring 2 "$tmp/out" "$tmp/err" --config="$grad" --grad --check ||
  { show "$tmp/out" "$tmp/err"; fail "--grad exited $?"; }
grep -q '^check dQ, dK, dV: pass' "$tmp/out" || { show "$tmp/out" "$tmp/err"; fail "grad check"; }
grep -q '^backward pass: per rank' "$tmp/out" || fail "no backward table: $(cat "$tmp/out")"
cat "$tmp/out"

step "d. a stalled rank ends the job"
t0=$SECONDS
ring 2 "$tmp/out" "$tmp/err" --config="$uly" --inject_fault=stall:1 --timeout=3 &&
  fail "the stalled job exited 0"
took=$((SECONDS - t0))
[[ $took -lt 60 ]] || fail "the stalled job took $took s"
grep -q 'attnkit ring: rank 0: DEADLINE_EXCEEDED' "$tmp/err" || { show "$tmp/out" "$tmp/err"; fail "no deadline error"; }
grep -qE "no progress from (rank 1|the other ranks)" "$tmp/err" || { show "$tmp/out" "$tmp/err"; fail "the error does not name rank 1"; }
echo "stalled job ended in $took s"

step "e. one rank, no mpirun"
(cd "$tmp" && timeout 60 "$bin" ring --config="$uly" --threads=1 --check > "$tmp/out" 2> "$tmp/err") ||
  { show "$tmp/out" "$tmp/err"; fail "singleton exited $?"; }
grep -q 'on 1 rank: strategy ring' "$tmp/out" || fail "singleton header: $(cat "$tmp/out")"
grep -q '^check O and LSE: pass' "$tmp/out" || { show "$tmp/out" "$tmp/err"; fail "singleton check"; }

step "bad flags are refused before MPI starts"
"$bin" ring --config="$uly" --strategy=diagonal > "$tmp/out" 2> "$tmp/err" && fail "--strategy=diagonal accepted"
grep -q 'strategy (diagonal) must be ring, ulysses or auto' "$tmp/err" || fail "$(cat "$tmp/err")"
"$bin" ring --inject_fault=crash:1 > "$tmp/out" 2> "$tmp/err" && fail "--inject_fault=crash:1 accepted"
grep -q 'inject_fault (crash:1) must be stall:R or exit:R' "$tmp/err" || fail "$(cat "$tmp/err")"

echo "PASS in $((SECONDS - start)) s"
