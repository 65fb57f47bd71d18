"""Build hook: put libmgs.so inside the package.

The library is taken from, in order: $MGS_LIBRARY; the repository's
build/src/capi/libmgs.so; or a fresh CMake build of the repository (only
the `mgs` target; extra CMake arguments in $CMAKE_ARGS, for example
"-DMGS_WITH_CUDA=ON"). Set MGSPY_FORCE_BUILD=1 to always build.
"""

import os
import shlex
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
REPO = Path(os.environ.get("MGS_SOURCE_DIR", HERE.parent.parent))


def _build_libmgs():
    if not (REPO / "CMakeLists.txt").exists() or not (REPO / "include" / "mgs" / "mgs.h").exists():
        raise RuntimeError(f"cannot build libmgs: {REPO} is not the mgs source tree; set MGS_SOURCE_DIR "
                           "or MGS_LIBRARY")
    build_dir = HERE / "build" / "cmake"
    configure = ["cmake", "-S", str(REPO), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                 "-DMGS_BUILD_TESTS=OFF", "-DMGS_BUILD_BENCH=OFF"]
    configure += shlex.split(os.environ.get("CMAKE_ARGS", ""))
    jobs = os.environ.get("MGS_BUILD_JOBS", str(os.cpu_count() or 2))
    subprocess.check_call(configure)
    subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "mgs", "-j", jobs])
    return build_dir / "src" / "capi" / "libmgs.so"


def _find_libmgs():
    env = os.environ.get("MGS_LIBRARY")
    if env:
        if not Path(env).exists():
            raise RuntimeError(f"MGS_LIBRARY={env} does not exist")
        return Path(env)
    prebuilt = REPO / "build" / "src" / "capi" / "libmgs.so"
    if prebuilt.exists() and os.environ.get("MGSPY_FORCE_BUILD") != "1":
        return prebuilt
    return _build_libmgs()


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        lib = _find_libmgs().resolve()  # the versioned file, not the symlink
        dest = Path(self.build_lib) / "mgs" / "libmgs.so"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(lib, dest)
        print(f"mgs: packaged {lib} as {dest}")


class BinaryDistribution(Distribution):
    """The wheel holds a native library: tag it for this platform."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithLibrary}, distclass=BinaryDistribution)
