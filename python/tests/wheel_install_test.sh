#!/usr/bin/env bash
# The wheel installs into a fresh virtual environment and works there: packs
# python/attnkit with the libattnkit.so Bazel built (tools/build_wheel.py),
# creates a venv that sees Debian's numpy (--system-site-packages, so
# nothing is downloaded), pip-installs the wheel offline and runs SDPA from
# outside the source tree. The wheel is built with --bundle: the Debian
# libraries libattnkit.so links must be loaded from inside it.
# Arguments: tools/build_wheel.py, libattnkit.so.
set -euo pipefail
root="${TEST_SRCDIR:-$(pwd)/..}/attnkit"
work="${TEST_TMPDIR:-$(mktemp -d)}"
/usr/bin/python3 "$root/$1" --bundle "$work/out" 0.0.0.test "$root/$2" > /dev/null
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install --no-index --quiet --disable-pip-version-check "$work"/out/*.whl
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
# The libraries that only Debian packages provide came from the wheel
# (OpenBLAS is not checked: Debian's numpy, imported first, has loaded it,
# and the preload rightly does not load a second copy).
maps = open("/proc/self/maps").read().split("\n")
deps = attnkit.__file__.rsplit("/", 1)[0] + "/_lib/deps/"
for lib in ("libprotobuf.so", "libhwy.so", "libabsl_status"):
    paths = {line.split()[-1] for line in maps if lib in line}
    assert paths and all(p.startswith(deps) for p in paths), (lib, paths)
# Subpackages travel too (the Transformers backend; importing it needs torch).
import importlib.util
assert importlib.util.find_spec("attnkit.integrations.transformers") is not None
print("wheel ok:", attnkit.__file__, attnkit.last_run()["backend"])
PY
