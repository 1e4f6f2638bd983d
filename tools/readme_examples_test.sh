#!/usr/bin/env bash
# README.md's code blocks, run as written (tools/readme_examples.py): the CLI,
# mpirun, plugin-SDK and config blocks, and the check that .ci/run runs the
# quick start's two scripts word for word. The Python blocks run in
# tools/wheel_test.sh (a fresh venv with the wheel) and
# tools/integration_test.sh (torch and Transformers).
# Arguments: the attnkit binary, README.md.
set -euo pipefail
bin=$PWD/$1
readme=$PWD/$2
src=$PWD  # the runfiles tree: README.md, .ci/run, include/, plugin/, ...
tmp=${TEST_TMPDIR:-$(mktemp -d)}
export ATTNKIT_CACHE_DIR=$tmp/cache
# Open MPI in a sandbox (distributed/ring_cli_test.sh says why): its session
# files and vader's shared-memory segments in this test's own directory.
export TMPDIR=$tmp OMPI_MCA_btl_vader_backing_directory=$tmp
python3 tools/readme_examples.py list "$readme"
python3 tools/readme_examples.py run ci "$readme" --src="$src"
python3 tools/readme_examples.py run bazel "$readme" --attnkit="$bin" --src="$src" --cwd="$tmp"
