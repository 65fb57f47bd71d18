#!/usr/bin/env bash
# How much the cost model measured at init moves from one init to the next:
# N inits of a short replay on an emulated cluster, each with a fresh
# calibration, one line per init with the start-ups (the intercept of each
# table's first segment, ms), the negotiation round and allgather_overlap.
#
# usage: bench/cluster/calibration_spread.sh [-b BUILD] [-n HOSTS] [-r RATE] [-l LATENCY] [-N INITS] [-o OUT.jsonl]
#   defaults: build, 16 hosts, 10gbit, 0.5ms, 3 inits; -o also appends each calibration as a JSON line
# Needs root (scripts/emulated_cluster.sh). About 45 s an init at 16 hosts on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build hosts=16 rate=10gbit latency=0.5ms inits=3 out=""
while getopts "b:n:r:l:N:o:h" opt; do
  case $opt in
    b) build=$OPTARG ;;
    n) hosts=$OPTARG ;;
    r) rate=$OPTARG ;;
    l) latency=$OPTARG ;;
    N) inits=$OPTARG ;;
    o) out=$OPTARG ;;
    h) sed -n '2,9p' "$0"; exit 0 ;;
    *) exit 2 ;;
  esac
done
bin=$PWD/$build/bench/mgs-replay
[ -x "$bin" ] || { echo "calibration_spread: $bin not built (--target mgs-replay)" >&2; exit 2; }
tmp=$(mktemp -d /tmp/calibration_spread.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; hosts=$hosts rate=$rate latency=$latency"
for i in $(seq "$inits"); do
  cal=$tmp/cal_$i.json
  if ! MGS_REPLAN_TOLERANCE=0 OMP_NUM_THREADS=1 timeout 300 scripts/emulated_cluster.sh -n "$hosts" -r "$rate" \
      -l "$latency" -m "-x OMP_NUM_THREADS -x MGS_REPLAN_TOLERANCE" -- "$bin" --label calibration-spread \
      --wire-iface eth0 --strategy single --calibration "$cal" --steps 1 --warmup 1 --profile-steps 1 \
      --scale-time 0.25 --density 0.001 --scale-elements 0.01 > "$tmp/run_$i.log" 2>&1 || [ ! -s "$cal" ]; then
    echo "init $i failed: $(tail -n 3 "$tmp/run_$i.log")" >&2
    continue
  fi
  /usr/bin/python3 - "$cal" "$i" "$hosts" "$out" <<'EOF'
import json, sys
path, i, hosts, out = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
c = json.load(open(path))
first = lambda t: c[t]["segments"][0][1] * 1e3
print(f"init {i}: allgather {first('allgather'):.2f} ms, allreduce {first('allreduce'):.2f} ms, "
      f"round {c['negotiation_s'] * 1e3:.2f} ms, allgather_overlap {c.get('allgather_overlap', 1.0):.2f}")
if out:
    with open(out, "a") as f:
        f.write(json.dumps({"hosts": int(hosts), "init": int(i), "calibration": c}) + "\n")
EOF
done
