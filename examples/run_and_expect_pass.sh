#!/usr/bin/env bash
# Runs an example program and requires it to exit 0 and print PASS.
set -euo pipefail
out=$("$1")
echo "$out"
grep -qx PASS <<<"$out" || { echo "FAIL: $1 did not print PASS" >&2; exit 1; }
