#!/usr/bin/env bash
# isa_report and the ATTNKIT_HWY_TARGET cap it shows: a cap holds for
# dispatch from start-up, and a bad value is one clear error.
set -uo pipefail
bin=tools/isa_report
tmp=${TEST_TMPDIR:-$(mktemp -d)}
fail() { echo "FAIL: $*"; exit 1; }

out=$(env -u ATTNKIT_HWY_TARGET $bin) || fail "isa_report exited $?"
grep -q '^cpu: ' <<<"$out" || fail "no cpu line: $out"
grep -q '^highway:  compiled .*SCALAR' <<<"$out" || fail "no compiled targets: $out"
grep -q '^highway:  dispatched ' <<<"$out" || fail "no dispatched target: $out"

out=$(ATTNKIT_HWY_TARGET=sse4 $bin) || fail "isa_report with a cap exited $?"
grep -q '^highway:  capped at SSE4' <<<"$out" || fail "cap not reported: $out"
grep -q '^highway:  dispatched SSE4$' <<<"$out" || fail "cap not applied: $out"
grep -q 'runs here SSE4 SCALAR$' <<<"$out" || fail "better targets left: $out"

ATTNKIT_HWY_TARGET=avx9 $bin > "$tmp/bad.txt" 2>&1; rc=$?
[[ $rc -eq 1 ]] || fail "bad cap exited $rc, want 1"
grep -q "ATTNKIT_HWY_TARGET ('avx9') is not a Highway target name" "$tmp/bad.txt" \
  || fail "message: $(cat "$tmp/bad.txt")"
echo "isa_report_test: ok"
