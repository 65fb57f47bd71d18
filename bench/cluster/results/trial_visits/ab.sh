#!/bin/bash
# More visits per plan candidate: the sweep's ResNet-50 cell at 16 ranks, 1 Gbit/s, rho 0.001, steps back to back
# (--no-step-barrier, as a training job runs), the defaults (re-planning on) against 64 MB, 2 swapped pairs per
# call; the default's trials at 2 visits per candidate (MGS_PLAN_TRIAL_STEPS=3, the default) and at 4 (=5) taking
# turns, ROUNDS calls each (about 4 minutes a round). The replay's untimed warm-up covers each arm's trials.
# usage: ab.sh [ROUNDS] [OUTDIR]   then: summary.py OUTDIR
rounds=${1:-6}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "${2:-$here}" && cd "${2:-$here}" && pwd)
cell() { # TRIAL_STEPS ARM CALL: one call of nobarrier16_recheck/check.sh, into OUT/ARM_CALL.*
  MGS_PLAN_TRIAL_STEPS=$1 MGS_LOG_LEVEL=info CLUSTER_LOG_DIR=/tmp/trial_visits/$2_$3 TAG=$2 \
    "$here/../nobarrier16_recheck/check.sh" resnet50 1gbit 0.001 64 1 "$out" "$3"
}
for i in $(seq 1 "$rounds"); do
  if [ $((i % 2)) -eq 1 ]; then cell 3 v2 "$i"; cell 5 v4 "$i"; else cell 5 v4 "$i"; cell 3 v2 "$i"; fi
done
# Rank 0's trial, run-off and re-plan lines of every run.
for d in /tmp/trial_visits/*_[0-9]*; do
  for f in "$d"/*.log; do
    echo "== $(basename "$d")/$(basename "$f")"
    grep "rank 0" "$f" | grep -E "merge plan trials|run-off|re-planning at|keeping the running|trying" | cut -c1-600
  done
done > "$out/rank0_plan_lines.txt"
