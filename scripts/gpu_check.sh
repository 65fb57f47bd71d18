#!/usr/bin/env bash
# Every test of the GPU-only tree (-DMGS_GPU_ONLY=ON: no MPI, spdlog, CLI11
# or Catch2 needed) and the full selector benchmark, as steps
# (scripts/lib/gpu_steps.sh: a cap each, a deadline, one line per step, logs
# straight under $OUT). What gpu_smoke.sh runs first is not repeated here
# except inside gpu/compress. Steps:
#   probe, configure.gpu-only   as in gpu_smoke.sh
#   build.gpu-only.tests        every test binary of the tree and the benchmark
#   gpu/multirank               P = 2..4 ranks as threads on the GPU
#   gpu/device_threads          device buckets at P = 2..4 thread ranks
#   gpu/bucket                  the device-resident bucket
#   gpu/nccl                    the NCCL communicator at np 1
#   gpu/compress                selectors and decompression, 2^26 included
#   memcheck.launch_shapes      compute-sanitizer memcheck on "gpu launch
#                               shapes select the same bits" (n = 2^22 + 5)
#   memcheck.bucket_multirank   memcheck on gpu/bucket and gpu/multirank
#   bench.full                  mgs-bench-compress-gpu at n 25.6M, density 0.001
#                               and 0.01, with a residual and in place, 20 reps,
#                               torch.topk on the same device, gpu_summary.py
#   scripts/gpu_check.sh                 # GPU_DEADLINE default 540 s
#   GPU_SKIP_BENCH=1 scripts/gpu_check.sh
# Logs: $OUT (default build-gpu/check). Settings as gpu_smoke.sh's. Sourced by
# gpu_session.sh for check_thread_steps and check_more_steps.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
. scripts/gpu_smoke.sh

CHECK_TARGETS=(mgs_gpu_compress_test mgs_gpu_bucket_test mgs_gpu_local_stage_test mgs_gpu_multirank_test
               mgs_gpu_device_threads_test
               mgs_gpu_device_bucket_test mgs_gpu_nccl_test mgs-bench-compress-gpu)

check_build() {
  local targets=() t
  for t in "${CHECK_TARGETS[@]}"; do
    case $t in
      mgs_gpu_device_bucket_test | mgs_gpu_nccl_test)
        gs_ctest_names "$GT_GPU_BUILD" | grep -qxF gpu/nccl || { echo "no NCCL at configure: not building $t"; continue; } ;;
    esac
    targets+=("$t")
  done
  gt_build gpu-only "${targets[@]}"
}

check_memcheck_big() {
  smoke_sanitize memcheck mgs_gpu_compress_test "gpu launch shapes select the same bits"
}

check_memcheck_more() {
  smoke_sanitize memcheck mgs_gpu_bucket_test "" mgs_gpu_multirank_test ""
}

check_bench() {
  local exe py=$GT_PY
  exe=$(smoke_exe mgs-bench-compress-gpu) || return 1
  local args=(--n 25600000 --density 0.001 0.01 --dist t3 --reps 20)
  echo "+ $exe ${args[*]} [--inplace]"
  { "$exe" "${args[@]}" && "$exe" "${args[@]}" --inplace; } > "$OUT/bench_full_mgs.jsonl" 2> "$OUT/bench_full_mgs.err"
  local rc=$?
  echo "+ $py bench/compress/torch_topk.py ${args[*]}"
  "$py" bench/compress/torch_topk.py "${args[@]}" > "$OUT/bench_full_torch.jsonl" 2> "$OUT/bench_full_torch.err"
  local trc=$?
  "$py" bench/compress/gpu_summary.py "$OUT/bench_full_mgs.jsonl" "$OUT/bench_full_torch.jsonl" \
    > "$OUT/bench_full_summary.txt" 2>&1
  cat "$OUT/bench_full_summary.txt"
  if [ $rc != 0 ] || [ $trc != 0 ]; then
    gs_reason "mgs-bench-compress-gpu exit $rc ($(tail -1 "$OUT/bench_full_mgs.err")); torch_topk.py exit $trc"
    return 1
  fi
  gs_reason "$(grep -c '^{' "$OUT/bench_full_mgs.jsonl") mgs rows, $(grep -c '^{' "$OUT/bench_full_torch.jsonl") torch.topk rows; bench_full_summary.txt"
}

# The thread-rank tests: what runs of the multi-rank paths without MPI.
check_thread_steps() {
  gs_step -a configure.gpu-only build.gpu-only.tests "$(gt_build_cap gpu-only 200 "${CHECK_TARGETS[@]}")" check_build
  local b=build.gpu-only.tests
  # The smoke steps may have run these two already.
  [ -n "${GS_STATUS[gpu/multirank]:-}" ] || gs_step -a $b gpu/multirank 90 smoke_ctest gpu/multirank 80
  [ -n "${GS_STATUS[gpu/device_threads]:-}" ] || gs_step -a $b gpu/device_threads 60 smoke_ctest gpu/device_threads 50
  gs_step -a $b gpu/bucket 60 smoke_ctest gpu/bucket 50
  gs_step -a $b gpu/nccl 60 smoke_ctest gpu/nccl 50
}

check_more_steps() {
  local b=build.gpu-only.tests
  gs_step -a $b gpu/compress 150 smoke_ctest gpu/compress 140
  gs_step -n compute-sanitizer -a $b memcheck.launch_shapes 150 check_memcheck_big
  gs_step -n compute-sanitizer -a $b memcheck.bucket_multirank 120 check_memcheck_more
  if [ "${GPU_SKIP_BENCH:-0}" = 1 ]; then
    gs_mark bench.full SKIPPED "GPU_SKIP_BENCH=1"
  else
    gs_step -a $b bench.full 240 check_bench
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  gs_init check 540
  gt_init
  gs_step probe 30 smoke_probe
  [ "${GS_STATUS[probe]}" = PASS ] || gs_stop "no usable GPU (probe ${GS_STATUS[probe]})"
  gs_step configure.gpu-only 60 smoke_configure
  check_thread_steps
  check_more_steps
  gs_finish
  exit $?
fi
