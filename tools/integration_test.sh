#!/usr/bin/env bash
# attnkit inside real model code: the Hugging Face Transformers backend and
# the torch.library operator (python/tests/integration), and the README's
# Transformers example (tools/readme_examples.py), against the
# libattnkit.so built here, in a cached virtual environment that holds
# PyTorch and Transformers (about 5 GiB: never made by CI).
#
#   tools/integration_test.sh --setup   # make the environment (PyPI), then run
#   tools/integration_test.sh           # run; one line and exit 0 without it
#   tools/integration_test.sh -k gemma  # extra arguments go to pytest
#
# The environment is $ATTNKIT_INTEGRATION_VENV (default
# ~/.cache/attnkit/integration-venv), made from Debian's python3 with its
# system packages visible (pytest, numpy).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${ATTNKIT_INTEGRATION_VENV:-$HOME/.cache/attnkit/integration-venv}
if [[ ${1:-} == --setup ]]; then
  shift
  if [[ ! -x $venv/bin/python ]]; then
    /usr/bin/python3 -m venv --system-site-packages "$venv"
  fi
  "$venv/bin/pip" install --quiet --disable-pip-version-check torch transformers
fi
if ! "$venv/bin/python" -c "import torch, transformers" >/dev/null 2>&1; then
  echo "integration tests: did not run: no environment with torch and transformers at $venv;" \
    "make it with tools/integration_test.sh --setup"
  exit 0
fi
tools/setup.sh
bazel build --ui_event_filters=-info --noshow_progress //capi:libattnkit.so
lib="$(bazel info bazel-bin 2>/dev/null)/capi/libattnkit.so"
"$venv/bin/python" -c 'import torch, transformers, sys
print(f"integration tests: torch {torch.__version__}, transformers {transformers.__version__},",
      f"python {sys.version.split()[0]}, torch CPU capability {torch.backends.cpu.get_cpu_capability()}")'
status=0
ATTNKIT_LIBRARY=$lib PYTHONPATH=$PWD/python PYTHONDONTWRITEBYTECODE=1 \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests/integration "$@" || status=$?
# The README's Transformers example, as written (tools/readme_examples.py).
ATTNKIT_LIBRARY=$lib PYTHONPATH=$PWD/python PYTHONDONTWRITEBYTECODE=1 \
  python3 tools/readme_examples.py run torch README.md --python="$venv/bin/python" || status=$?
bazel shutdown >/dev/null 2>&1 || true
exit $status
