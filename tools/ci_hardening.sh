#!/usr/bin/env bash
# The hardening half of CI, after tools/test.sh: the whole suite under
# AddressSanitizer (+LeakSanitizer) and UndefinedBehaviorSanitizer, built
# once with both (--config=sanitize), then the parser fuzzers as real
# libFuzzer binaries for $CI_FUZZ_SECONDS (10) each. Sanitizer and fuzz
# configs leave CUDA out (see .bazelrc) and build only what the tests need
# (--build_tests_only: the normal build already compiled the benchmarks).
#
# Use-after-return detection needs frames of at most 32 bytes' alignment, so
# its pass caps Highway at AVX2 (sanitize_uar). On a CPU with AVX-512 a first
# pass without it covers the AVX3 kernels; on one without, the capped pass
# already runs every target the CPU has, and it is the only pass. After a
# first pass, the capped one leaves out the conformance columns that add no
# code of their own (see below).
# Prints the wall time of each piece; fails if any piece fails, after
# running all of them.
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
avx512=0
if grep -m1 '^flags' /proc/cpuinfo | grep -qw avx512f \
    && grep -m1 '^flags' /proc/cpuinfo | grep -qw avx512bw; then
  avx512=1
fi
flags=(--build_tests_only)
uar_only=()
if ((avx512)); then
  piece sanitize bazel test --config=sanitize "${flags[@]}" //...
  # The first pass ran every conformance column under ASan and UBSan; the
  # use-after-return pass leaves out the reference backend (its rows are
  # oracle/reference.cc's ReferenceRow, which every case runs anyway as its
  # oracle) and the reduced-grid twins highway-SSE4, highway-SCALAR (the
  # kernel templates it runs at AVX2 on the whole grid) and blas-scalar (a
  # test-only plain-loop engine). That is 64 % of the conformance suite's
  # time at AVX2 (opt build here: 88.6 s -> 32.4 s).
  # The filter goes to the conformance suite alone (its own bazel command):
  # a global GTEST_FILTER would also cut other tests' cases, and
  # required_skips_test counts its probe's cases.
  uar_only+=("--test_env=GTEST_FILTER=-*/reference_*:*/highway_SSE4_*:*/highway_SCALAR_*:*/blas_scalar_*")
else
  # Nothing here could run an AVX-512 target: the instrumented build leaves
  # them out (third_party/highway/targets.bzl), which halves its Highway part.
  echo "=== ci: no AVX-512 here: one sanitizer pass, with use-after-return on," \
    "AVX-512 targets not compiled"
  flags+=(--define=hwy_max_target=avx2)
fi
if ((avx512)); then
  piece sanitize-uar bazel test --config=sanitize_uar "${flags[@]}" -- //... -//tests:conformance_test
  piece sanitize-uar-conformance bazel test --config=sanitize_uar "${flags[@]}" "${uar_only[@]}" \
    //tests:conformance_test
else
  piece sanitize-uar bazel test --config=sanitize_uar "${flags[@]}" //...
fi
echo "=== ci: sanitize-uar ran with ATTNKIT_HWY_TARGET=AVX2 on this build:"
ATTNKIT_HWY_TARGET=AVX2 tools/isa_report.sh --config=sanitize_uar "${flags[@]:1}"
piece libfuzzer bazel test --config=fuzz --build_tests_only --test_env=FUZZ_SECONDS="${CI_FUZZ_SECONDS:-10}" \
  //tests/fuzz/...
bazel shutdown >/dev/null 2>&1 || true
exit $status
