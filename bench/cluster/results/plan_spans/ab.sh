#!/usr/bin/env bash
# The defaults against each cell's best fixed size (the sweep table's),
# before and after exchanges in flight and queued groups entered the model:
# per cell 4 swapped pairs (re-planning on, 40 steps, no step barrier), once
# with build-head (before) and once with build (after), the two builds'
# order alternating. build-head/bench/ holds mgs-replay and its libmgs.so.0
# side by side (the binary's RUNPATH starts with $ORIGIN), built from the
# commit before the change.
# usage: ab.sh OUTDIR   (about 5 minutes a cell at 16 ranks, 4 at 8)
set -u
cd "$(dirname "$0")/../../../.."
o=bench/cluster/results/plan_spans/${1:?OUTDIR}
mkdir -p "$o"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MGS_REPLAN_TOLERANCE=0.15 MGS_LOG_LEVEL=info
i=0
while read -r name n trace rate net rho e fixed; do
  i=$((i + 1))
  builds="build-head build"; [ $((i % 2)) -eq 0 ] && builds="build build-head"
  for b in $builds; do
    CLUSTER_LOG_DIR=/tmp/plan_spans_ab/$1/${name}_$b bench/cluster/run_planner.sh -b $b -n $n -r $rate -l 0.5ms -R 4 \
      -C fixed-${fixed}MB -e $e -o $o/${name}_$b.jsonl -- --trace tools/traces/$trace.json --steps 40 \
      --profile-steps 3 --scale-time 0.25 --density $rho --sim-network $net --no-step-barrier \
      < /dev/null > $o/${name}_$b.out 2>&1
    for f in /tmp/plan_spans_ab/$1/${name}_$b/*-rep?.log; do
      echo "== $(basename "$f" .log)"
      grep -h "rank 0.*merge plan (mgs\|rank 0.*keeping\|rank 0.*re-planning at" "$f" | cut -c1-400
    done > $o/${name}_$b.plans.log
  done
done <<CELLS
resnet50_10gbit_0.001_16 16 resnet50 10gbit 10gbe 0.001 0.01 64
resnet50_10gbit_0.01_16 16 resnet50 10gbit 10gbe 0.01 0.01 64
resnet50_1gbit_0.001_16 16 resnet50 1gbit 1gbe 0.001 0.01 64
bert_base_1gbit_0.01_16 16 bert_base 1gbit 1gbe 0.01 0.0025 128
resnet50_10gbit_0.001_8 8 resnet50 10gbit 10gbe 0.001 0.01 16
bert_base_10gbit_0.001_8 8 bert_base 10gbit 10gbe 0.001 0.0025 128
CELLS
echo done
