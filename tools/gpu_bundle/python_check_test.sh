#!/usr/bin/env bash
# The GPU bundle's python_check.py judges outputs with attnkit's oracle
# (`attnkit verify`), not with absolute tolerances: on the CPU, bf16 outputs
# of the bundle's CUDA shapes with planted bugs (output x1.02, a dropped key,
# softmax scale x1.02) pass the old tolerance (3e-2) and fail verify, while
# the correct outputs pass both (python_check.py --planted). Debian's python3
# with numpy (tools/setup.sh).
set -euo pipefail
exec /usr/bin/python3 tools/gpu_bundle/python_check.py --planted --attnkit=tools/attnkit
