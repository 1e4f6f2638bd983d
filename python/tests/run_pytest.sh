#!/usr/bin/env bash
# Runs the Python package's pytest suite with Debian's python3, numpy and
# pytest (tools/setup.sh installs them) against the libattnkit.so that Bazel
# built. Arguments: libattnkit.so, then plugins for $ATTNKIT_PLUGIN_PATH.
set -euo pipefail
root="${TEST_SRCDIR:-$(pwd)/..}/attnkit"
export ATTNKIT_LIBRARY="$root/$1"
shift
plugins=()
for p in "$@"; do plugins+=("$root/$p"); done
export ATTNKIT_PLUGIN_PATH=$(IFS=:; echo "${plugins[*]}")
export PYTHONPATH="$root/python"
export PYTHONDONTWRITEBYTECODE=1
cd "$root"
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider python/tests
