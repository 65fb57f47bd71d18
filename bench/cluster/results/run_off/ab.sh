#!/bin/bash
# The run-off A/B: the sweep's ResNet-50 cell at 16 ranks, 10 Gbit/s, rho 0.001, the defaults (re-planning on)
# against 64 MB, 2 swapped pairs per call; this repo's build and BEFORE's (a worktree of the commit before, with
# build/bench/mgs-replay built) taking turns, 4 calls each (about 20 minutes).
# usage: ab.sh BEFORE [OUTDIR]   then: summary.py OUTDIR
before=${1:?BEFORE: a worktree of the commit before, with build/bench/mgs-replay}
here=$(cd "$(dirname "$0")" && pwd)
after=$(cd "$here/../../../.." && pwd)
out=$(mkdir -p "${2:-$here}" && cd "${2:-$here}" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cell() { # REPO TAG
  echo "$(date +%T) $2"
  (cd "$1" && MGS_LOG_LEVEL=info CLUSTER_LOG_DIR=/tmp/run_off/$2 MGS_REPLAN_TOLERANCE=0.15 timeout 900 \
    bench/cluster/run_planner.sh -b build -n 16 -r 10gbit -l 0.5ms -R 2 -C fixed-64MB -e 0.01 -o "$out/$2.jsonl" -- \
    --trace tools/traces/resnet50.json --steps 40 --profile-steps 3 --scale-time 0.25 --density 0.001 \
    --sim-network 10gbe > "$out/$2.log" 2>&1 < /dev/null)
  echo "rc=$?"
}
for i in 1 2 3 4; do
  cell "$after" "after_$i"
  cell "$before" "before_$i"
done
# Rank 0's trial, run-off and re-plan lines of every run.
for d in /tmp/run_off/*_[0-9]; do
  for f in "$d"/*.log; do
    echo "== $(basename "$d")/$(basename "$f")"
    grep "rank 0" "$f" | grep -E "merge plan trials|run-off|re-planning at|keeping the running|trying" | cut -c1-600
  done
done > "$out/rank0_plan_lines.txt"
