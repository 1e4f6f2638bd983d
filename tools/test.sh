#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds everything, runs
# every test, and stops the Bazel server. Extra arguments go to `bazel test`.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
status=0
bazel test //... "$@" || status=$?
bazel shutdown >/dev/null 2>&1 || true
exit $status
