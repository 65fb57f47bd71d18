#!/usr/bin/env bash
# How long a job takes to start on the emulated cluster: a short mgs-replay
# run (BERT-base trace at a quarter of its times, 2 profile steps, 4 untimed
# and 2 timed steps: the start dominates) with MGS_CALIBRATION=auto, timed as
# a whole process, per world size. Rank 0's info line "cost model calibrated
# in ..." (builds that have it) splits the calibration into its parts.
#
# usage: bench/cluster/run_startup.sh [-b BUILD] [-n "16 32"] [-r 10gbit] [-l 0.5ms] [-L LABEL] -o DIR
#   -b  build directory, relative to the repository (default build)
#   -n  world sizes (emulated hosts), one run each, in this order
#   -L  label for the file names (default: the build's name)
#   -o  directory: LABEL_N.log (every rank's output) and startup.jsonl (one
#       line per run: ranks, build, whole-process seconds, and the
#       calibration's parts when the log has them)
# Needs root (emulated_cluster.sh). Run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build ranks="16 32" rate=10gbit latency=0.5ms out="" label=""
while getopts "b:n:r:l:L:o:" o; do
  case $o in
    b) build=$OPTARG ;;
    n) ranks=$OPTARG ;;
    r) rate=$OPTARG ;;
    l) latency=$OPTARG ;;
    L) label=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,16p' "$0" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || { echo "run_startup: -o DIR is required" >&2; exit 2; }
bin=$PWD/$build/bench/mgs-replay
[ -x "$bin" ] || { echo "run_startup: $bin not built (--target mgs-replay)" >&2; exit 2; }
[ -n "$label" ] || label=$(basename "$build")
mkdir -p "$out"
for n in $ranks; do
  log=$out/${label}_$n.log
  t0=$(date +%s.%N)
  rc=0
  OMP_NUM_THREADS=1 scripts/emulated_cluster.sh -n "$n" -r "$rate" -l "$latency" -t 1800 \
    -m "-x MGS_LOG_LEVEL=info -x MGS_CALIBRATION=auto" -- \
    "$bin" --trace tools/traces/bert_base.json --scale-elements 0.0025 --scale-time 0.25 --density 0.001 \
    --steps 2 --warmup 4 --profile-steps 2 --sim-network 10gbe --label "startup-$label-$n" > "$log" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  /usr/bin/python3 - "$log" "$n" "$label" "$t0" "$t1" "$rc" "$rate" "$latency" >> "$out/startup.jsonl" <<'EOF'
import json, re, sys
log, n, label, t0, t1, rc, rate, latency = sys.argv[1:]
d = {"ranks": int(n), "build": label, "rate": rate, "latency": latency, "exit": int(rc),
     "wall_s": round(float(t1) - float(t0), 1)}
text = open(log, errors="replace").read()
m = re.search(r"cost model calibrated in ([0-9.]+) s on \d+ ranks: allreduces up to (\d+) KiB ([0-9.]+) s, "
              r"allgathers up to (\d+) KiB a rank \((\d+) KiB received\) ([0-9.]+) s, broadcasts ([0-9.]+) s, "
              r"selection ([0-9.]+) s, small allgathers in flight ([0-9.]+) s", text)
if m:
    g = m.groups()
    d.update({"calibration_s": float(g[0]), "allreduce_s": float(g[2]), "allgather_max_kib": int(g[3]),
              "allgather_recv_kib": int(g[4]), "allgather_s": float(g[5]), "broadcast_s": float(g[6]),
              "selection_s": float(g[7]), "inflight_s": float(g[8])})
print(json.dumps(d))
EOF
  tail -n 1 "$out/startup.jsonl" >&2
done
