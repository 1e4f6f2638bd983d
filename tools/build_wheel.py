#!/usr/bin/env python3
"""Packs python/attnkit, libattnkit.so and plugin .so files into a wheel.

    build_wheel.py OUT_DIR VERSION LIBATTNKIT [PLUGIN.so ...]

The wheel (attnkit-VERSION-py3-none-linux_x86_64.whl) holds pure Python over
the C API, so one build serves every Python 3; the shared objects go to
attnkit/_lib/ (plugins to attnkit/_lib/plugins/). It needs numpy; torch and
ml_dtypes are optional. The libraries link Debian 12's shared libraries
(Abseil, Highway, OpenBLAS, protobuf; tools/setup.sh installs them).
"""

import base64
import hashlib
import pathlib
import sys
import zipfile

# Not resolve(): under Bazel the script runs from runfiles, beside the package.
ROOT = pathlib.Path(__file__).absolute().parent.parent


def digest(data):
    h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={h}"


def main():
    out_dir, version, library, *plugins = sys.argv[1:]
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tag = "py3-none-linux_x86_64"
    wheel = out / f"attnkit-{version}-{tag}.whl"
    dist_info = f"attnkit-{version}.dist-info"
    files = {}
    for py in sorted((ROOT / "python" / "attnkit").glob("*.py")):
        files[f"attnkit/{py.name}"] = py.read_bytes()
    files["attnkit/_lib/libattnkit.so"] = pathlib.Path(library).read_bytes()
    for plugin in plugins:
        files[f"attnkit/_lib/plugins/{pathlib.Path(plugin).name}"] = pathlib.Path(
            plugin
        ).read_bytes()
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
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    tmp.replace(wheel)  # whole or not at all
    print(wheel)


if __name__ == "__main__":
    main()
