#!/usr/bin/env bash
# Builds and runs the attnkit CLI: `tools/attnkit.sh check`, `... backends`.
# Installs what is missing first, and stops the Bazel server afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
bazel build --noshow_progress //tools:attnkit 2>&1 | grep -vE '^(INFO|Target|  bazel-bin)' >&2 || true
status=0
bazel-bin/tools/attnkit "$@" || status=$?
bazel shutdown >/dev/null 2>&1 || true
exit $status
