#!/usr/bin/env bash
# The wheel installs into a fresh virtual environment and works there: packs
# python/attnkit with the libattnkit.so Bazel built (tools/build_wheel.py),
# creates a venv that sees Debian's numpy (--system-site-packages, so
# nothing is downloaded), pip-installs the wheel offline and runs SDPA from
# outside the source tree.
# Arguments: tools/build_wheel.py, libattnkit.so.
set -euo pipefail
root="${TEST_SRCDIR:-$(pwd)/..}/attnkit"
work="${TEST_TMPDIR:-$(mktemp -d)}"
/usr/bin/python3 "$root/$1" "$work/dist" 0.0.0.test "$root/$2" > /dev/null
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install --no-index --quiet --disable-pip-version-check "$work"/dist/*.whl
cd "$work"
"$work/venv/bin/python" - <<'PY'
import numpy as np
import attnkit

assert "site-packages" in attnkit.__file__, attnkit.__file__
names = [b["name"] for b in attnkit.backends()]
assert {"highway", "blas", "reference"} <= set(names), names
q = np.random.rand(2, 4, 16, 32).astype(np.float32)
o = attnkit.scaled_dot_product_attention(q, q, q, is_causal=True)
r = attnkit.scaled_dot_product_attention(q, q, q, is_causal=True, backend="reference")
np.testing.assert_allclose(o, r, rtol=1e-4, atol=2e-5)
print("wheel ok:", attnkit.__file__, attnkit.last_run()["backend"])
PY
