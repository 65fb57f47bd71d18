#!/usr/bin/env bash
# Sparse exchange traffic and step time against the number of workers, on the
# emulated cluster (scripts/emulated_cluster.sh: one netns "host" per rank,
# tc tbf rate per link, -l added latency per link). For every P and exchange,
# one mgs-replay run per strategy; per rank and step it reports the bytes on
# the host's own link (eth0 tx/rx counters inside its namespace: everything
# the job sent, barriers and negotiation included), the runtime's payload
# (values + indices selected), and the median step (max over ranks).
#
# usage: bench/cluster/run_scaling.sh [-b BUILD] [-P "2 4 8 16"] [-r RATE] [-l LATENCY]
#            [-x "allgather agreed"] [-S "mgs"] [-R REPEATS] [-o OUT.jsonl] -- [mgs-replay args]
#   -x  exchanges (MGS_EXCHANGE); needs a libmgs that has the variable, else
#       only "allgather" runs (the variable unset)
#   replay args default to: --steps 10 --scale-time 0.25 --scale-elements 0.25
#       --density 0.001 --sim-network 10gbe
# Online re-planning is off (MGS_REPLAN_TOLERANCE=0) unless set in the
# environment, so each strategy runs its own plan. MGS_MIN_SPARSE_ELEMENTS is
# 4096 x the element scale, so the same tensors go dense as at full size.
# Example (docs/benchmarks.md, "Emulated cluster: scaling"):
#   bench/cluster/run_scaling.sh -b build -P "2 4 8 16" -r 10gbit -l 0.5ms -x "allgather agreed" -o scaling.jsonl
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build
sizes="2 4 8 16"
rate=10gbit
latency=0.5ms
exchanges=allgather
strategies=mgs
repeats=1
out=""
while getopts "b:P:r:l:x:S:R:o:h" opt; do
  case $opt in
    b) build=$OPTARG ;;
    P) sizes=$OPTARG ;;
    r) rate=$OPTARG ;;
    l) latency=$OPTARG ;;
    x) exchanges=$OPTARG ;;
    S) strategies=$OPTARG ;;
    R) repeats=$OPTARG ;;
    o) out=$OPTARG ;;
    h) sed -n '2,21p' "$0"; exit 0 ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--steps 10 --scale-time 0.25 --scale-elements 0.25 --density 0.001 --sim-network 10gbe)
bin=$PWD/$build/bench/mgs-replay
lib=$(find "$PWD/$build" -name "libmgs.so*" -type f 2>/dev/null | head -n 1)
[ -x "$bin" ] || { echo "run_scaling: $bin not built (--target mgs-replay)" >&2; exit 2; }
source bench/cluster/common.sh
[ -n "$out" ] || out=$(mktemp /tmp/scaling.XXXXXX.jsonl)
: > "$out"
tmp=$(mktemp -d /tmp/run_scaling.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export MGS_REPLAN_TOLERANCE=${MGS_REPLAN_TOLERANCE:-0}
# Tensors below MGS_MIN_SPARSE_ELEMENTS go dense: scaled with --scale-elements,
# so the same tensors stay sparse as at full size (4096 x scale).
escale=$(printf '%s\n' "${args[@]}" | awk 'p { print; exit } /^--scale-elements$/ { p = 1 }')
min_sparse=$(awk -v e="${escale:-1}" 'BEGIN { printf "%d", 4096 * e }')

echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; P=[$sizes] rate=$rate latency=$latency exchanges=[$exchanges] strategies=[$strategies]; args: ${args[*]}" >&2
for rep in $(seq 1 "$repeats"); do
  for P in $sizes; do
    for x in $exchanges; do
      vars=(MGS_REPLAN_TOLERANCE="$MGS_REPLAN_TOLERANCE" MGS_MIN_SPARSE_ELEMENTS="$min_sparse")
      if exchange_supported "$lib"; then
        vars+=(MGS_EXCHANGE="$x")
      elif [ "$x" != allgather ]; then
        echo "run_scaling: this libmgs has no MGS_EXCHANGE; skipping exchange '$x'" >&2
        continue
      fi
      for s in $strategies; do
        # One calibration per P (and setting), measured by the first run.
        run_one "$out" "scaling-P$P-$rate-$latency-$x-rep$rep" "$P" "$rate" "$latency" "${vars[@]}" -- \
          --strategy "$s" --calibration "$tmp/cal_P$P.json" "${args[@]}"
      done
    done
  done
done

# The calibrations, so the runs can be predicted again with a later model
# (bench/cluster/predict.py).
for P in $sizes; do
  if [ -f "$tmp/cal_P$P.json" ]; then echo "# calibration P=$P: $(tr -d '\n ' < "$tmp/cal_P$P.json")" >&2; fi
done

/usr/bin/python3 - "$out" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
groups = {}
for r in rows:
    groups.setdefault((r["ranks"], r.get("exchange", "allgather"), r["strategy"]), []).append(r)
print("| P | exchange | strategy | runs | median step ms | wire tx per rank per step (mean, max) KB | payload per rank per step KB | wire/payload | buckets per step | predicted ms (calibrated) | pred/meas |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for (P, x, s), rs in sorted(groups.items()):
    med = statistics.median(r["median_s"] for r in rs)
    tx = statistics.median(r["wire_tx_bytes_per_step_mean"] for r in rs)
    txm = max(r["wire_tx_bytes_per_step_max"] for r in rs)
    pay = statistics.median(r["payload_bytes_per_step"] for r in rs)
    pc = statistics.median(r["predicted_calibrated_s"] for r in rs)
    print("| %d | %s | %s | %d | %.1f | %.1f, %.1f | %.1f | %s | %g | %s | %s |" % (
        P, x, s, len(rs), med * 1e3, tx / 1e3, txm / 1e3, pay / 1e3, "%.1f" % (tx / pay) if pay > 0 and tx > 0 else "-",
        rs[0]["sparse_buckets_per_step"], "%.1f" % (pc * 1e3) if pc > 0 else "-", "%.2f" % (pc / med) if pc > 0 else "-"))
PY
echo "# JSON lines: $out" >&2
