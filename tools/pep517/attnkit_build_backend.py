"""The in-tree PEP 517 build backend behind `pip install .` (pyproject.toml):
the wheel is what tools/build_wheel.sh makes (Bazel builds libattnkit.so,
and the CUDA plugin when nvcc is present; tools/build_wheel.py packs them
with python/attnkit and the Debian libraries they link), so `pip install .`
and the release script give the same wheel. Nothing is downloaded: the build
needs no Python package (get_requires_* return []), and Bazel builds offline
from Debian's packages (tools/setup.sh installs them).

ATTNKIT_JOBS sets Bazel's --jobs (default 2), as for tools/build_wheel.sh.
"""

import io
import os
import pathlib
import shutil
import subprocess
import tarfile
import tempfile

ROOT = pathlib.Path(__file__).absolute().parent.parent.parent


def _version():
    return (ROOT / "VERSION").read_text().strip()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def _bazel_env():
    """The environment without pip's isolated-build folders on PATH: Bazel
    keys every action on the PATH it inherits, so a PATH of pip's would
    rebuild everything that `bazel build` and tools/test.sh built."""
    env = dict(os.environ)
    parts = env.get("PATH", "").split(os.pathsep)
    env["PATH"] = os.pathsep.join(p for p in parts if "pip-build-env-" not in p)
    return env


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    """Runs tools/build_wheel.sh into a scratch folder and moves the one
    wheel it made to wheel_directory; returns its file name."""
    with tempfile.TemporaryDirectory(prefix="attnkit-wheel-") as out:
        subprocess.run(["bash", str(ROOT / "tools" / "build_wheel.sh"), out], cwd=ROOT,
                       check=True, env=_bazel_env())
        wheels = sorted(pathlib.Path(out).glob("attnkit-*.whl"))
        if len(wheels) != 1:
            raise RuntimeError(f"tools/build_wheel.sh made {len(wheels)} wheels in {out}, not one")
        target = pathlib.Path(wheel_directory) / wheels[0].name
        shutil.move(str(wheels[0]), target)
        return target.name


def build_sdist(sdist_directory, config_settings=None):
    """The files git tracks, under attnkit-VERSION/."""
    name = f"attnkit-{_version()}"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    target = pathlib.Path(sdist_directory) / f"{name}.tar.gz"
    with tarfile.open(target, "w:gz") as tar:
        for f in filter(None, files):
            if (ROOT / f).is_file():
                tar.add(ROOT / f, arcname=f"{name}/{f}")
        pkg_info = tarfile.TarInfo(f"{name}/PKG-INFO")
        data = f"Metadata-Version: 2.1\nName: attnkit\nVersion: {_version()}\n".encode()
        pkg_info.size = len(data)
        tar.addfile(pkg_info, io.BytesIO(data))
    return target.name
