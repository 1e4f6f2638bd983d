#!/usr/bin/env python3
"""Packs python/attnkit, libattnkit.so and plugin .so files into a wheel.

    build_wheel.py [--bundle] OUT_DIR VERSION LIBATTNKIT [PLUGIN.so ...]
    build_wheel.py --print_order OBJ.so ...

The wheel (attnkit-VERSION-py3-none-linux_x86_64.whl) holds pure Python over
the C API, so one build serves every Python 3; the shared objects go to
attnkit/_lib/ (plugins to attnkit/_lib/plugins/). It needs numpy; torch and
ml_dtypes are optional.

The libraries link Debian 12's shared libraries (Abseil, Highway, OpenBLAS,
protobuf). With --bundle, every library they need beyond glibc and CUDA's
(the driver, cudart, cuBLAS: the GPU machine's own) goes into
attnkit/_lib/deps/, named by soname, with deps/ORDER listing them
dependencies first; attnkit preloads them (skipping any the process already
has) so the wheel runs where those Debian packages are not installed, as
auditwheel's repair does for manylinux wheels.
"""

import base64
import hashlib
import pathlib
import re
import subprocess
import sys
import zipfile

# Not resolve(): under Bazel the script runs from runfiles, beside the package.
ROOT = pathlib.Path(__file__).absolute().parent.parent


def digest(data):
    h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={h}"


# Provided by the system the wheel runs on: glibc, the kernel's vDSO, and
# CUDA (the driver and the toolkit's runtime libraries are the machine's own).
_PROVIDED = re.compile(
    r"^(libc|libm|libdl|libpthread|librt|libutil|libresolv|ld-linux.*|linux-vdso|libcuda|"
    r"libcudart|libcublas|libcublasLt|libnvrtc)\.so"
)


def needed(path):
    """{soname: resolved path} of everything `path` loads (ldd: transitive)."""
    out = subprocess.run(["ldd", str(path)], check=True, capture_output=True, text=True).stdout
    libs = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (\S+)", line)
        if not m:
            continue
        if m.group(2) == "not":
            raise SystemExit(f"build_wheel: {path} needs {m.group(1)}, which is not found")
        libs[m.group(1)] = m.group(2)
    return libs


def bundle(objects):
    """{soname: bytes} of the libraries `objects` need beyond the provided
    ones, and their load order (dependencies first)."""
    libs = {}
    for obj in objects:
        libs.update({n: p for n, p in needed(obj).items() if not _PROVIDED.match(n)})
    # A library needs strictly more (transitively) than each of its own
    # dependencies, so ordering by that count puts dependencies first.
    depth = {n: len([d for d in needed(p) if not _PROVIDED.match(d)]) for n, p in libs.items()}
    order = sorted(libs, key=lambda n: (depth[n], n))
    return {n: pathlib.Path(libs[n]).resolve().read_bytes() for n in order}, order


def main():
    args = sys.argv[1:]
    if args and args[0] == "--print_order":
        # build_wheel.py --print_order OBJ...: the bundle's load order alone
        # (tools/make_gpu_bundle.sh writes it beside its libraries).
        print("\n".join(bundle(args[1:])[1]))
        return
    bundle_deps = "--bundle" in args
    args = [a for a in args if a != "--bundle"]
    out_dir, version, library, *plugins = args
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tag = "py3-none-linux_x86_64"
    wheel = out / f"attnkit-{version}-{tag}.whl"
    dist_info = f"attnkit-{version}.dist-info"
    files = {}
    package = ROOT / "python" / "attnkit"
    for py in sorted(package.rglob("*.py")):  # the package and its subpackages
        files[f"attnkit/{py.relative_to(package).as_posix()}"] = py.read_bytes()
    files["attnkit/_lib/libattnkit.so"] = pathlib.Path(library).read_bytes()
    for plugin in plugins:
        files[f"attnkit/_lib/plugins/{pathlib.Path(plugin).name}"] = pathlib.Path(
            plugin
        ).read_bytes()
    if bundle_deps:
        deps, order = bundle([library] + plugins)
        for name, data in deps.items():
            files[f"attnkit/_lib/deps/{name}"] = data
        files["attnkit/_lib/deps/ORDER"] = ("\n".join(order) + "\n").encode()
    files[f"{dist_info}/METADATA"] = (
        "Metadata-Version: 2.1\n"
        "Name: attnkit\n"
        f"Version: {version}\n"
        "Summary: Attention backends you can check and compare: PyTorch-compatible SDPA on "
        "numpy arrays and torch tensors\n"
        "Requires-Python: >=3.8\n"
        "Requires-Dist: numpy\n"
        "Provides-Extra: torch\n"
        "Requires-Dist: torch>=2.0; extra == 'torch'\n"
    ).encode()
    files[f"{dist_info}/WHEEL"] = (
        "Wheel-Version: 1.0\n"
        "Generator: attnkit tools/build_wheel.py\n"
        "Root-Is-Purelib: false\n"
        f"Tag: {tag}\n"
    ).encode()
    files[f"{dist_info}/top_level.txt"] = b"attnkit\n"
    record = [f"{name},{digest(data)},{len(data)}" for name, data in files.items()]
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if ".so" in name else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    tmp.replace(wheel)  # whole or not at all
    print(wheel)


if __name__ == "__main__":
    main()
