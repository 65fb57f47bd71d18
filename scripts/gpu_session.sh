#!/usr/bin/env bash
# What a GPU lease is for, as steps in the order of their value, within one
# device command (600 s at most): a deadline (GPU_DEADLINE, default 540 s
# from the start) skips every step whose cap no longer fits, and says so.
#   scripts/gpu_session.sh [all]   # everything below, in this order
#   scripts/gpu_session.sh part1   # 1 and 2
#   scripts/gpu_session.sh part2   # 3, 4 and 5, reusing part1's builds
# One command does not hold everything (about 450 s for 1 and 2 on an H100,
# estimated: these scripts have not run on a GPU yet): run part1, then part2
# as a second command on the same warm machine. part2 sets GPU_REUSE_BUILD=1:
# it builds nothing where part1's build-gpu and build-gpu-full hold the
# targets (build folders stay on a warm machine between commands), and
# builds them otherwise. Give part2 a GPU_DEADLINE that fits what is left
# of the lease.
#   1  smoke (scripts/gpu_smoke.sh's steps): the parts never run on a GPU
#      first: GPU-only build, launch shapes, gpu/local_stage, memcheck and
#      racecheck on small cases, one benchmark row per launch shape against
#      torch.topk, gpu/device_bucket
#   2  the full build and the end-to-end CUDA tests (scripts/gpu_full_check.sh's
#      steps): gpu/runtime, test_cuda.py at np 2, python.cuda_sparse.mpi.np2,
#      .nccl.np1, python.backend_nccl.np1/np2, python.cuda_sparse.mpi.np3/np4.
#      Without mpi.h: configure.full FAILS naming the cause, the MPI steps are
#      SKIPPED, and the GPU-only tree's thread-rank tests run instead
#      (gpu/multirank, gpu/bucket, gpu/nccl)
#   3  profile.ncu: Nsight Compute, per kernel, of the selector's two launch
#      shapes (profile.txt, ncu.csv)
#   4  train: bench/train/gpu_train.sh (gpu_train.jsonl, the table in its log;
#      its options in GPU_TRAIN_ARGS, e.g. "-n 1 -s 20"; cap GPU_TRAIN_CAP, 180 s)
#   5  the rest: python.np2 (the whole pytest suite; when it fails, the crash
#      reruns of the failing test file, 60 s each), the thread-rank tests,
#      gpu/compress, memcheck of the launch shapes at 2^22 and of gpu/bucket
#      and gpu/multirank, the full benchmark (scripts/gpu_check.sh's steps)
# Device call, from the repository root (carry [".deps"], made by
# scripts/gpu_deps.sh), with timeout_s 600:
#   bash scripts/gpu_session.sh part1
#   GPU_DEADLINE=200 bash scripts/gpu_session.sh part2
# Output: one line per step as it ends (PASS / FAIL / TIMEOUT / SKIPPED,
# seconds, reason), also appended to $OUT/steps.txt, then the last lines of
# each failed step's log, a summary and the verdict (verdict.txt): PASS only
# when every step passed (exit 0), FAIL when one failed or timed out (1),
# INCOMPLETE when some were skipped (2). A test that should be registered and
# is not (the Python tests, where pytest or scikit-learn is missing) or a
# missing tool (compute-sanitizer, ncu, mpirun) is a FAIL. Every log goes
# straight to $OUT (default build-gpu/session) while it is written, so a
# command killed at its limit still returns what it had.
set -u
cd "$(dirname "$0")/.." || exit 2
. scripts/gpu_smoke.sh
. scripts/gpu_full_check.sh
. scripts/gpu_check.sh

part=${1:-all}
case $part in
  all | part1 | part2) ;;
  *) sed -n '2,45p' "$0" >&2; exit 2 ;;
esac

session_profile() {
  local exe
  exe=$(smoke_exe mgs-bench-compress-gpu) || return 1
  echo "+ ncu --csv --metrics gpu__time_duration.sum $exe --n 25600000 --density 0.001 0.01 --selector gaussiank --reps 1"
  ncu --csv --metrics gpu__time_duration.sum "$exe" --n 25600000 --density 0.001 0.01 --dist t3 \
    --selector gaussiank --reps 1 > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
  local rc=$?
  tail -5 "$OUT/ncu.err"
  "$GT_PY" scripts/lib/ncu_summary.py "$OUT/ncu.csv" > "$OUT/profile.txt" 2>&1
  local prc=$?
  cat "$OUT/profile.txt"
  if [ $rc != 0 ] || [ $prc != 0 ]; then
    gs_reason "ncu exit $rc ($(grep -m1 -E 'ERR|rror' "$OUT/ncu.err" | cut -c1-160)); ncu_summary exit $prc"
    return 1
  fi
  gs_reason "$(grep -c '^select call' "$OUT/profile.txt") select calls in profile.txt"
}

session_train() {
  local build
  build=$(realpath --relative-to=. "$GT_FULL_BUILD")
  echo "+ bench/train/gpu_train.sh -b $build -o $OUT/gpu_train.jsonl ${GPU_TRAIN_ARGS:-}"
  # shellcheck disable=SC2086
  bash bench/train/gpu_train.sh -b "$build" -o "$OUT/gpu_train.jsonl" ${GPU_TRAIN_ARGS:-}
  local rc=$? failed
  # gpu_train.sh writes a row with "failed": true for a system that gave none.
  failed=$(grep '"failed": true' "$OUT/gpu_train.jsonl" 2> /dev/null | grep -o '"label": "[^"]*"' | cut -d'"' -f4 |
           tr '\n' ' ')
  if [ $rc != 0 ] || [ -n "$failed" ]; then
    gs_reason "exit $rc${failed:+; failed: $failed}"
    return 1
  fi
  gs_reason "$(grep -c '^{' "$OUT/gpu_train.jsonl") rows in gpu_train.jsonl"
}

# part2: the trees part1 built (GPU_REUSE_BUILD=1: a second of work each
# where they are there, under a 30 s cap). Where they are not (a fresh
# machine), the caps leave room for the GPU-only tree and, on 16 cores, the
# full tree's few targets.
session_builds() {
  gs_step probe 30 smoke_probe
  [ "${GS_STATUS[probe]}" = PASS ] || gs_stop "no usable GPU (probe ${GS_STATUS[probe]})"
  gs_step configure.gpu-only 30 smoke_configure
  gs_step -a configure.gpu-only build.gpu-only "$(gt_build_cap gpu-only 90 "${SMOKE_TARGETS[@]}")" smoke_build
  gt_mpi > /dev/null 2>&1 || echo "NOTE: $GT_MPI_NOTE"
  gs_step configure.full 30 full_configure
  gs_step -a configure.full build.full "$(gt_build_cap full 150 "${FULL_TARGETS[@]}")" full_build
}

session_later() {
  gs_step -n ncu -a build.gpu-only profile.ncu 90 session_profile
  gs_step -n mpirun -a build.full train "${GPU_TRAIN_CAP:-180}" session_train
  full_np2_steps
  [ -n "${GS_STATUS[gpu/bucket]:-}" ] || check_thread_steps
  check_more_steps
}

gs_init session 540
gt_init
echo "gpu_session $part: $(git log -1 --format='%h %s' 2> /dev/null | cut -c1-80)"
case $part in
  part1 | all)
    smoke_steps
    full_steps
    # Without the full tree, the multi-rank paths that need no MPI.
    [ "${GS_STATUS[configure.full]}" = PASS ] || check_thread_steps
    [ "$part" = all ] && session_later
    ;;
  part2)
    export GPU_REUSE_BUILD=1
    session_builds
    session_later
    ;;
esac
gs_finish
