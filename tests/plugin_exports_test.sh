#!/usr/bin/env bash
# Each plugin exports exactly its entry point, and libattnkit.so exactly its
# C API functions: nothing of core/, Abseil or the C++ standard library leaks
# out to interpose on a host's copies (plugin/plugin.bzl, capi/exports.lds).
# Arguments: plugin .so files, then --capi and libattnkit.so.
set -euo pipefail
status=0
expect_only() {  # FILE REGEX: every defined dynamic symbol matches REGEX
  local file=$1 regex=$2 symbols
  symbols=$(nm -D --defined-only "$file" | awk '{print $3}' | sort)
  [[ -n $symbols ]] || { echo "FAIL: $file exports nothing"; status=1; return; }
  local bad
  bad=$(grep -Ev "$regex" <<< "$symbols" || true)
  if [[ -n $bad ]]; then
    echo "FAIL: $file exports more than $regex:"
    sed 's/^/  /' <<< "$bad" | head -20
    status=1
  else
    echo "ok: $(basename "$file"): $(tr '\n' ' ' <<< "$symbols")"
  fi
}
capi=0
for f in "$@"; do
  if [[ $f == --capi ]]; then capi=1; continue; fi
  if [[ $capi == 1 ]]; then
    expect_only "$f" '^attnkit_[a-z_]+$'
    grep -q '^attnkit_run$' < <(nm -D --defined-only "$f" | awk '{print $3}') ||
      { echo "FAIL: $f lacks attnkit_run"; status=1; }
  else
    expect_only "$f" '^attnkit_plugin_entry$'
  fi
done
exit $status
