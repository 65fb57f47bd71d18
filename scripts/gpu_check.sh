#!/usr/bin/env bash
# One command on a GPU machine: build the GPU parts for sm_90, run every GPU
# test and the GPU benchmark (with torch.topk on the same device in the same
# run), print a summary. Aimed at 10 minutes on one H100/H200 with nvcc 13,
# CMake and PyTorch (CUDA, NCCL from PyPI wheels); needs no Open MPI, spdlog,
# CLI11 or Catch2 and fetches nothing (CMake: -DMGS_GPU_ONLY=ON).
#   scripts/gpu_check.sh                 # everything
#   MGS_GPU_SKIP_BENCH=1 scripts/gpu_check.sh
# Environment: MGS_CUDA_ARCH (90), MGS_GPU_BUILD (build-gpu), PYTHON (python3),
# MGS_GPU_OUT (where logs go; $OUT when set, else $MGS_GPU_BUILD/gpu_check).
# Exit status: 0 when every test passed (skips count as failures here: this
# script is for machines with a GPU), 1 otherwise.
set -u
cd "$(dirname "$0")/.."
BUILD=${MGS_GPU_BUILD:-build-gpu}
ARCH=${MGS_CUDA_ARCH:-90}
PY=${PYTHON:-python3}
OUTDIR=${MGS_GPU_OUT:-${OUT:-$BUILD/gpu_check}}
mkdir -p "$OUTDIR"
export PATH=/usr/local/cuda/bin:$PATH
JOBS=$(nproc 2>/dev/null || echo 4)
T0=$(date +%s)
say() { echo "[gpu_check $(( $(date +%s) - T0 ))s] $*"; }

say "machine: $(hostname); $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
say "nvcc: $(nvcc --version 2>/dev/null | tail -1); cmake: $(cmake --version | head -1)"

# NCCL: the toolkit's if it has one, else the PyTorch wheel's (nvidia-nccl-cu*).
NCCL_ROOT=""
if [ ! -e /usr/local/cuda/include/nccl.h ]; then
  NCCL_ROOT=$($PY - <<'PYEOF' 2>/dev/null
import importlib.util
s = importlib.util.find_spec("nvidia.nccl")
print(list(s.submodule_search_locations)[0] if s else "")
PYEOF
)
fi
[ -n "$NCCL_ROOT" ] && export LD_LIBRARY_PATH="$NCCL_ROOT/lib:${LD_LIBRARY_PATH:-}" && say "NCCL from $NCCL_ROOT"

say "configure (MGS_GPU_ONLY, sm_$ARCH)"
if ! cmake -S . -B "$BUILD" -DMGS_GPU_ONLY=ON -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES="$ARCH" ${NCCL_ROOT:+-DMGS_NCCL_ROOT=$NCCL_ROOT} \
      > "$OUTDIR/configure.log" 2>&1; then
  tail -30 "$OUTDIR/configure.log"; say "FAILED: configure"; exit 1
fi
grep "mgs:" "$OUTDIR/configure.log"
say "build (-j$JOBS)"
if ! cmake --build "$BUILD" -j"$JOBS" > "$OUTDIR/build.log" 2>&1; then
  grep -E "error|Error" "$OUTDIR/build.log" | head -40; say "FAILED: build"; exit 1
fi

say "tests"
ctest --test-dir "$BUILD" --output-on-failure --timeout 600 2>&1 | tee "$OUTDIR/ctest.log" | tail -40
# The tests that need the GPU, one line each (gpu/compress: selectors and
# decompression; gpu/bucket: the device-resident bucket's fuse, selection into
# the block, scatter and hostSyncs == 0; gpu/local_stage: the CUDA local stage
# against the host stage; gpu/device_bucket: device buckets over NCCL at np 1,
# hostSyncs == 0 once warm and bitwise the host path; gpu/nccl: the NCCL
# communicator).
say "GPU tests:"; grep -E "Test +#[0-9]+: gpu/" "$OUTDIR/ctest.log" || say "no gpu/* test ran"
# Every GPU test must have run (a missing one means the build lacked CUDA or NCCL).
MISSING=0
for t in gpu/compress gpu/bucket gpu/local_stage gpu/device_bucket gpu/nccl; do
  grep -qE "Test +#[0-9]+: $t " "$OUTDIR/ctest.log" || { say "MISSING: $t did not run"; MISSING=1; }
done
TESTS_OK=0
grep -q "100% tests passed" "$OUTDIR/ctest.log" && ! grep -q "Not Run\|Skipped" "$OUTDIR/ctest.log" && [ $MISSING = 0 ] && TESTS_OK=1

if [ "${MGS_GPU_SKIP_BENCH:-0}" != 1 ]; then
  say "benchmark: mgs selectors, n = 25.6M f32, rho = 0.001 and 0.01, with residual and in place"
  BENCH="$BUILD/bench/compress/mgs-bench-compress-gpu"
  { timeout 240 "$BENCH" --n 25600000 --density 0.001 0.01 --dist t3 --reps 20
    timeout 120 "$BENCH" --n 25600000 --density 0.001 0.01 --dist t3 --reps 20 --inplace; } \
    > "$OUTDIR/bench_mgs.jsonl" 2> "$OUTDIR/bench_mgs.err" || say "benchmark exited with an error (see bench_mgs.err)"
  say "benchmark: torch.topk on the same device"
  timeout 180 "$PY" bench/compress/torch_topk.py --n 25600000 --density 0.001 0.01 --dist t3 --reps 20 \
    > "$OUTDIR/bench_torch.jsonl" 2> "$OUTDIR/bench_torch.err" || say "torch.topk baseline failed (see bench_torch.err)"
  "$PY" bench/compress/gpu_summary.py "$OUTDIR/bench_mgs.jsonl" "$OUTDIR/bench_torch.jsonl" | tee "$OUTDIR/summary.txt"
fi

say "summary: tests $([ $TESTS_OK = 1 ] && echo PASSED || echo 'FAILED or SKIPPED'); logs in $OUTDIR; $(( $(date +%s) - T0 )) s in all"
[ $TESTS_OK = 1 ]
