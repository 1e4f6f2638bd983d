#!/usr/bin/env bash
# $ATTNKIT_REQUIRE_BACKENDS against skips in backend suites of every
# parameter shape (tests/required_skip_probe.cc: a tuple, a struct with a
# backend field, a plain name): a required backend's test that skips by
# itself fails the run; one that skips a case its capabilities do not claim
# does not; other backends' skips never do.
# Argument: the probe binary.
set -uo pipefail
probe=$1
fail() { echo "FAIL: $*"; exit 1; }

# run MODE REQUIRED: the probe's combined output in $out, its status in $rc.
run() {
  # An outer GTEST_FILTER (a CI pass may set one) would change the counts.
  out=$(env -u GTEST_FILTER ATTNKIT_PROBE_SKIP=$1 ATTNKIT_REQUIRE_BACKENDS=$2 "$probe" 2>&1)
  rc=$?
}

run own ""
((rc == 0)) || fail "skips without required backends failed the run (rc $rc): $out"
[[ $out == *"6 tests, listed below"* ]] || fail "expected 6 skipped tests: $out"

run own reference
((rc != 0)) || fail "required reference skipped and the run passed: $out"
for t in "Probe/TupleProbe.Acts/reference_7" "Probe/StructProbe.Acts/reference" \
  "Probe/StringProbe.Acts/reference"; do
  [[ $out == *"FAILED: $t skipped required backend reference"* ]] || fail "$t not caught: $out"
done
[[ $out == *"FAILED: 3 skipped test(s) of backends named in ATTNKIT_REQUIRE_BACKENDS"* ]] ||
  fail "expected exactly 3 required skips: $out"

run own probe-f32
((rc != 0)) || fail "required probe-f32 skipped by itself and the run passed: $out"
[[ $out == *"FAILED: 3 skipped test(s)"* ]] || fail "expected exactly 3 required skips: $out"

# probe-f32 refuses the causal problem, which its capabilities do not claim.
run unclaimed probe-f32
((rc == 0)) || fail "a required backend's unclaimed case failed the run (rc $rc): $out"
[[ $out == *"3 tests, listed below"* ]] || fail "expected probe-f32's 3 tests skipped: $out"

run unclaimed reference
((rc == 0)) || fail "reference runs the causal problem (rc $rc): $out"

run "" reference,probe-f32
((rc == 0)) || fail "nothing skipped (rc $rc): $out"
echo PASS
