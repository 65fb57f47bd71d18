#!/usr/bin/env bash
# Configures and builds one of the two GPU build trees exactly as the GPU
# scripts (gpu_smoke.sh, gpu_session.sh) do, printing every command:
#   scripts/gpu_build.sh gpu-only [TARGET...]   # build-gpu: -DMGS_GPU_ONLY=ON
#   scripts/gpu_build.sh full [TARGET...]       # build-gpu-full: libmgs with CUDA
#   scripts/gpu_build.sh full --configure-only
# No TARGET: every target of the tree. The full tree needs Open MPI's mpi.h
# and takes Catch2 v2, CLI11, nlohmann-json, spdlog and fmt from .deps when
# there (scripts/gpu_deps.sh). Needs nvcc (/usr/local/cuda/bin), no GPU.
# Settings (scripts/lib/gpu_tree.sh): GPU_CUDA_ARCH (90), PYTHON,
# GPU_BUILD_DIR, GPU_FULL_BUILD_DIR, GPU_DEPS, GPU_JOBS, GPU_REUSE_BUILD.
# Exit status: 0 when configure and build succeeded; 2 for bad usage; 3 when
# the full tree cannot be configured here (no mpi.h); else the failing
# command's status.
set -u
cd "$(dirname "$0")/.." || exit 2
. scripts/lib/gpu_tree.sh
tree=${1:-}
case $tree in
  gpu-only | full) shift ;;
  *) sed -n '2,14p' "$0" >&2; exit 2 ;;
esac
gt_init
gt_configure "$tree" || exit $?
[ "${1:-}" = --configure-only ] && exit 0
gt_build "$tree" "$@"
