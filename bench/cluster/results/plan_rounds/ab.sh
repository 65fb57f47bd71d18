#!/usr/bin/env bash
# The defaults against each cell's best fixed size (the sweep table's), with
# negotiation rounds priced at the calibration's value (build-before: a build
# of the commit before rounds were timed) and at what rank 0 timed (build):
# bench/cluster/ab_cells.sh, 4 swapped pairs per cell and build. Two 16-rank
# cells where the default sat closest to the 3 % goal, and the 4-rank cell
# whose default plan moved most in the spans sitting (the file `cells`). About
# 12 minutes.
# build-before here was commit a0c327a configured with -DMGS_WITH_CUDA=OFF
# (cmake --build ... --target mgs-replay; the host path is the same code).
# usage: ab.sh OUTDIR   (r1/ holds the sitting the docs quote); the table:
#   /usr/bin/python3 bench/cluster/results/host_dilation/summarize.py OUTDIR
set -u
cd "$(dirname "$0")/../../../.."
exec bench/cluster/ab_cells.sh build-before build "bench/cluster/results/plan_rounds/${1:?OUTDIR}" \
  < bench/cluster/results/plan_rounds/cells
