#!/bin/bash
# More visits per plan candidate: the sweep's ResNet-50 cell at 16 ranks, 1 Gbit/s, rho 0.001, steps back to back
# (--no-step-barrier, as a training job runs), the defaults (re-planning on) against 64 MB, 2 swapped pairs per
# call; the default's trials at 2 visits per candidate (MGS_PLAN_TRIAL_STEPS=3, the default) and at 4 (=5) taking
# turns, ROUNDS calls each (about 4 minutes a round). The replay's untimed warm-up covers each arm's trials.
# usage: ab.sh [ROUNDS] [OUTDIR]   then: summary.py OUTDIR
rounds=${1:-6}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../../.." && pwd)
out=$(mkdir -p "${2:-$here}" && cd "${2:-$here}" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cell() { # TRIAL_STEPS TAG
  echo "$(date +%T) $2"
  (cd "$repo" && MGS_PLAN_TRIAL_STEPS=$1 MGS_LOG_LEVEL=info CLUSTER_LOG_DIR=/tmp/trial_visits/$2 \
    MGS_REPLAN_TOLERANCE=0.15 timeout 900 \
    bench/cluster/run_planner.sh -b build -n 16 -r 1gbit -l 0.5ms -R 2 -C fixed-64MB -e 0.01 -o "$out/$2.jsonl" -- \
    --trace tools/traces/resnet50.json --steps 40 --profile-steps 3 --scale-time 0.25 --density 0.001 \
    --sim-network 1gbe --no-step-barrier > "$out/$2.log" 2>&1 < /dev/null)
  echo "rc=$?"
}
for i in $(seq 1 "$rounds"); do
  if [ $((i % 2)) -eq 1 ]; then cell 3 "v2_$i"; cell 5 "v4_$i"; else cell 5 "v4_$i"; cell 3 "v2_$i"; fi
done
# Rank 0's trial, run-off and re-plan lines of every run.
for d in /tmp/trial_visits/*_[0-9]*; do
  for f in "$d"/*.log; do
    echo "== $(basename "$d")/$(basename "$f")"
    grep "rank 0" "$f" | grep -E "merge plan trials|run-off|re-planning at|keeping the running|trying" | cut -c1-600
  done
done > "$out/rank0_plan_lines.txt"
