#!/usr/bin/env bash
# Builds Horovod 0.28.1 (CPU, MPI controller, PyTorch only) from its PyPI sdist
# into DIR (default .peers/horovod in the repo), as a peer baseline for
# bench/train. Horovod is not part of mgs: nothing of it is committed. Needs
# Debian's libtorch-dev, pybind11-dev and python3-cloudpickle (installed when
# missing). Usage: bench/train/build_horovod.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=$(realpath -m "${1:-.peers/horovod}")
if PYTHONPATH="$dir" /usr/bin/python3 -c 'import horovod.torch' 2>/dev/null; then
  echo "horovod already built in $dir"; exit 0
fi
need=()
for p in libtorch-dev pybind11-dev python3-cloudpickle; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd=sudo
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
work=$(mktemp -d /tmp/horovod-build.XXXXXX)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 -m pip download -q horovod==0.28.1 --no-deps --no-binary :all: -d "$work"
# Keep CUDA out: this is the CPU/MPI build users compare with here (a toolchain
# file through the environment, since setup.py takes no -D flags; no nvcc on PATH).
echo 'set(CMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit TRUE)' >"$work/nocuda.cmake"
mkdir -p "$dir"
env -i HOME="$HOME" PATH=/usr/sbin:/usr/bin:/sbin:/bin CMAKE_TOOLCHAIN_FILE="$work/nocuda.cmake" \
  MAKEFLAGS=-j"$(nproc)" HOROVOD_WITH_MPI=1 HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
  HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_GLOO=1 HOROVOD_WITHOUT_NVTX=1 \
  /usr/bin/python3 -m pip install -q --no-deps --no-build-isolation --target "$dir" "$work"/horovod-0.28.1.tar.gz
PYTHONPATH="$dir" /usr/bin/python3 -c 'import horovod, horovod.torch; print("horovod", horovod.__version__, "built")'
