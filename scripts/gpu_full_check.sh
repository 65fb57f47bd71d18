#!/usr/bin/env bash
# The full build with CUDA on a GPU machine that has Open MPI, spdlog and CLI11
# (Catch2 v2 is taken from .deps/catch2 when present: a GPU image may lack it),
# then the end-to-end CUDA tests through mgs.torch under mpirun:
#   gpu/runtime                 the runtime with CUDA tensors, P = 2..4 ranks as
#                               threads on the GPU, bitwise the CPU tensors' run
#   python.np2                  the pytest suite at np 2, its CUDA tests with
#                               both ranks on the one GPU (MPI, host-staged)
#   python.cuda_sparse.mpi.np2  sparsified CUDA gradients against a CPU twin,
#                               compact blocks over MPI
#   python.cuda_sparse.nccl.np1 the same with MGS_BACKEND=nccl (device buckets)
#   python.backend_nccl.np1/np2 NCCL collectives at np 1; at np 2 on one GPU the
#                               agreed set-up failure
# Usage: scripts/gpu_full_check.sh [ctest -R regex]
# Environment: MGS_CUDA_ARCH (90), MGS_GPU_FULL_BUILD (build-gpu-full),
# MGS_GPU_OUT (logs; $OUT when set), PYTHON (python3 with torch, pytest, sklearn).
set -u
cd "$(dirname "$0")/.."
BUILD=${MGS_GPU_FULL_BUILD:-build-gpu-full}
OUTDIR=${MGS_GPU_OUT:-${OUT:-$BUILD/gpu_full_check}}
PY=${PYTHON:-$(command -v python3)}
REGEX=${1:-"^(gpu/runtime|python\\.(np2|cuda_sparse\\..*|backend_nccl\\..*))$"}
mkdir -p "$OUTDIR"
# This script's own settings must not reach the ranks: mgs refuses an MGS_*
# variable it does not know.
for v in $(compgen -e | grep '^MGS_GPU_'); do unset "$v"; done
export PATH=/usr/local/cuda/bin:$PATH
T0=$(date +%s)
say() { echo "[gpu_full_check $(( $(date +%s) - T0 ))s] $*"; }

extra=()
[ -f .deps/catch2/lib/cmake/Catch2/Catch2Config.cmake ] && extra+=("-DCatch2_DIR=$PWD/.deps/catch2/lib/cmake/Catch2")
NCCL_ROOT=""
[ -e /usr/local/cuda/include/nccl.h ] || NCCL_ROOT=$($PY scripts/find_nccl_root.py 2>/dev/null)
say "configure (full build, sm_${MGS_CUDA_ARCH:-90}, python $PY)"
if ! cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${MGS_CUDA_ARCH:-90}" \
      -DMGS_PYTHON="$PY" ${NCCL_ROOT:+-DMGS_NCCL_ROOT=$NCCL_ROOT} "${extra[@]}" > "$OUTDIR/full_configure.log" 2>&1; then
  tail -30 "$OUTDIR/full_configure.log"; say "FAILED: configure"; exit 1
fi
grep "mgs:" "$OUTDIR/full_configure.log"
say "build libmgs (-j$(nproc))"
if ! cmake --build "$BUILD" -j"$(nproc)" --target mgs mgs_gpu_runtime_test mgs_crash_report > "$OUTDIR/full_build.log" 2>&1; then
  grep -E "error|Error" "$OUTDIR/full_build.log" | head -40; say "FAILED: build"; exit 1
fi
say "tests: $REGEX"
ctest --test-dir "$BUILD" -R "$REGEX" --output-on-failure --timeout 180 > "$OUTDIR/full_ctest.log" 2>&1
rc=$?
grep -E "Test +#|tests passed|rank [0-9].*(loss|ok|init)|FAILED|Error|error" "$OUTDIR/full_ctest.log" | head -60
# python.np2 crashed on the first H100 machine (a segmentation fault in a
# coordinator thread during test_allreduce_in_place[float16], CPU tensors) and
# not here. If it fails again, rerun the suite with Open MPI's ob1 transport
# and with UCX's memory-type cache off, to tell the transport from mgs.
if grep -qE "python\.np2 .*Failed" "$OUTDIR/full_ctest.log"; then
  lib=$(find "$BUILD" -name libmgs.so | head -1)
  say "python.np2 failed; ompi pml: $(ompi_info 2>/dev/null | grep -E 'MCA pml' | awk '{print $3}' | tr '\n' ' ')"
  # First the native stack of the crashing thread (faulthandler shows Python
  # threads only): the crash reporter preloaded, its lines resolved. pytest
  # must leave fd 2 alone (--capture=sys: its fd capture dies with the
  # process) and keep its faulthandler off, so the reporter answers first
  # and sees the real faulting address.
  reporter=$(find "$BUILD" -name libmgs_crash_report.so | head -1)
  if [ -n "$reporter" ]; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MGS_LIBRARY="$lib" PYTHONPATH=bindings/python \
      timeout 120 mpirun --oversubscribe --bind-to none -np 2 -x LD_PRELOAD="$reporter" "$PY" \
      tests/python/run_pytest.py -q --capture=sys -p no:faulthandler > "$OUTDIR/np2_crash_report.log" 2>&1
    say "python.np2 with the crash reporter: exit $?"
    scripts/resolve_backtrace.sh "$OUTDIR/np2_crash_report.log" | grep -A40 "crash_report pid" | head -120
  fi
  for variant in "OMPI_MCA_pml=ob1" "UCX_MEMTYPE_CACHE=n" "OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader"; do
    env $variant OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MGS_LIBRARY="$lib" PYTHONPATH=bindings/python \
      PYTHONFAULTHANDLER=1 timeout 120 mpirun --oversubscribe --bind-to none -np 2 "$PY" tests/python/run_pytest.py -q \
      > "$OUTDIR/np2_${variant%% *}.log" 2>&1
    say "python.np2 with $variant: exit $?"
  done
fi
# Skips count as failures here: this script is for machines with a GPU.
ok=0
[ $rc = 0 ] && ! grep -q "Skipped\|Not Run" "$OUTDIR/full_ctest.log" && ok=1
say "summary: end-to-end CUDA tests $([ $ok = 1 ] && echo PASSED || echo 'FAILED or SKIPPED'); $(( $(date +%s) - T0 )) s"
[ $ok = 1 ]
