#!/usr/bin/env bash
# The planner sweep: is any fusion knob worth tuning? For every cell
# (model x link rate x density x hosts) on the emulated cluster, one
# run_planner.sh sitting: the default plan a user gets (sparse: the MGS
# planner with its trials; dense: cycle fusion up to the default 64 MiB),
# layer-wise, and fixed bucket sizes, Horovod's 64 MiB and DDP's 25 MiB among
# them. Each cell's JSON lines go to OUT/<model>_<rate>_<density>_<hosts>.jsonl
# (a cell whose file exists is skipped: rerun to resume, delete to redo);
# then bench/cluster/sweep_table.py prints the one table (docs/benchmarks.md).
# With -C PAIRS, every cell whose default is more than 3% slower than the best
# fixed size found there is checked in a second sitting: PAIRS runs of the
# default and PAIRS of that size, their order swapped every pair, into
# OUT/confirm/<cell>.jsonl (skipped when it exists). The best of seven noisy
# settings is biased low; the check times the two on fresh runs. Cells whose
# default was timed during its trials (dense cells: the fusion threshold
# trials; sparse cells of an older sweep: the plan trials, --warmup 5) are
# checked whatever their ratio; a dense cell's check times 40 steps.
#
# usage: bench/cluster/run_sweep.sh [-b BUILD] [-o OUT] [-m "resnet50 bert_base"] [-r "10gbit 1gbit"]
#            [-d "dense 0.01 0.001"] [-n "4 8 16"] [-F "1 4 16 25 64 128"] [-R REPEATS] [-l LATENCY]
#            [-C PAIRS] [-X "REPLAY ARGS"]
#   defaults as shown, -R 2, -l 0.5ms, OUT bench/cluster/results/sweep. Element scale per model
#   (tensors scaled so 16 ranks' selection fits 2 shared cores): resnet50 0.01, bert_base 0.0025,
#   vgg16 0.002; replay: --steps 6 --profile-steps 3 --scale-time 0.25, and --warmup 5 in dense cells
#   (sparse cells: the replay's default, past the plan trials); checks of dense cells --steps 40.
#   -X: more mgs-replay arguments for every run and check, e.g. -X --no-step-barrier (steps back to back, as
#   a training job runs; the default times each step after a barrier and leaves the barrier out).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build
out=bench/cluster/results/sweep
models="resnet50 bert_base"
rates="10gbit 1gbit"
densities="dense 0.01 0.001"
hostsets="4 8 16"
fixed="1 4 16 25 64 128"
repeats=2
latency=0.5ms
pairs=0
more=()
while getopts "b:o:m:r:d:n:F:R:l:C:X:h" opt; do
  case $opt in
    b) build=$OPTARG ;;
    o) out=$OPTARG ;;
    m) models=$OPTARG ;;
    r) rates=$OPTARG ;;
    d) densities=$OPTARG ;;
    n) hostsets=$OPTARG ;;
    F) fixed=$OPTARG ;;
    R) repeats=$OPTARG ;;
    l) latency=$OPTARG ;;
    C) pairs=$OPTARG ;;
    X) read -r -a more <<< "$OPTARG" ;;
    h) sed -n '2,27p' "$0"; exit 0 ;;
    *) exit 2 ;;
  esac
done
mkdir -p "$out"
scale_of() {
  case $1 in resnet50) echo 0.01 ;; bert_base) echo 0.0025 ;; vgg16) echo 0.002 ;; *) echo 0.01 ;; esac
}
for model in $models; do
  trace=tools/traces/$model.json
  [ -f "$trace" ] || { echo "run_sweep: no trace $trace" >&2; exit 2; }
  for rate in $rates; do
    case $rate in 1gbit) sim=1gbe ;; 10gbit) sim=10gbe ;; *) sim=10gbe ;; esac
    for density in $densities; do
      for hosts in $hostsets; do
        cell=$out/${model}_${rate}_${density}_${hosts}.jsonl
        extra=()
        rho=$density
        if [ "$density" = dense ]; then extra=(-D); rho=0.001; fi
        # Dense cells time from step 5; sparse cells from the replay's default, after the profile and every
        # step of the default's plan trials (42 steps, a run-off included), so that the default is timed on the plan it keeps.
        warm=()
        [ "$density" = dense ] && warm=(--warmup 5)
        # A dense default tries fusion thresholds from step 5 to step 21 (planner.md 7c): the sweep's 6
        # steps time it in its trials, so its check times 40 steps, the trials and 20 steps after them.
        check_steps=6
        [ "$density" = dense ] && check_steps=40
        args=(--profile-steps 3 "${warm[@]}" --scale-time 0.25 --density "$rho" --sim-network "$sim" "${more[@]}")
        replay=(--trace "$trace" --steps 6 "${args[@]}")
        check_replay=(--trace "$trace" --steps "$check_steps" "${args[@]}")
        if [ -s "$cell" ]; then
          echo "# $cell exists: skipped" >&2
        else
          echo "# cell $model $rate $density $hosts hosts ($(date -u +%T))" >&2
          bench/cluster/run_planner.sh -b "$build" -n "$hosts" -r "$rate" -l "$latency" -R "$repeats" -F "$fixed" \
            -e "$(scale_of "$model")" "${extra[@]}" -o "$cell.part" -- "${replay[@]}" 2> "${cell%.jsonl}.log" |
            tail -n 3 >&2
          mv "$cell.part" "$cell"
        fi
        [ "$pairs" -gt 0 ] || continue
        check=$out/confirm/$(basename "$cell")
        best=$(/usr/bin/python3 bench/cluster/sweep_table.py --to-confirm "$cell")
        [ -n "$best" ] && [ ! -s "$check" ] || continue
        mkdir -p "$out/confirm"
        echo "# check $model $rate $density $hosts hosts: default against $best, $pairs pairs ($(date -u +%T))" >&2
        bench/cluster/run_planner.sh -b "$build" -n "$hosts" -r "$rate" -l "$latency" -R "$pairs" -C "$best" \
          -e "$(scale_of "$model")" "${extra[@]}" -o "$check.part" -- "${check_replay[@]}" 2> "${check%.jsonl}.log" |
          tail -n 2 >&2
        mv "$check.part" "$check"
      done
    done
  done
done
/usr/bin/python3 bench/cluster/sweep_table.py "$out"
