#!/usr/bin/env bash
# Prints the CPU, its SIMD extensions and the Highway targets compiled,
# runnable and dispatched here (//tools:isa_report), so a log says which code
# paths the tests after it exercised. Extra arguments go to `bazel build`
# (a config); the environment (ATTNKIT_HWY_TARGET) reaches the report.
set -uo pipefail
cd "$(dirname "$0")/.."
if bazel build --ui_event_filters=-info,-stdout --noshow_progress "$@" //tools:isa_report \
    >/dev/null 2>&1; then
  "$(bazel info "$@" bazel-bin 2>/dev/null)/tools/isa_report"
else
  # The report could not be built: say at least what the CPU is.
  echo "cpu:      $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "highway:  (//tools:isa_report did not build)"
fi
