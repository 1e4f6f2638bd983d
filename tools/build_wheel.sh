#!/usr/bin/env bash
# Builds the Python wheel: libattnkit.so (and the CUDA plugin when CUDA is
# built) with Bazel, then python/attnkit and those libraries packed by
# tools/build_wheel.py into out/attnkit-VERSION-py3-none-linux_x86_64.whl,
# with the Debian libraries they link bundled (build_wheel.py --bundle).
#   tools/build_wheel.sh [OUT_DIR]
#   pip install out/attnkit-*.whl
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out}
version=$(tr -d '[:space:]' < VERSION)
targets=(//capi:libattnkit.so)
cuda=0
if [[ -x "${CUDA_PATH:-/usr/local/cuda}/bin/nvcc" ]]; then
  targets+=(//backends/cuda:libattnkit_cuda.so)
  cuda=1
fi
bazel build --jobs="${ATTNKIT_JOBS:-2}" "${targets[@]}"
bin=$(bazel info bazel-bin 2> /dev/null)
plugins=()
[[ $cuda == 1 ]] && plugins+=("$bin/backends/cuda/libattnkit_cuda.so")
# --bundle: the Debian libraries go inside, so the wheel also runs where they
# are not installed (the GPU machine's Python 3.12).
python3 tools/build_wheel.py --bundle "$out" "$version" "$bin/capi/libattnkit.so" "${plugins[@]}"
