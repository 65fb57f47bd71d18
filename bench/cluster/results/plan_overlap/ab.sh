#!/usr/bin/env bash
# The defaults against each cell's best fixed size (the sweep table's), with
# exchanges in flight priced at the calibration's overlap (build-before: a
# build of the commit before the job's own overlap was timed) and at the
# overlap rank 0's allgathers showed (build): bench/cluster/ab_cells.sh, 4
# swapped pairs per cell and build; the cells of plan_rounds/ab.sh (plan_rounds/cells). About 12
# minutes. build-before here was commit 5a40066 (RelWithDebInfo, like build;
# cmake --build ... --target mgs-replay, binary and libmgs.so.0 side by side).
# usage: ab.sh OUTDIR   (r1/ holds the sitting the notes quote); the table:
#   /usr/bin/python3 bench/cluster/results/host_dilation/summarize.py OUTDIR
set -u
cd "$(dirname "$0")/../../../.."
exec bench/cluster/ab_cells.sh build-before build "bench/cluster/results/plan_overlap/${1:?OUTDIR}" \
  < bench/cluster/results/plan_rounds/cells
