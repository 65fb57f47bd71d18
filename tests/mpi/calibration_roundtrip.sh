#!/usr/bin/env bash
# A calibration saved by the runtime is read by mgs-plan (one cost-model file
# format, issue #12), and a corrupt one fails mgs_init on every rank with a
# message naming MGS_CALIBRATION and the field.
#   calibration_roundtrip.sh <mpirun> <mgs_mpi_test> <mgs-plan> <instance.json> <workdir>
set -uo pipefail
mpirun=$1 mpi_test=$2 plan=$3 instance=$4 dir=$5
mkdir -p "$dir"
file="$dir/calibration.json"
rm -f "$file"
fail() { echo "FAIL: $*" >&2; exit 1; }
run() { "$mpirun" -np 2 --oversubscribe --bind-to none -x MGS_COMPRESSOR=topk -x MGS_DENSITY=0.01 \
          -x MGS_CALIBRATION="$file" -x MGS_LOG_LEVEL="${log_level:-warn}" "$mpi_test" allreduce 2>&1; }

# 1. Measured at init on 2 ranks and saved by rank 0; at MGS_LOG_LEVEL=info
#    rank 0 (only) says what the calibration took and what it measured:
#    init logs at the job's level.
out=$(log_level=info run) || fail "job with MGS_CALIBRATION=$file failed: $out"
[ -s "$file" ] || fail "the runtime did not save $file"
n=$(echo "$out" | grep -c '\[mgs rank 0\] \[info\] cost model calibrated in [0-9.]* s on 2 ranks: allreduces')
[ "$n" -eq 1 ] || fail "expected rank 0's calibration time once at info, got $n: $out"
n=$(echo "$out" | grep -c 'cost model calibrated in')
[ "$n" -eq 1 ] || fail "the calibration time is logged by rank 0 only, got $n lines: $out"
n=$(echo "$out" | grep -c "\[mgs rank 0\] \[info\] cost model ($file): {")
[ "$n" -eq 1 ] || fail "expected rank 0's cost model line once at info, got $n: $out"
grep -q '"format": "mgs-cost-model"' "$file" || fail "saved file lacks the format tag: $(cat "$file")"
# The overlap of allgathers in flight together is measured, a fraction.
overlap=$(sed -n 's/.*"allgather_overlap": *\([0-9.eE+-]*\).*/\1/p' "$file")
[ -n "$overlap" ] || fail "saved file has no allgather_overlap: $(cat "$file")"
awk -v o="$overlap" 'BEGIN { exit !(o >= 0 && o <= 1) }' || fail "allgather_overlap $overlap outside [0, 1]"
echo "measured allgather_overlap $overlap"

# 2. mgs-plan plans with it.
plan_out=$("$plan" --input "$instance" --cost-model "$file" 2>&1) || fail "mgs-plan rejected the saved file: $plan_out"
echo "$plan_out" | grep -q '"groups":\[\[' || fail "mgs-plan printed no plan: $plan_out"
echo "$plan_out" | grep -q '"model":"sparse"' || fail "expected a sparse plan: $plan_out"

# 3. The runtime loads the saved file again (no re-measure, same bytes).
before=$(cksum < "$file")
out=$(run) || fail "job loading $file failed: $out"
[ "$(cksum < "$file")" = "$before" ] || fail "the runtime rewrote $file instead of loading it"

# 4. A malformed file: every rank reports it, naming the variable and the field.
sed -i 's/"workers": 2/"workers": "two"/' "$file"
grep -q '"workers": "two"' "$file" || fail "could not corrupt $file"
out=$(run) && fail "mgs_init accepted a corrupt calibration: $out"
n=$(echo "$out" | grep -c "MGS_CALIBRATION='$file': workers: expected an integer, got string")
[ "$n" -eq 2 ] || fail "expected the error on both ranks, got $n: $out"
plan_out=$("$plan" --input "$instance" --cost-model "$file" 2>&1) && fail "mgs-plan accepted it: $plan_out"
echo "$plan_out" | grep -q "workers: expected an integer" || fail "mgs-plan's error does not name the field: $plan_out"
echo "PASSED: saved, planned with, reloaded, and a corrupt copy refused on every rank"
