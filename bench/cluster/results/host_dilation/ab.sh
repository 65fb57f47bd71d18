#!/usr/bin/env bash
# The A/B behind bench/NOTES.md "The coordinator's wait for a core": per
# cell, the defaults against the table's best fixed size, 4 swapped pairs,
# with build-base (before) and build (after): bench/cluster/ab_cells.sh.
# usage: ab.sh OUTDIR   (dilation/: host_dilation alone; notrial/ and
# sitting3/: with the rule that keeps re-plans predicted no more than 3 %
# faster off trial). build-base/bench/ holds mgs-replay and its libmgs.so.0
# side by side, built from 800e6b5, the commit before both changes.
set -u
cd "$(dirname "$0")/../../../.."
exec bench/cluster/ab_cells.sh build-base build "bench/cluster/results/host_dilation/${1:?OUTDIR}" <<CELLS
resnet50_10gbit_0.01 16 resnet50 10gbit 10gbe 0.01 0.01 64
resnet50_1gbit_0.001 16 resnet50 1gbit 1gbe 0.001 0.01 64
bert_base_1gbit_0.01 16 bert_base 1gbit 1gbe 0.01 0.0025 128
resnet50_10gbit_0.001 16 resnet50 10gbit 10gbe 0.001 0.01 64
CELLS
