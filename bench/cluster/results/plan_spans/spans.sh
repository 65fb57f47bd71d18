#!/usr/bin/env bash
# How well the plan predicts its steps on the emulated cluster, every plan:
# for each model and rank count, one sitting of run_planner.sh (the default,
# layer-wise, fixed 128/64/32/16/8 MB, the DP plan untried) with the online
# check comparing every step and never re-planning (MGS_REPLAN_TOLERANCE=100),
# 40 steps without the replay's barrier. BUILD names the build (a folder
# holding one commit's bench/mgs-replay and libmgs.so.0 side by side works:
# the binary's RUNPATH starts with $ORIGIN); TAG names the files.
# usage: [MODELS=...] spans.sh BUILD TAG [RANKS...]   (default ranks: 4 8 16; about
# 2-4 minutes a sitting); the tables: span_table.py span_TAG_*.jsonl
set -u
build=${1:?BUILD} tag=${2:?TAG}
shift 2
ranks=${*:-4 8 16}
# MODELS=resnet50 (or bert_base) runs one model; default both.
models=""
for m in ${MODELS:-resnet50 bert_base}; do
  case $m in
    resnet50) models+=" resnet50:0.01" ;;
    bert_base) models+=" bert_base:0.0025" ;;
    *) echo "spans.sh: MODELS takes resnet50 and bert_base, not $m" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# A run that hangs (seen at 32 ranks) is stopped and skipped, not waited for.
export CLUSTER_RUN_TIMEOUT=${CLUSTER_RUN_TIMEOUT:-600}
for n in $ranks; do
  for m in $models; do
    set -- ${m/:/ }
    MGS_REPLAN_TOLERANCE=100 MGS_LOG_LEVEL=info CLUSTER_LOG_DIR=/tmp/plan_spans/${tag}_$1_$n \
      bench/cluster/run_planner.sh -b "$build" -n "$n" -r 10gbit -l 0.5ms -R 1 -F "128 64 32 16 8" -U -e "$2" \
      -o "$here/span_${tag}_$1_$n.jsonl" -- --trace "tools/traces/$1.json" --steps 40 --profile-steps 3 \
      --scale-time 0.25 --density 0.001 --sim-network 10gbe --no-step-barrier < /dev/null \
      > "$here/span_${tag}_$1_$n.out" 2>&1
  done
done
