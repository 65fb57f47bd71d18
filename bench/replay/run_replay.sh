#!/usr/bin/env bash
# Runs mgs-replay once per strategy (dense+fusion, sparse layer-wise, sparse
# single bucket, sparse mgs plan) and prints a table with ratios and the
# predictions. One calibration file is measured by the first sparse run and
# reused by the others (and by the dense run's prediction).
#
# usage: bench/replay/run_replay.sh [-b BUILD] [-l local|emulated] [-n RANKS] [-r RATE]
#                                   [-o OUT.jsonl] [-S "strategies"] -- [mgs-replay args]
#   -l local:    mpirun --oversubscribe -np RANKS on this host (shared memory)
#   -l emulated: scripts/emulated_cluster.sh -n RANKS -r RATE (one rank per netns host)
# Example (docs/benchmarks.md, Replay):
#   bench/replay/run_replay.sh -b build-replay -l emulated -n 4 -r 1gbit -o /tmp/e.jsonl -- \
#       --trace tools/traces/resnet50.json --density 0.001
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build-replay
launch=local
ranks=4
rate=1gbit
out=""
strategies="mgs layerwise single dense"   # mgs first: it measures the calibration
while getopts "b:l:n:r:o:S:h" opt; do
  case $opt in
    b) build=$OPTARG ;;
    l) launch=$OPTARG ;;
    n) ranks=$OPTARG ;;
    r) rate=$OPTARG ;;
    o) out=$OPTARG ;;
    S) strategies=$OPTARG ;;
    h) sed -n '2,14p' "$0"; exit 0 ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
bin=$PWD/$build/bench/mgs-replay
[ -x "$bin" ] || { echo "run_replay: $bin not built (cmake --build $build --target mgs-replay)" >&2; exit 2; }
[ -n "$out" ] || out=$(mktemp /tmp/replay.XXXXXX.jsonl)
: > "$out"
cal=$(mktemp -u /tmp/replay_calibration.XXXXXX.json)
trap 'rm -f "$cal"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# 4 ranks share 2 cores: one selector thread per rank, not an OpenMP team each.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

echo "# $(date -u +%FT%TZ) load $(cut -d" " -f1-3 /proc/loadavg); $(lscpu | sed -n 's/^Model name: *//p'), $(lscpu | sed -n "s/^CPU(s): *//p") CPUs; launch=$launch ranks=$ranks" \
     "$([ "$launch" = emulated ] && echo "rate=$rate"); args: $*" >&2
for s in $strategies; do
  label="$launch-$ranks${launch/local/}"
  [ "$launch" = emulated ] && label="emulated-$ranks-$rate"
  cmd=("$bin" --strategy "$s" --calibration "$cal" --label "$label" --sim-network "${SIM_NETWORK:-1gbe}" "$@")
  if [ "$launch" = emulated ]; then
    scripts/emulated_cluster.sh -n "$ranks" -r "$rate" -m "-x OMP_NUM_THREADS" -- "${cmd[@]}" | grep '^{' >> "$out"
  else
    mpirun --oversubscribe -np "$ranks" -x OMP_NUM_THREADS --mca btl self,vader,tcp --mca mpi_yield_when_idle 1 "${cmd[@]}" | grep '^{' >> "$out"
  fi
  tail -n 1 "$out" | cut -c1-200 >&2
done
[ -f "$cal" ] && echo "# calibration: $(tr -d '\n ' < "$cal")" >&2

/usr/bin/python3 - "$out" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {r["strategy"]: r for r in rows}
base = by.get("dense")
net = rows[0]["sim_network"] if rows else ""
print("| strategy | median step ms | min..max ms | vs dense | buckets/step (sparse+dense) | sent/dense bytes | predicted ms (planner, calibrated) | pred/meas | predicted ms (mgs-sim %s) | pred/meas | predicted ms (mgs-sim %s, selection on compute stream) | pred/meas |"
      % (net, net))
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    m = r["median_s"]
    vs = "%.2f×" % (base["median_s"] / m) if base else "-"
    pc, ps, pl = r["predicted_calibrated_s"], r["predicted_sim_s"], r.get("predicted_sim_compute_s", -1)
    print("| %s | %.1f | %.1f..%.1f | %s | %s | %.4f | %s | %s | %s | %s | %s | %s |" % (
        r["strategy"], m * 1e3, r["min_s"] * 1e3, r["max_s"] * 1e3, vs,
        "%g+%g" % (r["sparse_buckets_per_step"], r["dense_buckets_per_step"]) if r["strategy"] != "dense" else "-",
        r["sent_over_dense"],
        "%.1f" % (pc * 1e3) if pc > 0 else "-", "%.2f" % (pc / m) if pc > 0 else "-",
        "%.1f" % (ps * 1e3) if ps > 0 else "-", "%.2f" % (ps / m) if ps > 0 else "-",
        "%.1f" % (pl * 1e3) if pl > 0 else "-", "%.2f" % (pl / m) if pl > 0 else "-"))
if "mgs" in by:
    m = by["mgs"]["median_s"]
    if base: print("\nmgs vs dense+fusion: %.2f× (goal ≥ 10×)" % (base["median_s"] / m))
    others = [by[k]["median_s"] for k in ("layerwise", "single") if k in by]
    if others: print("mgs vs best of layer-wise/single: %.3f× (goal ≥ 1.15×)" % (min(others) / m))
EOF
echo "# JSON lines: $out" >&2
