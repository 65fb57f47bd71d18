#!/usr/bin/env bash
# The A/B behind bench/NOTES.md "Coordinator CPU on shared cores": per cell,
# the defaults (re-planning on, 40 steps, no step barrier) against the
# table's best fixed size, 4 swapped pairs, once with build-base (before)
# and once with build (after), the two builds' order alternating.
# usage: ab.sh OUTDIR   (dilation/: host_dilation alone; notrial/ and
# sitting3/: with the rule that keeps re-plans predicted no more than 3 %
# faster off trial). build-base/bench/ holds mgs-replay and its libmgs.so.0
# side by side (the binary's RUNPATH starts with $ORIGIN), built from
# 800e6b5, the commit before both changes.
set -u
cd "$(dirname "$0")/../../../.."
o=bench/cluster/results/host_dilation/${1:?OUTDIR}
mkdir -p $o
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MGS_REPLAN_TOLERANCE=0.15 MGS_LOG_LEVEL=info
i=0
while read -r name trace rate net rho e fixed; do
  i=$((i + 1))
  builds="build-base build"; [ $((i % 2)) -eq 0 ] && builds="build build-base"
  for b in $builds; do
    CLUSTER_LOG_DIR=/tmp/hd_logs/$1/${name}_$b bench/cluster/run_planner.sh -b $b -n 16 -r $rate -l 0.5ms -R 4 \
      -C fixed-${fixed}MB -e $e -o $o/${name}_$b.jsonl -- --trace tools/traces/$trace.json --steps 40 \
      --profile-steps 3 --scale-time 0.25 --density $rho --sim-network $net --no-step-barrier \
      < /dev/null > $o/${name}_$b.out 2>&1
    # rank 0's plan, trial and re-plan lines of each default run, under its label
    for f in /tmp/hd_logs/$1/${name}_$b/*-rep?.log; do
      echo "== $(basename "$f" .log)"
      grep -h "rank 0.*merge plan (mgs\|rank 0.*keeping\|rank 0.*re-planning at" "$f" | cut -c1-400
    done > $o/${name}_$b.plans.log
  done
done <<CELLS
resnet50_10gbit_0.01 resnet50 10gbit 10gbe 0.01 0.01 64
resnet50_1gbit_0.001 resnet50 1gbit 1gbe 0.001 0.01 64
bert_base_1gbit_0.01 bert_base 1gbit 1gbe 0.01 0.0025 128
resnet50_10gbit_0.001 resnet50 10gbit 10gbe 0.001 0.01 64
CELLS
echo done
