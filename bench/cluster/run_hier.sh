#!/usr/bin/env bash
# The hierarchical exchange against the flat ones on the emulated cluster:
# H emulated hosts (one netns each, tc tbf rate, -l added latency per link)
# with R ranks per host (bench/cluster/mpirun_slots.sh, MGS_NODE_SIZE=R), so
# P = H x R ranks. For every H, exchange (MGS_EXCHANGE) and strategy, one
# mgs-replay run, with MGS_DENSE_FALLBACK=0 so every sparse bucket takes the
# named exchange. Reports the median step (max over ranks), the wire bytes on
# each host's link (eth0 inside its namespace: with R ranks per host every
# rank reads its host's counter, so the figure is per host, not per rank),
# and the calibrated prediction (which includes the node terms the runtime
# measures at init). The calibration of each (H, exchange) is logged as
# "# calibration P=...: {...}" lines for bench/cluster/predict.py.
#
# usage: bench/cluster/run_hier.sh [-b BUILD] [-H "8 16"] [-p RANKS_PER_HOST] [-r RATE] [-l LATENCY]
#            [-x "allgather agreed hierarchical"] [-S "single mgs"] [-R REPEATS] [-o OUT.jsonl]
#            -- [mgs-replay args]
#   defaults: -H "8 16" -p 2 -r 10gbit -l 0.5ms; replay args default to --steps 6
#   --profile-steps 3 --warmup 5 --scale-time 0.25 --scale-elements 0.01 --density 0.001
#   --sim-network 10gbe
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build
hosts_list="8 16"
per=2
rate=10gbit
latency=0.5ms
exchanges="allgather agreed hierarchical"
strategies="single mgs"
repeats=1
out=""
while getopts "b:H:p:r:l:x:S:R:o:h" opt; do
  case $opt in
    b) build=$OPTARG ;;
    H) hosts_list=$OPTARG ;;
    p) per=$OPTARG ;;
    r) rate=$OPTARG ;;
    l) latency=$OPTARG ;;
    x) exchanges=$OPTARG ;;
    S) strategies=$OPTARG ;;
    R) repeats=$OPTARG ;;
    o) out=$OPTARG ;;
    h) sed -n '2,20p' "$0"; exit 0 ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--steps 6 --profile-steps 3 --warmup 5 --scale-time 0.25 --scale-elements 0.01
  --density 0.001 --sim-network 10gbe)
bin=$PWD/$build/bench/mgs-replay
lib=$(find "$PWD/$build" -name "libmgs.so*" -type f 2>/dev/null | head -n 1)
[ -x "$bin" ] || { echo "run_hier: $bin not built (--target mgs-replay)" >&2; exit 2; }
grep -aq "MGS_NODE_SIZE" "$lib" || { echo "run_hier: $lib has no hierarchical exchange" >&2; exit 2; }
[ -n "$out" ] || out=$(mktemp /tmp/hier.XXXXXX.jsonl)
: > "$out"
tmp=$(mktemp -d /tmp/run_hier.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
escale=$(printf '%s\n' "${args[@]}" | awk 'p { print; exit } /^--scale-elements$/ { p = 1 }')
min_sparse=$(awk -v e="${escale:-1}" 'BEGIN { printf "%d", 4096 * e }')

echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; hosts=[$hosts_list] ranks/host=$per rate=$rate latency=$latency exchanges=[$exchanges] strategies=[$strategies]; args: ${args[*]}" >&2
for rep in $(seq 1 "$repeats"); do
  for H in $hosts_list; do
    P=$((H * per))
    for x in $exchanges; do
      vars=(MGS_REPLAN_TOLERANCE=0 MGS_MIN_SPARSE_ELEMENTS="$min_sparse" MGS_EXCHANGE="$x" MGS_DENSE_FALLBACK=0)
      fwd="-x OMP_NUM_THREADS"
      for v in "${vars[@]}"; do fwd+=" -x ${v%%=*}"; done
      for s in $strategies; do
        lab="hier-H$H-R$per-$rate-$latency-$x-rep$rep"
        log=$tmp/run.log
        if env "${vars[@]}" OMP_NUM_THREADS=1 scripts/emulated_cluster.sh -k -n "$H" -r "$rate" -l "$latency" -- \
            bench/cluster/mpirun_slots.sh "$per" "$fwd" "$bin" --label "$lab" --wire-iface eth0 --strategy "$s" \
            --calibration "$tmp/cal_P${P}_$x.json" "${args[@]}" > "$log" 2>&1; then
          grep '^{' "$log" >> "$out"
          tail -n 1 "$out" | cut -c1-160 >&2
        else
          echo "run failed ($lab, $s): $(tail -n 3 "$log")" >&2
        fi
      done
      if [ -f "$tmp/cal_P${P}_$x.json" ]; then
        echo "# calibration P=$P: $(tr -d '\n ' < "$tmp/cal_P${P}_$x.json")" >&2
      fi
    done
  done
done

/usr/bin/python3 - "$out" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
groups = {}
for r in rows:
    groups.setdefault((r["ranks"], r.get("exchange", "allgather"), r["strategy"]), []).append(r)
print("| P | exchange | strategy | runs | median step ms | wire tx per host per step (mean, max) KB | buckets per step | predicted ms (calibrated) | pred/meas |")
print("|---|---|---|---|---|---|---|---|---|")
for (P, x, s), rs in sorted(groups.items()):
    med = statistics.median(r["median_s"] for r in rs)
    tx = statistics.median(r["wire_tx_bytes_per_step_mean"] for r in rs)
    txm = max(r["wire_tx_bytes_per_step_max"] for r in rs)
    pc = statistics.median(r["predicted_calibrated_s"] for r in rs)
    print("| %d | %s | %s | %d | %.1f | %.1f, %.1f | %g | %s | %s |" % (
        P, x, s, len(rs), med * 1e3, tx / 1e3, txm / 1e3, rs[0]["sparse_buckets_per_step"],
        "%.1f" % (pc * 1e3) if pc > 0 else "-", "%.2f" % (pc / med) if pc > 0 else "-"))
PY
echo "# JSON lines: $out" >&2
