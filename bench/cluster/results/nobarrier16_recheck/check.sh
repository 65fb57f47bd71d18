#!/bin/bash
# One sparse 16-rank cell of the sweep, steps back to back (--no-step-barrier, as a training job runs), the defaults
# (re-planning on) against the cell's best fixed size: CALLS calls of 2 swapped pairs (about 2 minutes a call).
# usage: check.sh MODEL RATE DENSITY BEST [CALLS] [OUTDIR] [FIRST]   (FIRST: the first call's number, 1; more calls
#   of a cell: the next number, so that the files add up)
#   MODEL resnet50|bert_base, RATE 1gbit|10gbit, DENSITY 0.01|0.001, BEST the size in MB (64, 128)
#   e.g. check.sh resnet50 10gbit 0.01 64 6      then: /usr/bin/python3 summary.py OUTDIR
#   STEP_BARRIER=1 in the environment: the replay's barrier before each step kept (the sweep table's timing);
#   TAG=NAME: the files are NAME_<call> instead of the cell's name (other MGS_* variables reach every run)
model=${1:?MODEL} rate=${2:?RATE} density=${3:?DENSITY} best=${4:?BEST} calls=${5:-6} first=${7:-1}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../../.." && pwd)
out=$(mkdir -p "${6:-$here}" && cd "${6:-$here}" && pwd)
case $model in resnet50) scale=0.01 ;; bert_base) scale=0.0025 ;; *) echo "unknown model $model" >&2; exit 2 ;; esac
case $rate in 1gbit) net=1gbe ;; 10gbit) net=10gbe ;; *) echo "unknown rate $rate" >&2; exit 2 ;; esac
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cell="${model}_${rate}_${density}_16"
barrier_arg=--no-step-barrier
if [ "${STEP_BARRIER:-0}" = 1 ]; then barrier_arg=; cell="${cell}_barrier"; fi
cell=${TAG:-$cell}
for i in $(seq "$first" $((first + calls - 1))); do
  echo "$(date +%T) ${cell}_$i"
  (cd "$repo" && MGS_REPLAN_TOLERANCE=0.15 timeout 900 bench/cluster/run_planner.sh -b build -n 16 -r "$rate" -l 0.5ms \
    -R 2 -C "fixed-${best}MB" -e "$scale" -o "$out/${cell}_$i.jsonl" -- --trace "tools/traces/$model.json" --steps 40 \
    --profile-steps 3 --scale-time 0.25 --density "$density" --sim-network "$net" ${barrier_arg} \
    > "$out/${cell}_$i.log" 2>&1 < /dev/null)
  echo "rc=$?"
done
