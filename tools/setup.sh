#!/usr/bin/env bash
# Installs every Debian package attnkit needs to build and test. Idempotent:
# when everything is present it only asks dpkg and returns (well under a
# second). CUDA is not from apt: it is used when /usr/local/cuda exists.
# chromium renders `compare --html` pages in the suite (headless); librsvg2-bin
# gives `compare --svg` its PNG twin. clang gives the README's plugin build
# its `clang++`.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-platforms default-jdk-headless
  g++ libabsl-dev libhwy-dev libgtest-dev libgmock-dev libbenchmark-dev
  libprotobuf-dev protobuf-compiler libopenblas-dev libdnnl-dev libopenmpi-dev openmpi-bin
  clang clang-14 libclang-rt-14-dev libc++-14-dev libc++abi-14-dev
  python3-numpy python3-pytest python3-venv
  chromium librsvg2-bin
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "attnkit setup: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "attnkit setup: run as root or install sudo" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "attnkit setup: done" >&2
