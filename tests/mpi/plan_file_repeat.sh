#!/bin/sh
# MGS_PLAN_FILE makes sparse runs repeat (issue 31, item 4):
#   plan_file_repeat.sh MPIRUN TEST_BINARY NP WORKDIR
# Run 1 plans as usual (profile, trials, re-planning) and saves its plan;
# runs 2 and 3 read it and must end with bitwise-identical weights, having
# made no plan or trial of their own.
#   plan_file_repeat.sh --spread MPIRUN TEST_BINARY NP WORKDIR
# Two runs with the defaults (no plan file): reports how far their weights
# differ (it asserts nothing about the spread: the plans may even coincide).
set -eu
spread=0
if [ "$1" = "--spread" ]; then spread=1; shift; fi
mpirun=$1 bin=$2 np=$3 dir=$4
rm -rf "$dir"
mkdir -p "$dir"
# Every bucket sparse (no dense fallback), so that the plan decides what is sent.
job="-x MGS_COMPRESSOR=gaussiank -x MGS_DENSITY=0.01 -x MGS_DENSE_FALLBACK=0"
run() {  # run NAME [mpirun -x options...]
  name=$1
  shift
  # shellcheck disable=SC2086
  "$mpirun" -np "$np" --oversubscribe --bind-to none $job "$@" "$bin" train "$dir/$name.bin" 40 >"$dir/$name.log" 2>&1 || {
    cat "$dir/$name.log"
    echo "FAILED: run $name"
    exit 1
  }
  grep "weights fnv1a64" "$dir/$name.log" | sed "s/^/$name: /"
}
if [ "$spread" = 1 ]; then
  run default1
  run default2
  echo "spread of two runs with the defaults, np $np:"
  "$bin" compare "$dir/default1.bin" "$dir/default2.bin" || true
  exit 0
fi
plan="$dir/plan.json"
run write -x MGS_PLAN_FILE="$plan"
[ -s "$plan" ] || { echo "FAILED: run 1 did not write $plan"; exit 1; }
ls "$dir" | grep -q '\.tmp\.' && { echo "FAILED: a temporary plan file was left behind"; exit 1; }
run read1 -x MGS_PLAN_FILE="$plan"
run read2 -x MGS_PLAN_FILE="$plan"
for r in read1 read2; do
  grep -q "plans 1, buckets [1-9][0-9]*, plan trials 0" "$dir/$r.log" || {
    echo "FAILED: run $r planned or tried plans of its own:"
    grep "weights fnv1a64" "$dir/$r.log"
    exit 1
  }
done
echo "the writing run against the first reading run:"
"$bin" compare "$dir/write.bin" "$dir/read1.bin" || true
echo "the two reading runs:"
"$bin" compare "$dir/read1.bin" "$dir/read2.bin" || { echo "FAILED: two runs with the same plan file differ"; exit 1; }
echo "PASSED: two runs with the same plan file ended with bitwise-identical weights (np $np)"
