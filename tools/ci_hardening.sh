#!/usr/bin/env bash
# The hardening half of CI, after tools/test.sh: the whole suite under
# AddressSanitizer (+LeakSanitizer), again with use-after-return detection and
# Highway capped at AVX2, under UndefinedBehaviorSanitizer, then the
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
# Use-after-return needs frames of at most 32 bytes' alignment: a second pass
# over the same ASan build with Highway capped at AVX2 (see .bazelrc).
echo "=== ci: asan-uar runs with ATTNKIT_HWY_TARGET=AVX2:"
ATTNKIT_HWY_TARGET=AVX2 tools/isa_report.sh
piece asan-uar bazel test --config=asan_uar //...
piece ubsan bazel test --config=ubsan //...
piece libfuzzer bazel test --config=fuzz --test_env=FUZZ_SECONDS="${CI_FUZZ_SECONDS:-10}" \
  //tests/fuzz/...
bazel shutdown >/dev/null 2>&1 || true
exit $status
