#!/usr/bin/env bash
# The planner sweep's timing window and table (ctest scripts.bench_sweep):
#   * mgs-replay at np 2 with its default warm-up times the plan the trials
#     kept: candidates ran on trial (plan_trials >= 2) and none of them in the
#     timed steps; with --warmup 5 the timed steps fall inside the trials, the
#     JSON line says so and rank 0 warns;
#   * mgs-replay with and without --no-step-barrier: step_barrier and
#     period_s in its JSON line (without the barrier, rank 0's wall time per
#     step at most the longest step);
#   * mgs-replay --enqueue-times: one enqueue time per tensor on rank 0 and
#     everywhere, each from its first (0), in enqueue order, the last about
#     the trace's backward; the JSON line has neither field without it;
#   * bench/cluster/sweep_table.py on made-up cells: a sparse cell timed in
#     its trials is sent to the check whatever its ratio and shows only the
#     check's figures; a cell within 3% is not checked; a dense cell whose
#     best is 64 MB (the default itself) is not checked, unless its default
#     tried fusion thresholds: then it is checked and its row is the check's;
#     the goal count.
#   tests/scripts/bench_sweep_test.sh BUILD_DIR [REPO_ROOT]
set -u
build=$(cd "$1" && pwd)
root=$(cd "${2:-$(dirname "$0")/../..}" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAILED: $*"; fails=$((fails + 1)); }
cd "$root"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
field() { # JSONL FIELD
  "$py" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())[sys.argv[2]])' "$1" "$2"
}

replay() { # OUT ARGS...
  local out=$1
  shift
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MGS_CALIBRATION=off \
    mpirun --oversubscribe --bind-to none -np 2 -x MGS_CALIBRATION \
    "$build/bench/mgs-replay" --trace tools/traces/resnet50.json --scale-elements 0.002 --scale-time 0.02 \
    --profile-steps 3 --steps 2 --density 0.01 "$@" > "$out" 2> "$out.err"
}

if replay "$tmp/default.out"; then
  grep '^{' "$tmp/default.out" > "$tmp/default.jsonl"
  trials=$(field "$tmp/default.jsonl" plan_trials)
  timed=$(field "$tmp/default.jsonl" plan_trials_in_timed_steps)
  warm=$(field "$tmp/default.jsonl" warmup)
  if [ "$trials" -ge 2 ] && [ "$timed" = 0 ] && [ "$warm" = 42 ]; then
    ok "default warm-up (42 steps) covers the $trials candidates' trials"
  else
    bad "default warm-up: warmup $warm, plan_trials $trials, in timed steps $timed"
  fi
  grep -q "first ran on trial during the timed steps" "$tmp/default.out.err" &&
    bad "a warning about trials with the default warm-up"
else
  bad "mgs-replay with its default warm-up failed: $(tail -n 3 "$tmp/default.out.err")"
fi
if replay "$tmp/short.out" --warmup 5; then
  grep '^{' "$tmp/short.out" > "$tmp/short.jsonl"
  timed=$(field "$tmp/short.jsonl" plan_trials_in_timed_steps)
  if [ "$timed" -ge 1 ] && grep -q "first ran on trial during the timed steps" "$tmp/short.out.err"; then
    ok "--warmup 5 times $timed candidates' trials and says so"
  else
    bad "--warmup 5: plan_trials_in_timed_steps $timed, warning: $(grep -c 'on trial' "$tmp/short.out.err")"
  fi
else
  bad "mgs-replay --warmup 5 failed: $(tail -n 3 "$tmp/short.out.err")"
fi

# The step barrier: by default every step starts after one (left out of the
# step times, in period_s); --no-step-barrier runs the steps back to back, so
# rank 0's wall time per step is its own mean step, at most the longest step
# of any rank.
for mode in barrier no-barrier; do
  flag=()
  [ "$mode" = no-barrier ] && flag=(--no-step-barrier)
  if replay "$tmp/$mode.out" --warmup 3 "${flag[@]}"; then
    grep '^{' "$tmp/$mode.out" > "$tmp/$mode.jsonl"
    got=$(field "$tmp/$mode.jsonl" step_barrier)
    want=True
    [ "$mode" = no-barrier ] && want=False
    period=$(field "$tmp/$mode.jsonl" period_s)
    longest=$(field "$tmp/$mode.jsonl" max_s)
    if [ "$got" = "$want" ] && "$py" -c "import sys; p, m = map(float, sys.argv[1:]); sys.exit(not (p > 0 and
        ('$mode' == 'barrier' or p <= 1.05 * m)))" "$period" "$longest"; then
      ok "$mode: step_barrier $got, period_s $period s (longest step $longest s)"
    else
      bad "$mode: step_barrier $got (want $want), period_s $period, max_s $longest"
    fi
  else
    bad "mgs-replay ${flag[*]} failed: $(tail -n 3 "$tmp/$mode.out.err")"
  fi
done

# Enqueue times: rank 0's own and everywhere's (the last rank's), per tensor.
if replay "$tmp/enq.out" --warmup 3 --enqueue-times; then
  grep '^{' "$tmp/enq.out" > "$tmp/enq.jsonl"
  if "$py" - "$tmp/enq.jsonl" "$tmp/barrier.jsonl" <<'PY'; then
import json, sys
r = json.loads(open(sys.argv[1]).readline())
plain = json.loads(open(sys.argv[2]).readline())
back_ms = r["backward_s"] * 1e3
for key in ("enqueue_rank0_ms", "enqueue_everywhere_ms"):
    v = r[key]
    assert len(v) == r["tensors"], (key, len(v), r["tensors"])
    assert v[0] == 0, (key, v[0])
    assert all(b >= a for a, b in zip(v, v[1:])), (key, "not in enqueue order")
    assert 0.3 * back_ms <= v[-1] <= back_ms + 100, (key, v[-1], back_ms)
    assert key not in plain, (key, "without the flag")
print("ok: --enqueue-times: %d tensors, last %.1f ms (rank 0) and %.1f ms (everywhere) of %.1f ms of backward" %
      (r["tensors"], r["enqueue_rank0_ms"][-1], r["enqueue_everywhere_ms"][-1], back_ms))
PY
    :
  else
    bad "--enqueue-times: the fields above"
  fi
else
  bad "mgs-replay --enqueue-times failed: $(tail -n 3 "$tmp/enq.out.err")"
fi

# Made-up sweep cells: one JSON line per run, as run_planner.sh writes them.
row_is() { # GREP EXPECTED OK-MESSAGE WHAT: the table's row matching GREP is EXPECTED
  local row
  row=$("$py" bench/cluster/sweep_table.py "$s" | grep -F "$1")
  if [ "$row" = "$2" ]; then ok "$3"; else bad "$4: $row"; fi
}
line() { # STRATEGY LABEL MEDIAN_MS [WARMUP [TRIALS_IN_TIMED]]
  printf '{"strategy":"%s","label":"%s","median_s":%s,"warmup":%s%s}\n' "$1" "$2" \
    "$(awk -v m="$3" 'BEGIN { print m / 1000 }')" "${4:-26}" "${5:+,\"plan_trials_in_timed_steps\":$5}"
}
s=$tmp/sweep
mkdir -p "$s/confirm"
{ # sparse, its default timed in trials (an old line: warmup 5, no field), ratio 1.10 in the sweep
  line mgs p-rep1 110 5; line layerwise p-rep1 300; line fusion p-rep1-fixed4MB 100; line fusion p-rep1-fixed64MB 105
} > "$s/resnet50_10gbit_0.01_4.jsonl"
{ # sparse, timed after its trials, within 3%
  line mgs p-rep1 101 26 0; line layerwise p-rep1 300; line fusion p-rep1-fixed4MB 100; line fusion p-rep1-fixed64MB 120
} > "$s/resnet50_10gbit_0.001_4.jsonl"
{ # dense, best is the default's own 64 MB
  line dense p-dense-rep1 100 5; line dense p-dense-rep1-layerwise 130 5; line dense p-dense-rep1-fixed64MB 98 5
  line dense p-dense-rep1-fixed4MB 110 5
} > "$s/resnet50_10gbit_dense_4.jsonl"
got=$("$py" bench/cluster/sweep_table.py --to-confirm "$s/resnet50_10gbit_0.01_4.jsonl")
[ "$got" = fixed-4MB ] && ok "a cell timed in trials is checked" || bad "trials cell: to-confirm '$got'"
got=$("$py" bench/cluster/sweep_table.py --to-confirm "$s/resnet50_10gbit_0.001_4.jsonl")
[ -z "$got" ] && ok "a cell within 3% is not checked" || bad "cell within 3%: to-confirm '$got'"
got=$("$py" bench/cluster/sweep_table.py --to-confirm "$s/resnet50_10gbit_dense_4.jsonl")
[ -z "$got" ] && ok "a dense cell whose best is 64 MB is not checked" || bad "dense 64 MB: to-confirm '$got'"
table=$("$py" bench/cluster/sweep_table.py "$s")
echo "$table" | grep -q "| 0.01 | 4 | - | fixed-4MB | 100.0 | timed in trials |" &&
  ok "without its check the trials cell shows no ratio" || bad "trials cell without a check: $table"
# The check: default 102 and 98 ms, fixed-4MB 100 and 100 ms (order swapped).
{ line mgs p-rep1 102 26 0; line fusion p-rep1-fixed4MB 100; line fusion p-rep2-fixed4MB 100; line mgs p-rep2 98 26 0; } \
  > "$s/confirm/resnet50_10gbit_0.01_4.jsonl"
# default 100 ms on the check: 64 MB's 105 over it, layer-wise 300 over it.
# Pair ratios 1.02 and 0.98: geometric mean 1.000, 90% t-interval (1 degree of freedom) 0.88-1.13.
row_is "| 0.01 | 4 |" "| resnet50 | 10 Gbit/s | 0.01 | 4 | 100.0 | fixed-4MB | 100.0 | - | 1.000 (2 pairs; 0.88-1.13) | 1.05 | - | 3.00 |" \
  "the checked cell takes the check's default" "checked row"
table=$("$py" bench/cluster/sweep_table.py "$s")
echo "$table" | grep -q "every cell): 3 of 3 cells, by the checked ratio where a cell has one; by the sweep's own ratio 2 of the 2 cells" &&
  ok "goal count with the checks" || bad "goal count: $(echo "$table" | tail -n 2)"
echo "$table" | grep -q "above 1.03 (shown to miss) 0; at most 1.03 (shown within) 0; spanning 1.03 (more pairs needed) 1: resnet50 10gbit 0.01 4$" &&
  ok "a check of two pairs 4% apart does not resolve 3%" || bad "interval verdicts: $(echo "$table" | tail -n 1)"
# A dense cell checked against 16 MB: pairs 1.10, 1.12, 1.11 (default first on odd repeats) are shown to
# miss; a sparse one with pairs 1.00, 1.01, 1.00, 1.01 is shown within.
{
  line dense p-dense-rep1 100 5; line dense p-dense-rep1-layerwise 130 5; line dense p-dense-rep1-fixed64MB 100 5
  line dense p-dense-rep1-fixed16MB 90 5
} > "$s/bert_base_1gbit_dense_16.jsonl"
{
  line dense p-dense-rep1 110 5; line dense p-dense-rep1-fixed16MB 100 5; line dense p-dense-rep2-fixed16MB 100 5
  line dense p-dense-rep2 112 5; line dense p-dense-rep3 111 5; line dense p-dense-rep3-fixed16MB 100 5
} > "$s/confirm/bert_base_1gbit_dense_16.jsonl"
{ line mgs p-rep1 101 26 0; line layerwise p-rep1 300; line fusion p-rep1-fixed4MB 100; } > "$s/bert_base_1gbit_0.001_16.jsonl"
{
  line mgs p-rep1 100 26 0; line fusion p-rep1-fixed4MB 100; line fusion p-rep2-fixed4MB 100; line mgs p-rep2 101 26 0
  line mgs p-rep3 100 26 0; line fusion p-rep3-fixed4MB 100; line fusion p-rep4-fixed4MB 100; line mgs p-rep4 101 26 0
} > "$s/confirm/bert_base_1gbit_0.001_16.jsonl"
table=$("$py" bench/cluster/sweep_table.py "$s")
echo "$table" | grep -q "| bert_base | 1 Gbit/s | dense | 16 | 100.0 | fixed-16MB | 90.0 | 1.111 | 1.110 (3 pairs; 1.09-1.13) |" &&
  ok "a dense cell's check: the pairs' geometric mean and interval" || bad "dense check row: $(echo "$table" | grep dense)"
echo "$table" | grep -q "above 1.03 (shown to miss) 1: bert_base 1gbit dense 16; at most 1.03 (shown within) 1; spanning 1.03 (more pairs needed) 1: resnet50 10gbit 0.01 4$" &&
  ok "interval verdicts: one shown to miss, one shown within, one unresolved" || bad "interval verdicts: $(echo "$table" | tail -n 1)"
# A dense default that tried fusion thresholds (planner.md 7c) is not 64 MB any more: its cell is checked
# whatever its ratio, against 64 MB too, and the row takes the check's default (pairs 0.99 and 0.97).
tline() { # LABEL MEDIAN_MS: a dense default run that tried 4 thresholds, after --warmup 5
  printf '{"strategy":"dense","label":"%s","median_s":%s,"warmup":5,"fusion_trials":4}\n' "$1" \
    "$(awk -v m="$2" 'BEGIN { print m / 1000 }')"
}
{
  tline p-dense-rep1 100; line dense p-dense-rep1-layerwise 130 5; line dense p-dense-rep1-fixed64MB 98 5
  line dense p-dense-rep1-fixed4MB 110 5
} > "$s/resnet50_1gbit_dense_8.jsonl"
got=$("$py" bench/cluster/sweep_table.py --to-confirm "$s/resnet50_1gbit_dense_8.jsonl")
[ "$got" = fixed-64MB ] && ok "a dense cell whose default tried thresholds is checked, against 64 MB too" ||
  bad "dense cell with trials: to-confirm '$got'"
{
  tline p-dense-rep1 99; line dense p-dense-rep1-fixed64MB 100 5; line dense p-dense-rep2-fixed64MB 100 5
  tline p-dense-rep2 97
} > "$s/confirm/resnet50_1gbit_dense_8.jsonl"
row_is "| 1 Gbit/s | dense | 8 |" "| resnet50 | 1 Gbit/s | dense | 8 | 98.0 | fixed-64MB | 100.0 | - | 0.980 (2 pairs; 0.92-1.05) | 1.02 | - | 1.35 |" \
  "a dense cell checked with its trials takes the check's default; 64 MB is a setting of its own" "dense row with trials"

[ "$fails" = 0 ] && echo "bench_sweep: all passed" || echo "bench_sweep: $fails failed"
[ "$fails" = 0 ]
