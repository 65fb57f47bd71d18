#!/usr/bin/env bash
# The full build with CUDA and the end-to-end CUDA tests on a GPU machine,
# as steps (scripts/lib/gpu_steps.sh: one line per step, a cap each, a
# deadline, logs straight under $OUT). Needs Open MPI's mpi.h (without it the
# configure step FAILS, naming the cause, and the rest is SKIPPED) and takes
# Catch2 v2, CLI11, nlohmann-json, spdlog and fmt from .deps when it is there
# (scripts/gpu_deps.sh; carry [".deps"]). Steps:
#   configure.full            build-gpu-full, sm_90; which python has torch,
#                             pytest and scikit-learn
#   build.full                mgs (libmgs), mgs_gpu_runtime_test, mgs_crash_report
#   registered.full           every test below is registered in ctest (the
#                             Python tests are only where MGS_PYTHON imports
#                             torch, pytest and sklearn): else FAIL
#   gpu/runtime               the runtime with CUDA tensors, P = 2..4 threads
#   pytest.test_cuda.np2      test_cuda.py alone at np 2 (both ranks on the GPU)
#   python.cuda_sparse.mpi.np2, python.cuda_sparse.nccl.np1,
#   python.backend_nccl.np1, python.backend_nccl.np2,
#   python.cuda_sparse.mpi.np3, python.cuda_sparse.mpi.np4
#   python.np2                the whole pytest suite at np 2 (full_np2_steps)
#   crash.*                   only when python.np2 failed: the failing test
#                             file again with the crash reporter preloaded,
#                             then with Open MPI's ob1, UCX's memory-type cache
#                             off, ob1 with self,vader; 60 s each
#   scripts/gpu_full_check.sh          # GPU_DEADLINE default 420 s
# Logs: $OUT (default build-gpu/full). Settings: GPU_DEADLINE, PYTHON,
# GPU_CUDA_ARCH, GPU_FULL_BUILD_DIR, GPU_DEPS, GPU_MPI (scripts/lib/gpu_tree.sh).
# Sourced by gpu_session.sh for full_steps and full_np2_steps.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
. scripts/lib/gpu_steps.sh
. scripts/lib/gpu_tree.sh

FULL_TARGETS=(mgs mgs_gpu_runtime_test mgs_crash_report)
FULL_TESTS=(gpu/runtime python.np2 python.cuda_sparse.mpi.np2 python.cuda_sparse.mpi.np3 python.cuda_sparse.mpi.np4
            python.cuda_sparse.nccl.np1 python.backend_nccl.np1 python.backend_nccl.np2)

full_configure() {
  gt_python_probe
  gt_configure full
  local rc=$?
  [ $rc = 3 ] && gs_reason "$GT_MPI_NOTE"
  [ $rc = 0 ] && gs_reason "$GT_MPI_NOTE"
  return $rc
}

full_build() { gt_build full "${FULL_TARGETS[@]}"; }

full_registered() {
  gs_registered "$GT_FULL_BUILD" "${FULL_TESTS[@]}" && return 0
  local missing
  missing=$(cat "$GS_REASON_FILE")
  if grep -q "lacks torch, pytest or scikit-learn" "$GT_FULL_BUILD/CMakeCache.txt" "$OUT"/*configure.full.log 2> /dev/null; then
    gs_reason "$missing; $("$GT_PY" -c 'import torch, pytest, sklearn' 2>&1 | tail -1) ($GT_PY)"
  fi
  return 1
}

full_ctest() { gs_ctest "$GT_FULL_BUILD" "$2" "$1"; }

# The environment of tests/python/CMakeLists.txt's mpirun jobs.
full_mpirun() {
  local np=$1 lib
  shift
  lib=$(gt_target_file "$GT_FULL_BUILD" mgs)
  [ -n "$lib" ] || { gs_reason "no libmgs.so in $GT_FULL_BUILD"; return 1; }
  echo "+ mpirun -np $np $*"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    MGS_LIBRARY="$lib" PYTHONPATH="$PWD/bindings/python" PYTHONDONTWRITEBYTECODE=1 \
    mpirun --oversubscribe --bind-to none -np "$np" "$@"
}

# pytest's last summary line in this step's log must say passed, with
# nothing skipped, failed or in error.
full_pytest_verdict() {
  local rc=$1 last
  last=$(grep -E '^=*.*[0-9]+ (passed|failed|skipped|error|errors|deselected)' "$GS_LOG" | tail -1 | tr -d '=')
  if [ "$rc" = 0 ] && grep -qE '[0-9]+ passed' <<< "$last" && ! grep -qE 'skipped|failed|error' <<< "$last"; then
    gs_reason "$last"
    return 0
  fi
  gs_reason "exit $rc; ${last:-no pytest summary}"
  return 1
}

# test_cuda.py alone (pytest -k on the module name), at np NP.
full_pytest_file() {
  local np=$1 module=$2
  full_mpirun "$np" "$GT_PY" tests/python/run_pytest.py -q -rs -k "$module"
  full_pytest_verdict $?
}

full_steps() {
  # Said before anything runs: without mpi.h nothing of the full tree can.
  gt_mpi > /dev/null 2>&1 || echo "NOTE: $GT_MPI_NOTE"
  gs_step configure.full 90 full_configure
  gs_step -a configure.full build.full 300 full_build
  gs_step -a build.full registered.full 30 full_registered
  local b=build.full
  gs_step -a $b gpu/runtime 90 full_ctest gpu/runtime 80
  gs_step -n mpirun -a $b pytest.test_cuda.np2 90 full_pytest_file 2 test_cuda
  local t
  for t in python.cuda_sparse.mpi.np2 python.cuda_sparse.nccl.np1 python.backend_nccl.np1 python.backend_nccl.np2; do
    gs_step -n mpirun -a $b "$t" 90 full_ctest "$t" 80
  done
  for t in python.cuda_sparse.mpi.np3 python.cuda_sparse.mpi.np4; do
    gs_step -n mpirun -a $b "$t" 120 full_ctest "$t" 110
  done
}

# The test file python.np2 failed in: from pytest's FAILED lines, else from
# the first test file in a faulthandler stack (a crash); empty when neither.
full_failing_file() {
  local log=$1 f
  f=$(grep -oE 'FAILED [^ ]*test_[A-Za-z0-9_]+\.py' "$log" | head -1 | grep -oE 'test_[A-Za-z0-9_]+\.py')
  [ -n "$f" ] || f=$(grep -E '^ *File ".*tests/python/test_[A-Za-z0-9_]+\.py"' "$log" | head -1 |
                     grep -oE 'test_[A-Za-z0-9_]+\.py')
  printf '%s' "${f%.py}"
}

# The crash reporter preloaded (the crashing thread's native stack, resolved):
# pytest leaves fd 2 alone (--capture=sys) and its faulthandler off, so the
# reporter answers first and sees the faulting address.
full_crash_reporter() {
  local k=$1 reporter
  reporter=$(gt_target_file "$GT_FULL_BUILD" mgs_crash_report)
  [ -n "$reporter" ] || { gs_reason "libmgs_crash_report.so not built"; return 1; }
  full_mpirun 2 -x LD_PRELOAD="$reporter" "$GT_PY" tests/python/run_pytest.py -q --capture=sys \
    -p no:faulthandler ${k:+-k "$k"} > "$OUT/np2_crash_report.log" 2>&1
  local rc=$?
  scripts/resolve_backtrace.sh "$OUT/np2_crash_report.log" | grep -A40 "crash_report pid" | head -120
  tail -20 "$OUT/np2_crash_report.log"
  gs_reason "exit $rc; the resolved stack is in this step's log"
  return $rc
}

# The failing file again with other transports: VAR=VALUE... for mpirun and
# its ranks (this step's subshell only).
full_crash_variant() {
  local k=$1 v
  shift
  for v in "$@" PYTHONFAULTHANDLER=1; do export "${v?}"; done
  echo "with $*"
  full_mpirun 2 "$GT_PY" tests/python/run_pytest.py -q ${k:+-k "$k"}
  full_pytest_verdict $?
}

# python.np2, then, only when it failed, the crash reruns of the failing file.
full_np2_steps() {
  gs_step -n mpirun -a build.full python.np2 200 full_ctest python.np2 190
  case ${GS_STATUS[python.np2]} in FAIL | TIMEOUT) ;; *) return 0 ;; esac
  local log k
  log=$(ls "$OUT"/[0-9][0-9]_python.np2.log 2> /dev/null | tail -1)
  k=$(full_failing_file "$log")
  echo "python.np2 failed; ompi pml: $(ompi_info 2> /dev/null | grep -E 'MCA pml' | awk '{print $3}' | tr '\n' ' ');" \
       "reruns on ${k:-the whole suite (no failing file identified)}"
  gs_step crash.reporter 60 full_crash_reporter "$k"
  gs_step crash.ob1 60 full_crash_variant "$k" OMPI_MCA_pml=ob1
  gs_step crash.ucx_memtype_cache_off 60 full_crash_variant "$k" UCX_MEMTYPE_CACHE=n
  gs_step crash.ob1_vader 60 full_crash_variant "$k" OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  gs_init full 420
  gt_init
  full_steps
  full_np2_steps
  gs_finish
  exit $?
fi
