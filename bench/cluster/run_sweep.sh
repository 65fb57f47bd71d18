#!/usr/bin/env bash
# The planner sweep: is any fusion knob worth tuning? For every cell
# (model x link rate x density x hosts) on the emulated cluster, one
# run_planner.sh sitting: the default plan a user gets (sparse: the MGS
# planner with its trials; dense: cycle fusion up to the default 64 MiB),
# layer-wise, and fixed bucket sizes, Horovod's 64 MiB and DDP's 25 MiB among
# them. Each cell's JSON lines go to OUT/<model>_<rate>_<density>_<hosts>.jsonl
# (a cell whose file exists is skipped: rerun to resume, delete to redo);
# then bench/cluster/sweep_table.py prints the one table (docs/benchmarks.md).
#
# usage: bench/cluster/run_sweep.sh [-b BUILD] [-o OUT] [-m "resnet50 bert_base"] [-r "10gbit 1gbit"]
#            [-d "dense 0.01 0.001"] [-n "4 8 16"] [-F "1 4 16 25 64 128"] [-R REPEATS] [-l LATENCY]
#   defaults as shown, -R 2, -l 0.5ms, OUT bench/cluster/results/sweep. Element scale per model
#   (tensors scaled so 16 ranks' selection fits 2 shared cores): resnet50 0.01, bert_base 0.0025,
#   vgg16 0.002; replay: --steps 6 --profile-steps 3 --warmup 5 --scale-time 0.25.
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
while getopts "b:o:m:r:d:n:F:R:l:h" opt; do
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
    h) sed -n '2,16p' "$0"; exit 0 ;;
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
        if [ -s "$cell" ]; then
          echo "# $cell exists: skipped" >&2
          continue
        fi
        extra=()
        rho=$density
        if [ "$density" = dense ]; then extra=(-D); rho=0.001; fi
        echo "# cell $model $rate $density $hosts hosts ($(date -u +%T))" >&2
        bench/cluster/run_planner.sh -b "$build" -n "$hosts" -r "$rate" -l "$latency" -R "$repeats" -F "$fixed" \
          -e "$(scale_of "$model")" "${extra[@]}" -o "$cell.part" -- --trace "$trace" --steps 6 --profile-steps 3 \
          --warmup 5 --scale-time 0.25 --density "$rho" --sim-network "$sim" 2> "${cell%.jsonl}.log" |
          tail -n 3 >&2
        mv "$cell.part" "$cell"
      done
    done
  done
done
/usr/bin/python3 bench/cluster/sweep_table.py "$out"
