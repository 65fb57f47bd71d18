#!/usr/bin/env bash
# The merge planner where the MGS paper says it pays (allgather start-ups
# dominate): many emulated hosts, added link latency, a faster accelerator.
# Per repeat, one mgs-replay run each of
#   mgs          the MGS dynamic program (MGS_PLANNER=mgs)
#   layerwise    sparse, one bucket per tensor
#   fixed-<F>MB  sparse, buckets closed at F MB of gradient (MGS_PLANNER=fusion,
#                MGS_FUSION_THRESHOLD_BYTES), F swept over -F; F is in MB of the
#                full-size model: with --scale-elements E the threshold set is
#                E x F MiB, so the sweep cuts the scaled model where it would
#                cut the full one (F >= the model's size: one bucket)
#   mgs+replan   (with -T TOL) mgs with online re-planning at that tolerance
#   mgs-untried  (with -U) mgs with MGS_PLAN_TRIAL_STEPS=0: the DP plan as
#                computed, without the trials of candidate plans (mgs's default)
# With -D (dense: no compressor) the same three kinds of run are dense:
#   dense        what a dense job gets by default (strategy dense, fusion of
#                what is ready in a cycle up to MGS_FUSION_THRESHOLD_BYTES'
#                default, Horovod's 64 MiB, scaled with the model as the
#                fixed sizes are: 64 x E MiB, and the fusion threshold
#                trials around it: MGS_FUSION_TRIALS, the caller's or 1)
#   layerwise    dense, MGS_FUSION_THRESHOLD_BYTES=0 (no fusion)
#   fixed-<F>MB  dense, MGS_FUSION_THRESHOLD_BYTES = F MB (scaled as above),
#                MGS_FUSION_TRIALS=0 (F alone)
# in the same order every repeat, so slow drift hits all of them alike. With
# -C SETTING (layerwise or fixed-<F>MB) each repeat runs only the default and
# that setting, the default first on odd repeats and second on even ones: the
# sweep's check of the best fixed size it found (run_sweep.sh -C). One
# calibration, measured by the first run, reused by all (and by the
# predictions). Prints medians over repeats, the ratios the issue sets goals
# for (layer-wise / mgs >= 1.3, best fixed / mgs >= 1.05) per repeat and
# overall, and the calibrated prediction against the measurement.
#
# usage: bench/cluster/run_planner.sh [-b BUILD] [-n HOSTS] [-r RATE] [-l LATENCY] [-R REPEATS]
#            [-F "1 2 4 8 16 32 64 128"] [-e ELEMENT_SCALE] [-x EXCHANGE] [-T TOL] [-U] [-D]
#            [-C SETTING] [-o OUT.jsonl]
#            -- [mgs-replay args]
#   defaults: -n 16 -r 10gbit -l 0.5ms -R 3 -e 0.05; replay args default to --steps 10
#   --scale-time 0.25 --density 0.001 --sim-network 10gbe (plus --scale-elements E)
#   (ResNet-50 trace; --scale-time 0.25 is the "4x faster accelerator": every
#   forward and backward time divided by 4; -e 0.05 keeps 16 ranks' selection
#   work within what 2 shared cores can do, see docs/benchmarks.md)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build
hosts=16
rate=10gbit
latency=0.5ms
repeats=3
fixed="1 2 4 8 16 32 64 128"
escale=0.05
exchange=allgather
tol=""
untried=""
out=""
dense=""
confirm=""
while getopts "b:n:r:l:R:F:e:x:T:UDC:o:h" opt; do
  case $opt in
    b) build=$OPTARG ;;
    n) hosts=$OPTARG ;;
    r) rate=$OPTARG ;;
    l) latency=$OPTARG ;;
    R) repeats=$OPTARG ;;
    F) fixed=$OPTARG ;;
    e) escale=$OPTARG ;;
    x) exchange=$OPTARG ;;
    T) tol=$OPTARG ;;
    U) untried=1 ;;
    D) dense=1 ;;
    C) confirm=$OPTARG ;;
    o) out=$OPTARG ;;
    h) sed -n '2,38p' "$0"; exit 0 ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--steps 10 --scale-time 0.25 --density 0.001 --sim-network 10gbe)
args+=(--scale-elements "$escale")
bin=$PWD/$build/bench/mgs-replay
lib=$(find "$PWD/$build" -name "libmgs.so*" -type f 2>/dev/null | head -n 1)
[ -x "$bin" ] || { echo "run_planner: $bin not built (--target mgs-replay)" >&2; exit 2; }
source bench/cluster/common.sh
[ -n "$out" ] || out=$(mktemp /tmp/planner.XXXXXX.jsonl)
: > "$out"
tmp=$(mktemp -d /tmp/run_planner.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# Tensors below MGS_MIN_SPARSE_ELEMENTS go dense; scaled with the model, so
# the same tensors stay sparse as at full size (4096 x E).
min_sparse=$(awk -v e="$escale" 'BEGIN { printf "%d", 4096 * e }')
# Online re-planning off, so each run times one plan, unless the caller set
# MGS_REPLAN_TOLERANCE (the runtime's default is 0.15): then every run takes it.
base=(MGS_REPLAN_TOLERANCE="${MGS_REPLAN_TOLERANCE:-0}" MGS_MIN_SPARSE_ELEMENTS="$min_sparse")
# The model the runtime plans on, when the caller chose one (MGS_PLAN_MODEL).
[ -n "${MGS_PLAN_MODEL:-}" ] && base+=(MGS_PLAN_MODEL="$MGS_PLAN_MODEL")
if exchange_supported "$lib"; then
  base+=(MGS_EXCHANGE="$exchange")
elif [ "$exchange" != allgather ]; then
  echo "run_planner: this libmgs has no MGS_EXCHANGE (only the allgather exchange exists)" >&2
  exit 2
fi
cal=$tmp/calibration.json

# One run of each kind; LAB names the repeat.
run_default() {
  if [ -n "$dense" ]; then
    local default_bytes
    default_bytes=$(awk -v e="$escale" 'BEGIN { printf "%d", 64 * e * 1048576 }')
    run_one "$out" "$1" "$hosts" "$rate" "$latency" "${base[@]}" MGS_FUSION_THRESHOLD_BYTES="$default_bytes" \
      MGS_FUSION_TRIALS="${MGS_FUSION_TRIALS:-1}" -- \
      --strategy dense --calibration "$cal" "${args[@]}"
  else
    run_one "$out" "$1" "$hosts" "$rate" "$latency" "${base[@]}" -- --strategy mgs --calibration "$cal" "${args[@]}"
  fi
}
run_layerwise() {
  if [ -n "$dense" ]; then
    run_one "$out" "$1-layerwise" "$hosts" "$rate" "$latency" "${base[@]}" MGS_FUSION_THRESHOLD_BYTES=0 -- \
      --strategy dense --calibration "$cal" "${args[@]}"
  else
    run_one "$out" "$1" "$hosts" "$rate" "$latency" "${base[@]}" -- --strategy layerwise --calibration "$cal" "${args[@]}"
  fi
}
run_fixed() {  # LAB F
  local bytes
  bytes=$(awk -v f="$2" -v e="$escale" 'BEGIN { printf "%d", f * e * 1048576 }')
  run_one "$out" "$1-fixed${2}MB" "$hosts" "$rate" "$latency" "${base[@]}" MGS_FUSION_THRESHOLD_BYTES="$bytes" \
    MGS_FUSION_TRIALS=0 -- \
    --strategy "$([ -n "$dense" ] && echo dense || echo fusion)" --calibration "$cal" "${args[@]}"
}
run_named() {  # LAB NAME (layerwise | fixed-<F>MB)
  case $2 in
    layerwise) run_layerwise "$1" ;;
    fixed-*MB) local f=${2#fixed-}; run_fixed "$1" "${f%MB}" ;;
    *) echo "run_planner: -C takes layerwise or fixed-<F>MB, not $2" >&2; exit 2 ;;
  esac
}

echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; hosts=$hosts rate=$rate latency=$latency exchange=$exchange replan_tolerance=${MGS_REPLAN_TOLERANCE:-0} fusion_trials=${MGS_FUSION_TRIALS:-1} fixed=[$fixed] MB repeats=$repeats${confirm:+ confirm=$confirm}; args: ${args[*]}" >&2
for rep in $(seq 1 "$repeats"); do
  lab="planner-$hosts-$rate-$latency-$([ -n "$dense" ] && echo dense || echo "$exchange")-rep$rep"
  if [ -n "$confirm" ]; then
    # The default against one other setting, their order swapped every repeat.
    if [ $((rep % 2)) -eq 1 ]; then
      run_default "$lab"; run_named "$lab" "$confirm"
    else
      run_named "$lab" "$confirm"; run_default "$lab"
    fi
    continue
  fi
  run_default "$lab"
  run_layerwise "$lab"
  for f in $fixed; do run_fixed "$lab" "$f"; done
  [ -n "$dense" ] && continue
  if [ -n "$untried" ]; then
    run_one "$out" "$lab-untried" "$hosts" "$rate" "$latency" "${base[@]}" MGS_PLAN_TRIAL_STEPS=0 -- \
      --strategy mgs --calibration "$cal" "${args[@]}"
  fi
  if [ -n "$tol" ]; then
    run_one "$out" "$lab-replan$tol" "$hosts" "$rate" "$latency" "${base[@]/MGS_REPLAN_TOLERANCE=*/MGS_REPLAN_TOLERANCE=$tol}" -- \
      --strategy mgs --calibration "$cal" "${args[@]}"
  fi
done
[ -f "$cal" ] && echo "# calibration: $(tr -d '\n ' < "$cal")" >&2

/usr/bin/python3 - "$out" <<'PY'
import json, re, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
sys.path.insert(0, "bench/cluster")
from sweep_table import name  # noqa: E402  (one naming of runs for both tables)
def rep(r):
    return int(re.search(r"rep(\d+)", r["label"]).group(1))
by = {}
for r in rows:
    by.setdefault(name(r), {})[rep(r)] = r
print("| strategy | median step ms per repeat | median | buckets per step | predicted ms (calibrated) | pred/meas |")
print("|---|---|---|---|---|---|")
med = {}
for n, rs in by.items():
    ms = [rs[k]["median_s"] for k in sorted(rs)]
    med[n] = statistics.median(ms)
    pc = statistics.median(rs[k]["predicted_calibrated_s"] for k in rs)
    print("| %s | %s | %.1f | %g | %s | %s |" % (n, ", ".join("%.1f" % (m * 1e3) for m in ms), med[n] * 1e3,
          statistics.median(rs[k]["sparse_buckets_per_step"] for k in rs),
          "%.1f" % (pc * 1e3) if pc > 0 else "-", "%.2f" % (pc / med[n]) if pc > 0 else "-"))
fixed = [n for n in med if n.startswith("fixed-")]
default = "mgs" if "mgs" in med else "dense"
if default in med:
    m = med[default]
    if "layerwise" in med:
        per = [by["layerwise"][k]["median_s"] / by[default][k]["median_s"] for k in by[default] if k in by["layerwise"]]
        print(("\nlayer-wise / " + default + ": %.2fx (per repeat %s; goal >= 1.3x)") % (med["layerwise"] / m, ", ".join("%.2f" % p for p in per)))
    if fixed:
        best = min(fixed, key=lambda n: med[n])
        per = []
        for k in by[default]:
            fk = [by[n][k]["median_s"] for n in fixed if k in by[n]]
            if fk: per.append(min(fk) / by[default][k]["median_s"])
        print(("best fixed (%s) / " + default + ": %.3fx (per repeat, best fixed of that repeat: %s; goal >= 1.05x)") % (
            best, med[best] / m, ", ".join("%.3f" % p for p in per)))
PY
echo "# JSON lines: $out" >&2
