#!/usr/bin/env bash
# Real training steps on one GPU (bench/train/train_step.py --device cuda):
# every system in one sitting, same model, seed and batches, then the table
# with ratios against torch DDP and the compute-only floor of the sitting.
#   1 rank:  compute, ddp (NCCL), mgs (dense, defaults: NCCL backend), and
#            mgs-sparse (MGS_COMPRESSOR=gaussiank MGS_DENSITY=0.001: device
#            buckets, selection on the GPU; MGS_WARMUP_STEPS=0: the timed steps
#            are the steady state, not the default's 50-step density warm-up). At one rank nothing crosses a
#            wire, so this is what each system adds to a step on the GPU.
#   2 ranks sharing the GPU (NCCL takes one rank per GPU): ddp (gloo), mgs
#            and mgs-sparse with MGS_BACKEND=mpi (host-staged compact blocks).
# usage: bench/train/gpu_train.sh [-b BUILD] [-o OUT.jsonl] [-M MODEL] [-s STEPS] [-B BATCH] [-n "1 2"]
# BUILD: a full build with CUDA (default build-gpu-full, scripts/gpu_full_check.sh).
# MODEL: resnet50 (224x224 images; needs torchvision) or transformer; the
# default is resnet50 when torchvision imports, else transformer.
# PYTHON: the interpreter with torch (default python3). Written 2026-11-27
# without a GPU: it has not run yet.
set -u
cd "$(dirname "$0")/../.."
root=$PWD
build=build-gpu-full
out=""
model=""
steps=30
batch=32
sizes="1 2"
while getopts "b:o:M:s:B:n:h" opt; do
  case $opt in
    b) build=$OPTARG ;;
    o) out=$OPTARG ;;
    M) model=$OPTARG ;;
    s) steps=$OPTARG ;;
    B) batch=$OPTARG ;;
    n) sizes=$OPTARG ;;
    h) sed -n '2,19p' "$0"; exit 0 ;;
    *) exit 2 ;;
  esac
done
PY=${PYTHON:-$(command -v python3)}
lib=$(find "$root/$build" -name "libmgs.so" | head -1)
[ -n "$lib" ] || { echo "gpu_train: no libmgs.so under $build" >&2; exit 2; }
[ -n "$out" ] || out=$(mktemp /tmp/gpu_train.XXXXXX.jsonl)
if [ -z "$model" ]; then
  if "$PY" -c "import torchvision" 2>/dev/null; then model=resnet50; else model=transformer; fi
fi
gpu=$("$PY" -c "import torch; print(torch.cuda.get_device_name())" 2>/dev/null) || {
  echo "gpu_train: no CUDA device visible to $PY" >&2; exit 77; }
echo "gpu_train: $gpu, $model, batch $batch per rank, $steps steps (last 10 measured); results in $out" >&2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
err=$(mktemp)
for np in $sizes; do
  systems="compute ddp mgs mgs-sparse"
  for system in $systems; do
    env_args=(-x MASTER_ADDR=127.0.0.1 -x PYTHONPATH="$root/bindings/python" -x MGS_LIBRARY="$lib")
    run_system=$system
    backend=nccl
    [ "$np" -gt 1 ] && backend=gloo  # NCCL refuses two ranks on one GPU
    case $system in
      mgs-sparse) run_system=mgs; env_args+=(-x MGS_COMPRESSOR=gaussiank -x MGS_DENSITY=0.001 -x MGS_WARMUP_STEPS=0) ;;
    esac
    [ "$np" -gt 1 ] && [ "$run_system" = mgs ] && env_args+=(-x MGS_BACKEND=mpi)
    echo "gpu_train: np $np $system" >&2
    line=$(timeout 300 mpirun --oversubscribe --bind-to none -np "$np" "${env_args[@]}" \
             "$PY" "$root/bench/train/train_step.py" --system "$run_system" --model "$model" --device cuda \
             --image-size 224 --batch "$batch" --threads 4 --ddp-backend "$backend" --steps "$steps" \
             --measure-from "$(( steps > 10 ? steps - 9 : 1 ))" --label "$system@gpu" 2>"$err" | grep '^{' || true)
    if [ -z "$line" ]; then
      echo "gpu_train: $system at np $np failed:" >&2; tail -5 "$err" >&2
      line="{\"label\": \"$system@gpu\", \"system\": \"$run_system\", \"model\": \"$model\", \"failed\": true}"
    fi
    # A job's end is part of the job: any rank's traceback or error line is counted.
    errors=$(grep -c -E 'Traceback|Error|error:|MGS_ERR' "$err" || true)
    [ "$errors" -gt 0 ] && { echo "gpu_train: $system printed $errors error lines:" >&2; grep -m 5 -E 'Traceback|Error|error:|MGS_ERR' "$err" >&2; }
    # A path nobody checks did not run: mgs-sparse's CUDA buckets must stay
    # on the GPU (device buckets over NCCL at 1 rank, GPU selection with
    # compact blocks over MPI at 2), never staged through the host.
    if [ "$system" = mgs-sparse ]; then
      want=path_resident_buckets
      [ "$np" -eq 1 ] && want=path_device_buckets
      if ! echo "$line" | "$PY" -c "
import json, sys
p = json.load(sys.stdin).get('mgs_paths') or {}
print('gpu_train: mgs-sparse np $np paths:', p, file=sys.stderr)
sys.exit(0 if (p.get('$want') or 0) > 0 and p.get('path_staged_buckets') == 0 else 1)"; then
        echo "gpu_train: PATH CHECK FAILED: mgs-sparse at np $np did not run on $want (or staged buckets through the host)" >&2
        path_failed=1
      fi
    fi
    echo "$line" | "$PY" -c "import json,sys; d=json.load(sys.stdin); d.update(rate='gpu-np$np', setting='$np rank(s) on one $gpu', rep=1, name='$system', stderr_error_lines=$errors, build='$build'); print(json.dumps(d))" >>"$out"
  done
done
rm -f "$err"
"$PY" "$root/bench/train/summarize.py" "$out"
[ "${path_failed:-0}" -eq 0 ] || { echo "gpu_train: a path check failed (above)" >&2; exit 1; }
