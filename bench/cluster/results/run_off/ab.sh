#!/bin/bash
# The run-off A/B: the missed 16-rank cell, the defaults (re-planning on) against 64 MB, 2 swapped pairs per call,
# the build before (a86af38, /tmp/before) and this one taking turns.
O=/work/main/bench/cluster/results/run_off
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cell() { # DIR BUILD TAG
  cd $1
  echo "$(date +%T) $3"
  MGS_LOG_LEVEL=info CLUSTER_LOG_DIR=/tmp/run_off/$3 MGS_REPLAN_TOLERANCE=0.15 timeout 900 bench/cluster/run_planner.sh -b $2 -n 16 -r 10gbit -l 0.5ms -R 2 -C fixed-64MB -e 0.01 \
    -o $O/$3.jsonl -- --trace tools/traces/resnet50.json --steps 40 --profile-steps 3 --scale-time 0.25 --density 0.001 --sim-network 10gbe > $O/$3.log 2>&1 < /dev/null
  echo "rc=$?"; tail -4 $O/$3.log | head -3
}
cell /work/main build after_1
cell /tmp/before build before_1
cell /work/main build after_2
cell /tmp/before build before_2
echo done $(date +%T)
# The second half of the sitting ran the same calls as after_3, before_3, after_4, before_4.
# rank0_plan_lines.txt: rank 0's trial, run-off and re-plan lines of every run (CLUSTER_LOG_DIR=/tmp/run_off/TAG).
