# shellcheck shell=bash
# Sourced by the GPU bundle's scripts (run.sh, kernel_times.sh) from the
# bundle's root: `bundle_env DIR` readies the bundle at DIR to run there.
#  - Unpacks the libraries the bundle carries gzipped (make_gpu_bundle.sh),
#    once; returns 1 with a message when one cannot be unpacked.
#  - Finds CUDA 13's libraries (cuBLAS) in the toolkit or in PyTorch's
#    nvidia-* wheels: sets the array cuda_dirs.
#  - Puts DIR/lib, then cuda_dirs, first on LD_LIBRARY_PATH.
bundle_env() {
  local dir=$1 gz lib d lib_path
  for gz in "$dir"/lib/*.gz; do
    [[ -e $gz ]] || continue
    lib=${gz%.gz}
    [[ -e $lib ]] && continue
    if ! { gzip -dc "$gz" > "$lib.tmp" && mv "$lib.tmp" "$lib"; }; then
      rm -f "$lib.tmp"
      echo "bundle_env: cannot unpack $gz into $lib (needs gzip and a writable bundle)" >&2
      return 1
    fi
  done

  # cuBLAS from the CUDA toolkit, or from PyTorch's nvidia-cublas wheel.
  cuda_dirs=()
  for d in "${CUDA_PATH:-/usr/local/cuda}/lib64" /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 \
    /usr/lib/x86_64-linux-gnu; do
    [[ -d $d ]] && cuda_dirs+=("$d")
  done
  if command -v python3 > /dev/null; then
    while read -r d; do [[ -d $d ]] && cuda_dirs+=("$d"); done < <(python3 - 2> /dev/null << 'PY'
import importlib
for name in ("nvidia.cublas", "nvidia.cu13", "nvidia.cuda_runtime"):
    try:
        m = importlib.import_module(name)
        for p in m.__path__:
            print(p + "/lib")
    except Exception:
        pass
PY
    )
  fi
  lib_path="$dir/lib"
  for d in "${cuda_dirs[@]}"; do lib_path="$lib_path:$d"; done
  export LD_LIBRARY_PATH="$lib_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}
