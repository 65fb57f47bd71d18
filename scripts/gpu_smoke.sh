#!/usr/bin/env bash
# The GPU checks that come first on a GPU lease, in about 4 minutes on one
# H100/H200 (nvcc, CMake; PyTorch for the torch.topk row): the parts that have
# never run on a GPU, then two that have. Steps, in this order:
#   probe               nvidia-smi lists a GPU, nvcc is there (else FAIL, and
#                       nothing else runs); versions of the tools, torch, MPI
#   configure.gpu-only  build-gpu with -DMGS_GPU_ONLY=ON, sm_90 (GPU_CUDA_ARCH)
#   build.gpu-only      only mgs_gpu_compress_test, mgs_gpu_local_stage_test,
#                       mgs_gpu_device_threads_test, mgs_gpu_multirank_test,
#                       mgs_gpu_device_bucket_test, mgs-bench-compress-gpu
#   gpu.launch_shapes   "gpu launch shapes select the same bits" (gpu/compress)
#   gpu/local_stage     the CUDA local stage, timeSelection included
#   gpu/device_threads  device buckets at P = 2..4 ranks as threads on the GPU
#                       over the device thread communicator, and its abort
#   gpu/multirank       P = 2..4 thread ranks: the host-staged allgather and
#                       the agreed exchange's device parts
#   memcheck.small      compute-sanitizer memcheck on small cases: the
#                       selector's non-finite and enqueue/graph cases
#                       (n 10^4 and 2^20, default launch shapes) and all of
#                       gpu/local_stage
#   racecheck.small     compute-sanitizer racecheck on the enqueue/graph
#                       case and the local stage's scatter
#   bench.row           mgs-bench-compress-gpu, gaussiank, n 25.6M, density
#                       0.001, 5 reps: one row per launch shape, and
#                       torch.topk on the same device (bench_*.jsonl, bench_summary.txt)
#   gpu/device_bucket   device buckets over NCCL at np 1
# Each step has its own cap and the run a deadline (GPU_DEADLINE, default
# 240 s from the start); a step whose cap no longer fits is SKIPPED. One line
# per step as it ends (PASS / FAIL / TIMEOUT / SKIPPED, seconds, reason), a
# summary and a verdict last: PASS only when every step passed (exit 0), FAIL
# (exit 1) when one failed or timed out, INCOMPLETE (exit 2) when some were
# skipped. A missing compute-sanitizer is a FAIL.
#   scripts/gpu_smoke.sh                 # on the GPU machine, repository root
# Logs go straight to $OUT (default build-gpu/smoke) as they are written:
# steps.txt, verdict.txt, NN_<step>.log, bench_*.jsonl. Settings:
# GPU_DEADLINE, GPU_CUDA_ARCH (or MGS_CUDA_ARCH), PYTHON, GPU_BUILD_DIR,
# GPU_JOBS, GPU_REUSE_BUILD (scripts/lib/gpu_tree.sh). Sourced by
# gpu_session.sh for smoke_steps and the step functions.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
. scripts/lib/gpu_steps.sh
. scripts/lib/gpu_tree.sh

SMOKE_TARGETS=(mgs_gpu_compress_test mgs_gpu_local_stage_test mgs_gpu_device_threads_test mgs_gpu_multirank_test
               mgs_gpu_device_bucket_test mgs-bench-compress-gpu)

# --- step functions (their output goes to the step's log) -------------------

smoke_probe() {
  local gpus="" rc=1 have=() lack=() t
  for t in nvidia-smi nvcc cmake compute-sanitizer ncu mpirun; do
    if gs_have "$t"; then have+=("$t"); else lack+=("$t"); fi
  done
  echo "tools: have ${have[*]:-none}; lack ${lack[*]:-none}"
  gs_have nvcc && nvcc --version | tail -2
  cmake --version | head -1
  gs_have compute-sanitizer && compute-sanitizer --version | tail -1
  gs_have ncu && ncu --version | tail -1
  gt_python_probe
  gt_mpi > /dev/null 2>&1
  echo "mpi: $GT_MPI_NOTE"
  if [ -f "$GT_DEPS/MANIFEST.txt" ]; then
    echo ".deps: $(tr '\n' ' ' < "$GT_DEPS/MANIFEST.txt")"
  else
    echo ".deps: none (scripts/gpu_deps.sh makes it; carry it)"
  fi
  if ! gs_have nvidia-smi; then
    gs_reason "no GPU: nvidia-smi not found"
    return 1
  fi
  gpus=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1)
  rc=$?
  echo "nvidia-smi: $gpus"
  if [ $rc != 0 ] || [ -z "$gpus" ] || ! nvidia-smi -L 2>&1 | grep -q '^GPU [0-9]'; then
    gs_reason "no GPU: nvidia-smi lists none ($(printf '%s' "$gpus" | head -1 | cut -c1-120))"
    return 1
  fi
  nvidia-smi -L
  if ! gs_have nvcc; then
    gs_reason "nvcc not found (/usr/local/cuda/bin)"
    return 1
  fi
  local cc arch note=""
  cc=$(printf '%s\n' "$gpus" | head -1 | awk -F', ' '{print $4}')
  arch=${cc/./}
  [ -n "$arch" ] && [ "$arch" != "$GT_ARCH" ] && note="; the GPU is sm_$arch, the build is for sm_$GT_ARCH (GPU_CUDA_ARCH)"
  gs_reason "$(printf '%s\n' "$gpus" | head -1)$note; lacks: ${lack[*]:-nothing}"
}

smoke_configure() { gt_configure gpu-only; }

smoke_build() {
  local targets=("${SMOKE_TARGETS[@]}")
  # Without NCCL the device bucket test is not a target (its step says so).
  if ! gs_ctest_names "$GT_GPU_BUILD" | grep -qxF gpu/device_bucket; then
    echo "gpu/device_bucket is not registered (no NCCL at configure): not building it"
    targets=(mgs_gpu_compress_test mgs_gpu_local_stage_test mgs_gpu_device_threads_test mgs_gpu_multirank_test
             mgs-bench-compress-gpu)
  fi
  gt_build gpu-only "${targets[@]}"
}

smoke_exe() {
  local f
  f=$(gt_target_file "$GT_GPU_BUILD" "$1")
  [ -n "$f" ] || { gs_reason "$1 not built in $GT_GPU_BUILD"; return 1; }
  echo "$f"
}

# "gpu launch shapes select the same bits" alone (mini_catch takes a
# substring of the case names): exit 0 and exactly that one case run.
smoke_launch_shapes() {
  local exe rc
  exe=$(smoke_exe mgs_gpu_compress_test) || return 1
  echo "+ $exe 'gpu launch shapes select the same bits'"
  "$exe" "gpu launch shapes select the same bits"
  rc=$?
  [ $rc = 77 ] && { gs_reason "exit 77: no CUDA device visible"; return 1; }
  [ $rc = 0 ] || { gs_reason "exit $rc"; return 1; }
  if ! grep -qE '^1 test cases, 0 failed' "$GS_LOG"; then
    gs_reason "not one passing case: $(tail -1 "$GS_LOG")"
    return 1
  fi
}

# compute-sanitizer TOOL over (target, filter) pairs; every run must exit 0
# with no report. GPU_TEST_UNDER_SANITIZER=1 loosens the timing bounds of
# the tests (their kernels run many times slower there).
smoke_sanitize() {
  local tool=$1
  shift
  export GPU_TEST_UNDER_SANITIZER=1
  local summary="" failed=0 exe rc n=0
  while [ $# -ge 2 ]; do
    local target=$1 filter=$2
    shift 2
    n=$((n + 1))
    exe=$(smoke_exe "$target") || return 1
    local log=$OUT/${tool}_${n}_${target}.log
    echo "+ compute-sanitizer --tool $tool $exe '$filter'  (log ${log##*/})"
    compute-sanitizer --tool "$tool" --error-exitcode 3 --print-limit 20 "$exe" "$filter" > "$log" 2>&1
    rc=$?
    local last cases
    last=$(grep -E "(ERROR|RACECHECK) SUMMARY" "$log" | tail -1 | sed -E 's/^=* *//; s/(ERROR|RACECHECK) SUMMARY: //; s/ displayed//')
    cases=$(grep -E '^[0-9]+ test cases, [0-9]+ failed' "$log" | tail -1 | cut -d';' -f1)
    tail -5 "$log"
    summary+="${summary:+; }${target#mgs_gpu_}${filter:+ '${filter:0:20}'}: exit $rc, ${last:-no summary}, ${cases:-no case ran}"
    # A pass: exit 0, the sanitizer's summary with nothing found, and at
    # least one test case run (mini_catch's last line).
    if [ $rc != 0 ] || ! grep -qE "SUMMARY: 0 (errors|hazards)" "$log" ||
       ! grep -qE '^[1-9][0-9]* test cases, 0 failed' "$log"; then
      failed=1
    fi
  done
  gs_reason "$summary"
  return $failed
}

smoke_memcheck() {
  smoke_sanitize memcheck mgs_gpu_compress_test "gpu non-finite input follows the policy" \
                          mgs_gpu_compress_test "gpu enqueue makes no host synchronisation" \
                          mgs_gpu_local_stage_test ""
}

smoke_racecheck() {
  smoke_sanitize racecheck mgs_gpu_compress_test "gpu enqueue makes no host synchronisation" \
                           mgs_gpu_local_stage_test "the scatter of P received blocks"
}

# One row per launch shape (the benchmark times both in one run and checks
# they select the same entries) and torch.topk for the same n and k.
smoke_bench() {
  local exe py=$GT_PY
  exe=$(smoke_exe mgs-bench-compress-gpu) || return 1
  local args=(--n 25600000 --density 0.001 --dist t3 --reps 5)
  echo "+ $exe ${args[*]} --selector gaussiank"
  "$exe" "${args[@]}" --selector gaussiank > "$OUT/bench_mgs.jsonl" 2> "$OUT/bench_mgs.err"
  local rc=$?
  cat "$OUT/bench_mgs.jsonl" "$OUT/bench_mgs.err"
  [ $rc = 0 ] || { gs_reason "mgs-bench-compress-gpu exit $rc: $(tail -1 "$OUT/bench_mgs.err")"; return 1; }
  echo "+ $py bench/compress/torch_topk.py ${args[*]}"
  "$py" bench/compress/torch_topk.py "${args[@]}" > "$OUT/bench_torch.jsonl" 2> "$OUT/bench_torch.err"
  local trc=$?
  cat "$OUT/bench_torch.jsonl"
  tail -3 "$OUT/bench_torch.err"
  "$py" bench/compress/gpu_summary.py "$OUT/bench_mgs.jsonl" "$OUT/bench_torch.jsonl" > "$OUT/bench_summary.txt" 2>&1
  cat "$OUT/bench_summary.txt"
  local line
  line=$("$py" - "$OUT/bench_mgs.jsonl" "$OUT/bench_torch.jsonl" << 'EOF'
import json, sys
rows = [json.loads(l) for p in sys.argv[1:] for l in open(p) if l.startswith("{")]
ms = {r.get("launches", r.get("selector")): r["median_ms"] for r in rows}
t = [r["median_ms"] for r in rows if r.get("selector") == "torch.topk"]
print(f"gaussiank k={rows[0]['k']}: one-launch {ms.get('one-launch', float('nan')):.3f} ms, "
      f"per-pass {ms.get('per-pass', float('nan')):.3f} ms, "
      f"torch.topk {t[0]:.3f} ms" if t else "torch.topk: no row")
EOF
)
  local rows
  rows=$(grep -c '"launches"' "$OUT/bench_mgs.jsonl")
  if [ "$rows" -lt 2 ] || [ $trc != 0 ]; then
    gs_reason "${line:-no rows}; mgs rows with a launch shape: $rows (2 expected); torch_topk.py exit $trc"
    return 1
  fi
  gs_reason "$line"
}

smoke_ctest() {
  gs_registered "$GT_GPU_BUILD" "$1" || {
    gs_reason "$1 is not registered in $GT_GPU_BUILD (NCCL not found at configure?)"
    return 1
  }
  gs_ctest "$GT_GPU_BUILD" "$2" "$1"
}

# --- the steps -------------------------------------------------------------

smoke_steps() {
  gs_step probe 30 smoke_probe
  [ "${GS_STATUS[probe]}" = PASS ] || gs_stop "no usable GPU (probe ${GS_STATUS[probe]})"
  gs_step configure.gpu-only 60 smoke_configure
  gs_step -a configure.gpu-only build.gpu-only 170 smoke_build
  local b=build.gpu-only
  gs_step -a $b gpu.launch_shapes 45 smoke_launch_shapes
  gs_step -a $b gpu/local_stage 40 smoke_ctest gpu/local_stage 35
  gs_step -a $b gpu/device_threads 45 smoke_ctest gpu/device_threads 40
  gs_step -a $b gpu/multirank 60 smoke_ctest gpu/multirank 55
  gs_step -n compute-sanitizer -a $b memcheck.small 75 smoke_memcheck
  gs_step -n compute-sanitizer -a $b racecheck.small 75 smoke_racecheck
  gs_step -a $b bench.row 60 smoke_bench
  gs_step -a $b gpu/device_bucket 40 smoke_ctest gpu/device_bucket 35
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  gs_init smoke 240
  gt_init
  smoke_steps
  gs_finish
  exit $?
fi
