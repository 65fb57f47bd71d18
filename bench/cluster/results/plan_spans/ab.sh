#!/usr/bin/env bash
# The defaults against each cell's best fixed size (the sweep table's),
# before and after exchanges in flight and queued buckets entered the model
# (benchmarks.md, "The sweep"): bench/cluster/ab_cells.sh with build-head
# (a build of the commit before) and build. About 50 minutes.
# usage: ab.sh OUTDIR   (s1/ holds the sitting the docs quote)
set -u
cd "$(dirname "$0")/../../../.."
exec bench/cluster/ab_cells.sh build-head build "bench/cluster/results/plan_spans/${1:?OUTDIR}" <<CELLS
resnet50_10gbit_0.001_16 16 resnet50 10gbit 10gbe 0.001 0.01 64
resnet50_10gbit_0.01_16 16 resnet50 10gbit 10gbe 0.01 0.01 64
resnet50_1gbit_0.001_16 16 resnet50 1gbit 1gbe 0.001 0.01 64
bert_base_1gbit_0.01_16 16 bert_base 1gbit 1gbe 0.01 0.0025 128
resnet50_10gbit_0.001_8 8 resnet50 10gbit 10gbe 0.001 0.01 16
bert_base_10gbit_0.001_8 8 bert_base 10gbit 10gbe 0.001 0.0025 128
CELLS
