#!/usr/bin/env bash
# The hardening half of CI, after tools/test.sh: the whole suite under
# AddressSanitizer (+LeakSanitizer) and UndefinedBehaviorSanitizer, then the
# parser fuzzers as real libFuzzer binaries for $CI_FUZZ_SECONDS (10) each.
# Sanitizer and fuzz configs leave CUDA out (see .bazelrc). Prints the wall
# time of each piece; fails if any piece fails, after running all of them.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
piece() {
  local name=$1
  shift
  local start=$SECONDS
  echo "=== ci: $name: $*"
  "$@" || status=1
  echo "=== ci: $name took $((SECONDS - start)) s"
}
piece asan bazel test --config=asan //...
piece ubsan bazel test --config=ubsan //...
piece libfuzzer bazel test --config=fuzz --test_env=FUZZ_SECONDS="${CI_FUZZ_SECONDS:-10}" \
  //tests/fuzz/...
bazel shutdown >/dev/null 2>&1 || true
exit $status
