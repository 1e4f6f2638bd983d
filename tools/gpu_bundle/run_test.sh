#!/usr/bin/env bash
# The GPU bundle's runner as the GPU machine will run it, checked without a
# GPU through run.sh's --plan and --fake modes (stand-in suites on a
# simulated clock):
#   - the budget arithmetic: the caps plus the set-up reserve fit in the
#     default budget, which is at most 420 s, and the suites come in order of
#     value; the reference plugin is not loaded;
#   - what comes back: $OUT holds at most six files (summary.txt,
#     results.json, trimmed logs of failing suites), each under 16 MiB and
#     64 MiB in all (here: each under 300 KiB), even when every suite fails
#     after 20 MiB of log; results.json parses; the scratch folder is gone;
#     the output ends with the one-screen summary, within its last 12,000
#     characters;
#   - every suite gets its whole cap when each one overruns it, and a smaller
#     budget leaves later suites NOT RUN (and the run FAIL);
#   - --suites runs only the suites named, and the others neither run nor
#     fail the run; an unknown name is refused;
#   - a run.sh whose caps outgrow the budget is caught (a planted copy).
#
#   run_test.sh [RUN_SH]   (default: tools/gpu_bundle/run.sh; the bundle
#                           self-test passes the bundle's copy)
set -uo pipefail
run_sh=${1:-tools/gpu_bundle/run.sh}
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/run_test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3
[[ -x $py ]] || py=python3
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# check_plan RUN_SH: the budget arithmetic and the order of the suites.
check_plan() {
  local plan caps reserve default order
  plan=$("$1" --plan) || return 1
  read -r _ caps _ reserve _ _ _ default <<< "$(grep '^caps ' <<< "$plan")"
  order=$(awk '/^suite /{printf "%s ", $2}' <<< "$plan")
  if ((caps + reserve > default)); then
    echo "caps ($caps s) + reserve ($reserve s) exceed the default budget ($default s)"
    return 1
  fi
  if ((default > 420)); then
    echo "the default budget ($default s) is over 420 s"
    return 1
  fi
  if [[ $order != "conformance plugin torch_sdpa python "* ]]; then
    echo "suites not in order of value: $order"
    return 1
  fi
  if grep -v '^ *#' "$1" | grep -q 'reference_plugin'; then
    echo "run.sh still loads the reference plugin"
    return 1
  fi
  echo "plan: caps $caps s + reserve $reserve s <= default budget $default s <= 420 s; $order"
}

# fake_run NAME ARGS...: runs run.sh in fake mode with its own $OUT and
# TMPDIR; sets rc, out, log.
fake_run() {
  local name=$1
  shift
  out=$tmp/$name/out
  mkdir -p "$out" "$tmp/$name/scratch"
  log=$tmp/$name/stdout
  rc=0
  OUT=$out TMPDIR=$tmp/$name/scratch "$run_sh" "$@" > "$log" 2>&1 || rc=$?
}

# check_out NAME MAX_FILES: $OUT's files, sizes, JSON, scratch and screen.
check_out() {
  local name=$1 max=$2 n total f size
  n=$(find "$out" -type f | wc -l)
  ((n <= max)) || fail "$name: $n files in \$OUT (at most $max): $(ls "$out")"
  find "$out" -mindepth 1 -not -type f | grep -q . && fail "$name: \$OUT holds more than files"
  total=0
  for f in "$out"/*; do
    size=$(stat -c %s "$f")
    total=$((total + size))
    ((size <= 300 * 1024)) || fail "$name: $(basename "$f") is $size bytes (over 300 KiB)"
  done
  ((total <= 64 << 20)) || fail "$name: \$OUT holds $total bytes"
  [[ -s $out/summary.txt ]] || fail "$name: no summary.txt"
  "$py" -c 'import json, sys; json.load(open(sys.argv[1]))' "$out/results.json" ||
    fail "$name: results.json does not parse"
  [[ -z $(ls -A "$tmp/$name/scratch") ]] || fail "$name: the scratch folder was left behind"
  tail -c 12000 "$log" | grep -q '^==== gpu bundle: ' ||
    fail "$name: the summary is not within the output's last 12,000 characters"
  tail -n 1 "$log" | grep -q '^\$OUT' || fail "$name: the output does not end with the summary"
  cmp -s "$out/summary.txt" <(sed -n '/^==== gpu bundle: /,$p' "$log") ||
    fail "$name: summary.txt is not the summary printed"
}

# A JSON field of every suite, one per line.
suite_field() {
  "$py" -c 'import json, sys
for s in json.load(open(sys.argv[1]))["suites"]: print(s["name"], s[sys.argv[2]])' \
    "$out/results.json" "$1"
}

echo "== the plan"
check_plan "$run_sh" || fail "the plan"

echo "== every suite passes"
fake_run pass --fake='*=pass'
((rc == 0)) || fail "pass: exit $rc"
check_out pass 2
[[ $(ls "$out" | paste -sd ' ' -) == "results.json summary.txt" ]] ||
  fail "pass: \$OUT holds $(ls "$out")"
grep -q '^total .*: PASS$' "$log" || fail "pass: no PASS total"
grep -q 'passed: exact 2, fast 1' "$out/summary.txt" ||
  fail "pass: conformance does not count both compute modes"

echo "== every suite fails after 20 MiB of log"
fake_run bigfail --fake='*=bigfail'
((rc == 1)) || fail "bigfail: exit $rc"
check_out bigfail 6
[[ $(find "$out" -name '*.log' | wc -l) -eq 4 ]] || fail "bigfail: not 4 trimmed logs"
grep -q 'log not kept' "$out/summary.txt" || fail "bigfail: the logs left out are not named"
grep -q 'Failure' "$out/conformance.log" || fail "bigfail: the trimmed log lost the failure"
(($(wc -l < "$out/summary.txt") <= 60)) || fail "bigfail: the summary is over one screen"

echo "== every suite overruns its cap: each still gets all of it"
fake_run overrun --fake='*=overrun'
((rc == 1)) || fail "overrun: exit $rc"
check_out overrun 6
while read -r name limit; do
  cap=$(grep "^suite $name cap " <("$run_sh" --plan) | awk '{print $4}')
  [[ $limit == "$cap" ]] || fail "overrun: $name ran under $limit s, not its cap $cap s"
done < <(suite_field limit_s)
grep -q 'NOT RUN' "$out/summary.txt" && fail "overrun: a suite was not run"

echo "== a budget of 150 s: later suites are not run"
fake_run small --fake='*=overrun' --budget_s=150
((rc == 1)) || fail "small: exit $rc"
check_out small 6
grep -q 'concurrency .*NOT RUN (budget spent)' "$out/summary.txt" ||
  fail "small: the last suite ran beyond the budget"

echo "== --suites: only the suites named run, the others do not fail the run"
fake_run only --fake='*=pass,grad_conformance=fail' --suites=plugin,torch_sdpa
((rc == 0)) || fail "only: exit $rc (the failing suite was not selected)"
check_out only 2
[[ $(grep -c 'not run (not selected)' "$out/summary.txt") -eq 4 ]] ||
  fail "only: four suites should be listed as not selected"
grep -q '^plugin .* pass' "$out/summary.txt" || fail "only: plugin did not run"
grep -q '^torch_sdpa .* pass' "$out/summary.txt" || fail "only: torch_sdpa did not run"
fake_run only_bad --fake='*=pass' --suites=plugin,nonesuch
((rc == 2)) || fail "only_bad: an unknown suite name gave exit $rc, not 2"
grep -q "'nonesuch', which is not a suite" "$log" || fail "only_bad: the error does not name it"

echo "== a planted run.sh whose caps outgrow the budget is caught"
planted=$tmp/run_planted.sh
sed 's/conformance:[0-9]*/conformance:300/' "$run_sh" > "$planted"
chmod +x "$planted"
if why=$(check_plan "$planted"); then
  fail "the plan check passed a run.sh with the conformance cap at 300 s"
else
  echo "caught: $why"
fi

if ((failures)); then
  echo "run_test: $failures failure(s)"
  exit 1
fi
echo "run_test: PASS"
