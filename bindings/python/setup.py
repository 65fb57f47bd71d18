"""Build hook: put libmgs.so and the mgsrun launcher inside the package.

The binaries are taken from, in order: $MGS_LIBRARY (and $MGSRUN, else the
mgsrun next to it in a build tree); the repository's build/ tree; or a fresh
CMake build of the C++ sources (targets mgs and mgsrun; extra CMake arguments
in $CMAKE_ARGS, for example "-DMGS_WITH_CUDA=ON"). Set MGSPY_FORCE_BUILD=1 to
always build. The sources are the repository around this folder or, in an
sdist, the copy under mgs_src/ that `setup.py sdist` puts there.

The packaged copies are stripped of debug information and look for libraries
next to themselves first ($ORIGIN), then where they were linked (MPI).
"""

import os
import shlex
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
# The C++ sources an sdist carries (everything the top-level CMakeLists.txt needs
# with tests and benchmarks off).
SOURCE_ITEMS = ["CMakeLists.txt", "LICENSE", "cmake", "include", "src", "cuda", "launcher", "tools", "examples"]


def _source_dir():
    if os.environ.get("MGS_SOURCE_DIR"):
        return Path(os.environ["MGS_SOURCE_DIR"])
    if (HERE / "mgs_src" / "CMakeLists.txt").exists():
        return HERE / "mgs_src"
    return HERE.parent.parent


def _build_binaries():
    repo = _source_dir()
    if not (repo / "CMakeLists.txt").exists() or not (repo / "include" / "mgs" / "mgs.h").exists():
        raise RuntimeError(f"cannot build libmgs: {repo} is not the mgs source tree; set MGS_SOURCE_DIR "
                           "or MGS_LIBRARY")
    build_dir = HERE / "build" / "cmake"
    configure = ["cmake", "-S", str(repo), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                 "-DMGS_BUILD_TESTS=OFF", "-DMGS_BUILD_BENCH=OFF", "-DMGS_HEADER_ONLY_LOGGING=ON"]
    configure += shlex.split(os.environ.get("CMAKE_ARGS", ""))
    jobs = os.environ.get("MGS_BUILD_JOBS", str(os.cpu_count() or 2))
    subprocess.check_call(configure)
    subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "mgs", "mgsrun", "-j", jobs])
    return build_dir / "src" / "capi" / "libmgs.so", build_dir / "launcher" / "mgsrun"


def _find_binaries():
    env = os.environ.get("MGS_LIBRARY")
    if env:
        lib = Path(env)
        if not lib.exists():
            raise RuntimeError(f"MGS_LIBRARY={env} does not exist")
        run = Path(os.environ.get("MGSRUN", lib.resolve().parent.parent.parent / "launcher" / "mgsrun"))
        return lib, run
    build = HERE.parent.parent / "build"
    prebuilt = build / "src" / "capi" / "libmgs.so", build / "launcher" / "mgsrun"
    if all(p.exists() for p in prebuilt) and os.environ.get("MGSPY_FORCE_BUILD") != "1":
        return prebuilt
    return _build_binaries()


def _install_binary(src, dest):
    """Copy, strip debug information, and make it look next to itself for libraries first."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    dest.chmod(0o755)
    if shutil.which("strip"):
        subprocess.check_call(["strip", "--strip-unneeded", str(dest)])
    if shutil.which("patchelf"):
        old = subprocess.run(["patchelf", "--print-rpath", str(dest)], capture_output=True, text=True).stdout.strip()
        paths = ["$ORIGIN"] + [p for p in old.split(":") if p and p != "$ORIGIN"]
        subprocess.check_call(["patchelf", "--set-rpath", ":".join(paths), str(dest)])


class BuildPyWithBinaries(build_py):
    def run(self):
        super().run()
        lib, run = _find_binaries()
        pkg = Path(self.build_lib) / "mgs"
        _install_binary(lib.resolve(), pkg / "libmgs.so")  # the versioned file, not the symlink
        if run.exists():
            _install_binary(run, pkg / "bin" / "mgsrun")
        else:
            print(f"mgs: warning: {run} does not exist; the package's mgsrun command will not work")
        print(f"mgs: packaged {lib} and {run} into {pkg}")


class SdistWithSources(sdist):
    """An sdist that can build: the C++ sources travel under mgs_src/."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        repo = _source_dir()
        for item in SOURCE_ITEMS:
            src, dest = repo / item, Path(base_dir) / "mgs_src" / item
            if src.is_dir():
                shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            elif src.exists():
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dest)


class BinaryDistribution(Distribution):
    """The wheel holds native binaries: tag it for this platform."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithBinaries, "sdist": SdistWithSources}, distclass=BinaryDistribution)
