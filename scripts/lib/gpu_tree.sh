# shellcheck shell=bash
# shellcheck disable=SC2034  # GT_* are read by the scripts that source this file
# Configure and build of the two GPU build trees, shared by gpu_build.sh (the
# command CI calls), gpu_smoke.sh, gpu_session.sh, gpu_check.sh and
# gpu_full_check.sh; sourced from the repository root, never run.
#   gpu-only  $GPU_BUILD_DIR (build-gpu): -DMGS_GPU_ONLY=ON, the CUDA selector,
#             device buckets, NCCL communicator, their tests (tests/gpu with
#             the mini_catch runner) and mgs-bench-compress-gpu. Needs nvcc and
#             CMake only (NCCL from the toolkit or PyTorch's wheel).
#   full      $GPU_FULL_BUILD_DIR (build-gpu-full): the whole runtime with
#             CUDA (libmgs, gpu/runtime, the Python tests). Needs Open MPI's
#             mpi.h; Catch2 v2, CLI11, nlohmann-json, spdlog and fmt come from
#             .deps (scripts/gpu_deps.sh) when it is there, spdlog and fmt
#             header-only.
# Every command is printed before it runs (lines starting with "+ ").
# Settings: GPU_CUDA_ARCH (else MGS_CUDA_ARCH, else 90), PYTHON (python3),
# GPU_BUILD_DIR, GPU_FULL_BUILD_DIR, GPU_DEPS (.deps), GPU_JOBS (nproc),
# GPU_REUSE_BUILD=1 (gt_configure leaves a configured tree as it is and
# gt_build builds nothing when every target's file exists: a second command
# on the same machine reuses the first one's trees even where the copied
# sources have new timestamps).

gt_init() {
  GT_ARCH=${GPU_CUDA_ARCH:-${MGS_CUDA_ARCH:-90}}
  GT_PY=${PYTHON:-$(command -v python3)}
  GT_GPU_BUILD=${GPU_BUILD_DIR:-${MGS_GPU_BUILD:-build-gpu}}
  GT_FULL_BUILD=${GPU_FULL_BUILD_DIR:-${MGS_GPU_FULL_BUILD:-build-gpu-full}}
  GT_DEPS=${GPU_DEPS:-$PWD/.deps}
  GT_JOBS=${GPU_JOBS:-$(nproc 2> /dev/null || echo 4)}
  GT_NCCL_ROOT="unset"
  # The runtime refuses MGS_* variables it does not know, and the ranks and
  # tests started from here inherit this environment: the MGS_* names these
  # scripts read (older spellings of the GPU_* settings) stop here. A runtime
  # setting such as MGS_GPU_LAUNCHES passes through.
  local v
  for v in MGS_CUDA_ARCH MGS_GPU_BUILD MGS_GPU_FULL_BUILD MGS_GPU_OUT MGS_GPU_SANITIZE MGS_GPU_SANITIZE_LIMIT \
           MGS_GPU_SKIP_BENCH MGS_GPU_TEST_LIMIT MGS_GPU_TESTS; do
    unset "$v"
  done
  case ":$PATH:" in *:/usr/local/cuda/bin:*) ;; *) PATH=$PATH:/usr/local/cuda/bin ;; esac
  export PATH
  gt_nccl_root > /dev/null
}

gt_run() {
  printf '+'
  printf ' %q' "$@"
  printf '\n'
  "$@"
}

gt_dir() {
  case $1 in
    gpu-only) echo "$GT_GPU_BUILD" ;;
    full) echo "$GT_FULL_BUILD" ;;
    *) echo "gpu_tree: unknown tree '$1' (gpu-only or full)" >&2; return 2 ;;
  esac
}

# NCCL: the toolkit's when it has nccl.h, else the folder of PyTorch's
# nvidia-nccl wheel (printed; empty when none). Its lib/ goes on
# LD_LIBRARY_PATH for the tests.
gt_nccl_root() {
  if [ "$GT_NCCL_ROOT" = unset ]; then
    GT_NCCL_ROOT=""
    if [ ! -e /usr/local/cuda/include/nccl.h ] && [ -n "$GT_PY" ]; then
      GT_NCCL_ROOT=$("$GT_PY" scripts/find_nccl_root.py 2> /dev/null)
    fi
    if [ -n "$GT_NCCL_ROOT" ]; then
      export LD_LIBRARY_PATH="$GT_NCCL_ROOT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
  fi
  printf '%s' "$GT_NCCL_ROOT"
}

# Open MPI for the full tree. Sets GT_MPI to
#   system   mpi.h found (mpicc's include folders, Debian's and the usual
#            prefixes); GT_MPI_ARGS gives CMake the prefix when mpicc is not
#            on PATH;
#   carried  no mpi.h here, but a libmpi.so.40 and .deps/openmpi (Open MPI
#            4.1 C headers, scripts/gpu_deps.sh): CMake gets both explicitly;
#   none     neither: the full tree cannot be configured
#            (find_package(MPI REQUIRED) in CMakeLists.txt).
# GT_MPI_NOTE says which, in one line. GPU_MPI=carried takes the carried
# headers even where mpi.h is there, GPU_MPI=none acts as if there were no
# MPI (both to try those paths on a machine that has Open MPI).
# The first mpi.h found: mpicc's include folders, then the usual prefixes.
gt_find_mpi_h() {
  local d
  if command -v mpicc > /dev/null 2>&1; then
    for d in $(mpicc --showme:incdirs 2> /dev/null); do
      [ -e "$d/mpi.h" ] && echo "$d/mpi.h" && return 0
    done
  fi
  for d in /usr/include /usr/lib/x86_64-linux-gnu/openmpi/include /usr/lib64/openmpi/include \
           /usr/local/mpi/include /opt/hpcx/ompi/include /usr/local/include /opt/openmpi/include; do
    [ -e "$d/mpi.h" ] && echo "$d/mpi.h" && return 0
  done
  timeout 10 find /opt /usr/local /usr/lib -maxdepth 6 -name mpi.h -path '*include*' 2> /dev/null | head -1
}

gt_mpi() {
  GT_MPI=none GT_MPI_ARGS=() GT_MPI_NOTE=""
  local h="" lib version
  version=$(ompi_info --version 2> /dev/null | head -1)
  case ${GPU_MPI:-auto} in
    none)
      GT_MPI_NOTE="GPU_MPI=none: taken as a machine without mpi.h; the full tree (libmgs, gpu/runtime, the Python tests) cannot be configured"
      return 1 ;;
    carried) ;;
    *) h=$(gt_find_mpi_h) ;;
  esac
  if [ -n "$h" ]; then
    GT_MPI=system
    GT_MPI_NOTE="mpi.h: $h (${version:-ompi_info not found})"
    # FindMPI asks mpicc; without it on PATH, the prefix above include/.
    command -v mpicc > /dev/null 2>&1 || GT_MPI_ARGS=(-DMPI_HOME="$(dirname "$(dirname "$h")")")
    return 0
  fi
  lib=$(ldconfig -p 2> /dev/null | awk '/libmpi\.so\.40 /{print $NF; exit}')
  [ -n "$lib" ] || lib=$(timeout 10 find /usr/lib /usr/local /opt -maxdepth 6 -name 'libmpi.so.40' 2> /dev/null | head -1)
  if [ -n "$lib" ] && [ -e "$GT_DEPS/openmpi/include/mpi.h" ]; then
    GT_MPI=carried
    GT_MPI_ARGS=(-DMPI_C_COMPILER=MPI_C_COMPILER-NOTFOUND -DMPI_C_HEADER_DIR="$GT_DEPS/openmpi/include"
                 -DMPI_C_LIB_NAMES=mpi -DMPI_mpi_LIBRARY="$lib")
    GT_MPI_NOTE="no mpi.h here: the Open MPI $(cat "$GT_DEPS/openmpi/VERSION" 2> /dev/null) C headers of .deps/openmpi against $lib (${version:-ompi_info not found}; a fallback: another major version may not match)"
    return 0
  fi
  GT_MPI_NOTE="no mpi.h (Open MPI development files) on this machine${lib:+ ($lib is here, but no .deps/openmpi)}: the full tree (libmgs, gpu/runtime, the Python tests) cannot be configured"
  return 1
}

# Arguments for the full tree's dependencies from .deps.
gt_deps_args() {
  GT_DEPS_ARGS=()
  if [ -d "$GT_DEPS/lib/cmake" ]; then
    GT_DEPS_ARGS=(-DCMAKE_PREFIX_PATH="$GT_DEPS" -DMGS_HEADER_ONLY_LOGGING=ON)
    local p
    for p in Catch2 CLI11 nlohmann_json spdlog fmt; do
      [ -d "$GT_DEPS/lib/cmake/$p" ] && GT_DEPS_ARGS+=(-D"${p}_DIR=$GT_DEPS/lib/cmake/$p")
    done
  fi
}

# What the full tree's configure found for each dependency (the config file
# folders and MPI's header and library), from its cache.
gt_report_found() {
  local dir=$1
  grep -E '^(Catch2|CLI11|nlohmann_json|spdlog|fmt)_DIR:|^MPI_C_HEADER_DIR:|^MPI_mpi_LIBRARY:|^MGS_HEADER_ONLY_LOGGING:' \
    "$dir/CMakeCache.txt" 2> /dev/null | sed 's/^/  found: /'
}

gt_configure() {
  local tree=$1 dir nccl
  dir=$(gt_dir "$tree") || return 2
  if [ "${GPU_REUSE_BUILD:-0}" = 1 ] && [ -f "$dir/CMakeCache.txt" ]; then
    echo "gpu_tree: GPU_REUSE_BUILD=1 and $dir is configured: not configuring it again"
    if [ "$tree" = full ]; then
      gt_mpi
      gt_report_found "$dir"
    fi
    return 0
  fi
  nccl=$(gt_nccl_root)
  echo "gpu_tree: configure $tree in $dir (sm_$GT_ARCH; NCCL ${nccl:-from the CUDA toolkit or none}; python $GT_PY)"
  local args=(-S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$GT_ARCH"
              -DCMAKE_CUDA_FLAGS=-lineinfo ${nccl:+-DMGS_NCCL_ROOT=$nccl})
  if [ "$tree" = gpu-only ]; then
    # The tests use tests/gpu/mini_catch: a GPU image may hold Catch2 v3.
    args+=(-DMGS_GPU_ONLY=ON -DCMAKE_DISABLE_FIND_PACKAGE_Catch2=ON)
  else
    if ! gt_mpi; then
      echo "gpu_tree: $GT_MPI_NOTE"
      return 3
    fi
    echo "gpu_tree: $GT_MPI_NOTE"
    gt_deps_args
    if [ ${#GT_DEPS_ARGS[@]} = 0 ]; then
      echo "gpu_tree: no $GT_DEPS (scripts/gpu_deps.sh makes it): Catch2, CLI11, nlohmann-json and spdlog from this machine"
    else
      echo "gpu_tree: dependencies from $GT_DEPS ($(cat "$GT_DEPS/MANIFEST.txt" 2> /dev/null | tr '\n' ' '))"
    fi
    args+=(-DMGS_PYTHON="$GT_PY" "${GT_MPI_ARGS[@]}" "${GT_DEPS_ARGS[@]}")
  fi
  gt_run cmake "${args[@]}"
  local rc=$?
  [ "$tree" = full ] && gt_report_found "$dir"
  [ $rc = 0 ] || echo "gpu_tree: configure of $tree FAILED (exit $rc)"
  return $rc
}

# The file a target makes, if any: an executable or a library.
gt_target_file() {
  find "$1" \( -name "$2" -o -name "lib$2.so" -o -name "lib$2.a" \) \( -type f -o -type l \) 2> /dev/null | head -1
}

# A build step's cap: CAP, or 30 s where GPU_REUSE_BUILD=1 and every target
# is built already (gt_build will then do nothing).
gt_build_cap() {
  local tree=$1 cap=$2 dir t
  shift 2
  dir=$(gt_dir "$tree") || return 2
  if [ "${GPU_REUSE_BUILD:-0}" = 1 ] && [ $# -gt 0 ]; then
    for t in "$@"; do [ -n "$(gt_target_file "$dir" "$t")" ] || { echo "$cap"; return 0; }; done
    echo 30
    return 0
  fi
  echo "$cap"
}

gt_build() {
  local tree=$1 dir
  dir=$(gt_dir "$tree") || return 2
  shift
  if [ "${GPU_REUSE_BUILD:-0}" = 1 ] && [ $# -gt 0 ]; then
    local t missing=()
    for t in "$@"; do [ -n "$(gt_target_file "$dir" "$t")" ] || missing+=("$t"); done
    if [ ${#missing[@]} = 0 ]; then
      echo "gpu_tree: GPU_REUSE_BUILD=1 and every target of $tree is built ($*): not rebuilding"
      return 0
    fi
    echo "gpu_tree: GPU_REUSE_BUILD=1 but not built yet: ${missing[*]}"
  fi
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    echo "gpu_tree: $dir is not configured (gt_configure $tree first)"
    return 2
  fi
  echo "gpu_tree: build $tree (-j$GT_JOBS): ${*:-all}"
  if [ $# -gt 0 ]; then
    gt_run cmake --build "$dir" -j "$GT_JOBS" --target "$@"
  else
    gt_run cmake --build "$dir" -j "$GT_JOBS"
  fi
  local rc=$?
  [ $rc = 0 ] || echo "gpu_tree: build of $tree FAILED (exit $rc)"
  return $rc
}

# torch, pytest and scikit-learn in $GT_PY: the full tree registers the Python
# tests only when all three import (tests/python/CMakeLists.txt).
gt_python_probe() {
  "$GT_PY" - << 'EOF' 2>&1
import importlib
for m in ("torch", "pytest", "sklearn"):
    try:
        mod = importlib.import_module(m)
        extra = ""
        if m == "torch":
            extra = f" cuda {mod.version.cuda} available {mod.cuda.is_available()}"
        print(f"python: {m} {getattr(mod, '__version__', '?')}{extra}")
    except Exception as e:  # noqa: BLE001
        print(f"python: {m} MISSING ({type(e).__name__}: {e})")
EOF
}
