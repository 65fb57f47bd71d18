#!/usr/bin/env bash
# The defaults against each cell's best fixed size (the sweep table's), with
# exchanges in flight priced at the overlap calibration read from four small
# allgathers started together (build-before: a build of commit 9100d21) and
# from a stream of 12 through the pipeline's window (build):
# bench/cluster/ab_cells.sh, 4 swapped pairs per cell and build; the cells of
# plan_rounds/cells. About 15 minutes. build-before: a whole build tree of
# 9100d21 (RelWithDebInfo, like build; cmake --build ... --target mgs-replay).
# usage: ab.sh OUTDIR   (r1/ holds the sitting the notes quote); the table:
#   /usr/bin/python3 bench/cluster/results/host_dilation/summarize.py OUTDIR
set -u
cd "$(dirname "$0")/../../../.."
exec bench/cluster/ab_cells.sh build-before build "bench/cluster/results/plan_stream/${1:?OUTDIR}" \
  < bench/cluster/results/plan_rounds/cells
