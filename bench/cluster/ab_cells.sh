#!/usr/bin/env bash
# A/B of two builds on sweep cells: per cell (one line on standard input:
# NAME RANKS TRACE RATE SIM_NETWORK DENSITY ELEMENT_SCALE BEST_FIXED_MB), the
# defaults (re-planning on, 40 steps, no step barrier) against the cell's best
# fixed size, 4 swapped pairs (run_planner.sh -C), once with each build, the
# builds' order alternating from cell to cell. Per cell and build OUTDIR gets
# NAME_BUILD.jsonl, .out and .plans.log (rank 0's plan, trial and re-plan
# lines of each default run, under its label). A build is a folder holding
# one commit's bench/mgs-replay and libmgs.so.0 side by side (the binary's
# RUNPATH starts with $ORIGIN), or a whole build tree.
# usage: ab_cells.sh BUILD_BEFORE BUILD_AFTER OUTDIR < CELLS
#   (bench/cluster/results/host_dilation/summarize.py OUTDIR: the ratios)
set -u
before=${1:?BUILD_BEFORE} after=${2:?BUILD_AFTER} o=${3:?OUTDIR}
cd "$(dirname "$0")/../.."
mkdir -p "$o"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MGS_REPLAN_TOLERANCE=0.15 MGS_LOG_LEVEL=info
logs=$(mktemp -d /tmp/ab_cells.XXXXXX)
i=0
while read -r name n trace rate net rho e fixed; do
  [ -n "$name" ] || continue
  i=$((i + 1))
  builds="$before $after"; [ $((i % 2)) -eq 0 ] && builds="$after $before"
  for b in $builds; do
    CLUSTER_LOG_DIR=$logs/${name}_$b bench/cluster/run_planner.sh -b "$b" -n "$n" -r "$rate" -l 0.5ms -R 4 \
      -C "fixed-${fixed}MB" -e "$e" -o "$o/${name}_$b.jsonl" -- --trace "tools/traces/$trace.json" --steps 40 \
      --profile-steps 3 --scale-time 0.25 --density "$rho" --sim-network "$net" --no-step-barrier \
      < /dev/null > "$o/${name}_$b.out" 2>&1
    for f in "$logs/${name}_$b"/*-rep?.log; do
      echo "== $(basename "$f" .log)"
      grep -h "rank 0.*merge plan (mgs\|rank 0.*keeping\|rank 0.*re-planning at" "$f" | cut -c1-400
    done > "$o/${name}_$b.plans.log"
  done
done
rm -rf "$logs"
echo done
