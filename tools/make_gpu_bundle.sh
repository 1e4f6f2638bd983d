#!/usr/bin/env bash
# Builds the self-contained GPU check bundle: the CUDA-relevant test binaries,
# the attnkit CLI and the backend plugins, optimised, with every shared
# library they load that a bare GPU machine may lack, and the runner
# (tools/gpu_bundle/run.sh, with torch_compare.py, python_check.py and
# bundle_env.sh) and the per-kernel profile (kernel_times.sh). The GPU machine then needs
# only glibc >= 2.36, the NVIDIA driver and CUDA 13's cuBLAS (the toolkit or
# PyTorch's nvidia-cublas wheel, found by run.sh): no Bazel, no Debian
# packages.
#
#   tools/make_gpu_bundle.sh [OUT_DIR]      (default: out/gpu_bundle)
#
# Fails when the bundle would exceed 61 MiB (the device tool carries 64 MiB
# with the working tree, about 1.2 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/gpu_bundle}
limit_mib=61

# What run.sh runs on the GPU (its SUITES): the host-only CUDA unit tests,
# property_test, diff_fuzz_test and the reference plugin ran here and stay out.
tests=(//tests:conformance_test //tests:grad_conformance_test //tests:concurrency_test
  //backends/cuda:cuda_plugin_test)
others=(//tools:attnkit //benchmarks:cuda_bench //backends/cuda:libattnkit_cuda.so
  //capi:libattnkit.so)
# Linked as Bazel links the tests (our libraries as shared objects, copied
# below with Debian's). The plugins cross the C ABI and keep their own copy
# of core/ local (plugin/plugin.bzl), so nothing relies on interposition.
flags=(-c opt --config=cuda --jobs="${ATTNKIT_JOBS:-2}")
bazel build "${flags[@]}" "${tests[@]}" "${others[@]}"
bin=$(bazel info "${flags[@]}" bazel-bin 2> /dev/null)

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
path_of() { local label=${1#//}; echo "$bin/${label/://}"; }
sources=()
for t in "${tests[@]}" //tools:attnkit //benchmarks:cuda_bench; do
  sources+=("$(path_of "$t")")
  install -m 755 "$(path_of "$t")" "$out/bin/"
done
for t in //backends/cuda:libattnkit_cuda.so //capi:libattnkit.so; do
  sources+=("$(path_of "$t")")
  install -m 755 "$(path_of "$t")" "$out/lib/"
done

# Shared libraries: everything ldd resolves for the originals (their RUNPATH
# finds our own libraries in Bazel's _solib directories) except glibc itself,
# the driver (libcuda) and the CUDA toolkit's libraries (cuBLAS is hundreds of
# MiB; the GPU machine has CUDA 13, and run.sh puts it on the library path).
is_provided() {
  case "$(basename "$1")" in
    libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux*.so.* | \
      libcuda.so.* | libcublas*.so.* | libcudart.so.* | linux-vdso.so.*) return 0 ;;
  esac
  return 1
}
for f in "${sources[@]}"; do
  if ldd "$f" | grep -q 'not found'; then
    echo "make_gpu_bundle: $f has unresolved libraries:" >&2
    ldd "$f" | grep 'not found' >&2
    exit 1
  fi
  ldd "$f" | awk '/=> \//{print $3}' | while read -r lib; do
    is_provided "$lib" && continue
    [[ -e "$out/lib/$(basename "$lib")" ]] ||
      install -m 644 "$(readlink -f "$lib")" "$out/lib/$(basename "$lib")"
  done
done
strip --strip-unneeded "$out"/bin/* "$out"/lib/*.so* 2> /dev/null || true

# The Python package over lib/libattnkit.so; lib/ORDER lets it preload the
# bundled libraries itself (ATTNKIT_DEPS_DIR), dependencies first.
python3 tools/build_wheel.py --print_order "$out/lib/libattnkit.so" "$out/lib/libattnkit_cuda.so" \
  > "$out/lib/ORDER"
mkdir -p "$out/python/attnkit"
install -m 644 python/attnkit/*.py "$out/python/attnkit/"
install -m 644 tools/gpu_bundle/python_check.py "$out/python_check.py"

# Libraries over 8 MiB travel gzipped (OpenBLAS with every CPU's kernels is
# 35 MiB, 11 MiB gzipped); run.sh unpacks them beside the others first.
find "$out/lib" -name '*.so*' -size +8M -exec gzip -9 {} +

install -m 755 tools/gpu_bundle/run.sh "$out/run.sh"
install -m 644 tools/gpu_bundle/bundle_env.sh "$out/bundle_env.sh"
install -m 755 tools/gpu_bundle/kernel_times.sh "$out/kernel_times.sh"
install -m 644 tools/gpu_bundle/torch_compare.py "$out/torch_compare.py"
git rev-parse --short HEAD > "$out/COMMIT" 2> /dev/null || echo unknown > "$out/COMMIT"

size_kib=$(du -sk "$out" | cut -f1)
echo "gpu bundle: $out, $((size_kib / 1024)) MiB ($(ls "$out/bin" | wc -l) binaries, $(ls "$out/lib" | wc -l) libraries)"
if ((size_kib > limit_mib * 1024)); then
  echo "gpu bundle: $((size_kib / 1024)) MiB is over the ${limit_mib} MiB limit" >&2
  exit 1
fi
