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
# What this machine has of the full build's dependencies (the GPU-only build
# needs none of them).
{ for h in mpi.h spdlog/spdlog.h CLI/CLI.hpp catch2/catch.hpp nlohmann/json.hpp; do
    if [ -e /usr/include/$h ] || [ -e /usr/include/x86_64-linux-gnu/openmpi/include/$h ] ||
       [ -e /usr/lib/x86_64-linux-gnu/openmpi/include/$h ]; then echo "  have $h"; else echo "  lack $h"; fi
  done; echo "  mpirun: $(command -v mpirun || echo none)"
  echo "  torch: $($PY -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>&1 | tail -1)"; } \
  | tee "$OUTDIR/probe.txt"

# NCCL: the toolkit's if it has one, else the PyTorch wheel's (nvidia-nccl-cu*).
NCCL_ROOT=""
if [ ! -e /usr/local/cuda/include/nccl.h ]; then
  NCCL_ROOT=$($PY scripts/find_nccl_root.py 2>/dev/null)
fi
[ -n "$NCCL_ROOT" ] && export LD_LIBRARY_PATH="$NCCL_ROOT/lib:${LD_LIBRARY_PATH:-}" && say "NCCL from $NCCL_ROOT"

say "configure (MGS_GPU_ONLY, sm_$ARCH)"
if ! cmake -S . -B "$BUILD" -DMGS_GPU_ONLY=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_DISABLE_FIND_PACKAGE_Catch2=ON \
      -DCMAKE_CUDA_ARCHITECTURES="$ARCH" ${NCCL_ROOT:+-DMGS_NCCL_ROOT=$NCCL_ROOT} \
      > "$OUTDIR/configure.log" 2>&1; then
  tail -30 "$OUTDIR/configure.log"; say "FAILED: configure"; exit 1
fi
grep "mgs:" "$OUTDIR/configure.log"
say "build (-j$JOBS)"
if ! cmake --build "$BUILD" -j"$JOBS" > "$OUTDIR/build.log" 2>&1; then
  grep -E "error|Error" "$OUTDIR/build.log" | head -40; say "FAILED: build"; exit 1
fi

say "tests without a GPU"
ctest --test-dir "$BUILD" --output-on-failure --timeout 120 -LE gpu 2>&1 | tee "$OUTDIR/ctest_cpu.log" | tail -5
# The tests that need the GPU, each under its own limit so that one that hangs
# cannot take the machine's whole lease (gpu/compress: selectors and
# decompression; gpu/bucket: the device-resident bucket's fuse, selection into
# the block, scatter and hostSyncs == 0; gpu/local_stage: the CUDA local stage
# against the host stage; gpu/multirank: P = 2..4 ranks as threads on the GPU;
# gpu/device_bucket: device buckets over NCCL at np 1, hostSyncs == 0 once
# warm and bitwise the host path; gpu/nccl: the NCCL communicator).
say "GPU tests (limit ${MGS_GPU_TEST_LIMIT:-150} s each)"
GPU_TESTS=${MGS_GPU_TESTS:-"gpu/compress gpu/bucket gpu/local_stage gpu/multirank gpu/device_bucket gpu/nccl"}
FAILED=0
: > "$OUTDIR/ctest.log"
for t in $GPU_TESTS; do
  timeout -k 5 "${MGS_GPU_TEST_LIMIT:-150}" ctest --test-dir "$BUILD" --output-on-failure -R "^$t\$" \
    > "$OUTDIR/test_${t#gpu/}.log" 2>&1
  rc=$?
  cat "$OUTDIR/test_${t#gpu/}.log" >> "$OUTDIR/ctest.log"
  if [ $rc = 124 ] || [ $rc = 137 ]; then say "$t: TIMED OUT"; FAILED=1
  elif ! grep -qE "Test +#[0-9]+: $t .*Passed" "$OUTDIR/test_${t#gpu/}.log"; then
    say "$t: FAILED or did not run"; grep -E "FAILED|with:|unexpected|error|Error" "$OUTDIR/test_${t#gpu/}.log" | head -25; FAILED=1
  else say "$t: passed ($(grep -oE "[0-9.]+ sec" "$OUTDIR/test_${t#gpu/}.log" | tail -1))"; fi
done
TESTS_OK=0
grep -q "100% tests passed" "$OUTDIR/ctest_cpu.log" && [ $FAILED = 0 ] && TESTS_OK=1

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

# compute-sanitizer memcheck over the smaller GPU tests (MGS_GPU_SANITIZE=1):
# out-of-bounds or misaligned accesses in kernels that pass their checks.
if [ "${MGS_GPU_SANITIZE:-0}" = 1 ] && command -v compute-sanitizer > /dev/null; then
  for b in mgs_gpu_bucket_test mgs_gpu_multirank_test mgs_gpu_local_stage_test; do
    exe=$(find "$BUILD" -name $b -type f | head -1)
    [ -n "$exe" ] || continue
    timeout -k 5 "${MGS_GPU_SANITIZE_LIMIT:-60}" compute-sanitizer --tool memcheck --error-exitcode 3 "$exe" \
      > "$OUTDIR/memcheck_$b.log" 2>&1
    rc=$?
    say "memcheck $b: exit $rc; $(grep -cE "^========= (Invalid|Program hit|Error)" "$OUTDIR/memcheck_$b.log") reports; $(tail -1 "$OUTDIR/memcheck_$b.log")"
    [ $rc = 0 ] || [ $rc = 124 ] || TESTS_OK=0
  done
  # The selector's launch shapes of 2026-11-27 (cooperative passes, the
  # counter-driven compaction) had never run when this was written.
  exe=$(find "$BUILD" -name mgs_gpu_compress_test -type f | head -1)
  if [ -n "$exe" ]; then
    timeout -k 5 "${MGS_GPU_SANITIZE_LIMIT:-60}" compute-sanitizer --tool memcheck --error-exitcode 3 "$exe" "gpu launch shapes select the same bits" \
      > "$OUTDIR/memcheck_launch_shapes.log" 2>&1
    rc=$?
    say "memcheck launch shapes: exit $rc; $(grep -cE "^========= (Invalid|Program hit|Error)" "$OUTDIR/memcheck_launch_shapes.log") reports; $(tail -1 "$OUTDIR/memcheck_launch_shapes.log")"
    [ $rc = 0 ] || [ $rc = 124 ] || TESTS_OK=0
  fi
fi

say "summary: tests $([ $TESTS_OK = 1 ] && echo PASSED || echo 'FAILED or SKIPPED'); logs in $OUTDIR; $(( $(date +%s) - T0 )) s in all"
[ $TESTS_OK = 1 ]
