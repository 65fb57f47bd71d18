#!/bin/sh
# A plan file that does not fit the job is refused on every rank, naming the
# cause (issue 31, item 4):
#   plan_file_mismatch.sh MPIRUN TEST_BINARY WORKDIR
# A plan written at np 2 is refused by mgs_init at np 4 (another world size)
# and, at np 2, by the first sparse operation of a model with a layer of
# another size. Every rank must report the expected error.
set -eu
mpirun=$1 bin=$2 dir=$3
rm -rf "$dir"
mkdir -p "$dir"
plan="$dir/plan.json"
job="-x MGS_COMPRESSOR=gaussiank -x MGS_DENSITY=0.01 -x MGS_PLAN_FILE=$plan"
# shellcheck disable=SC2086
"$mpirun" -np 2 --oversubscribe --bind-to none $job -x MGS_PROFILE_STEPS=2 -x MGS_PLAN_TRIAL_STEPS=0 \
  "$bin" train "$dir/write.bin" 4 >"$dir/write.log" 2>&1 || { cat "$dir/write.log"; echo "FAILED: writing run"; exit 1; }
[ -s "$plan" ] || { echo "FAILED: no plan file written"; exit 1; }
cp "$plan" "$dir/plan.before"
expect() {  # expect NAME NP TEXT [MODEL]
  name=$1 np=$2 text=$3 model=${4:-base}
  # shellcheck disable=SC2086
  "$mpirun" -np "$np" --oversubscribe --bind-to none $job "$bin" expect_error "$text" 4 "$model" \
    >"$dir/$name.log" 2>&1 || { cat "$dir/$name.log"; echo "FAILED: $name: not every rank saw '$text'"; exit 1; }
  seen=$(grep -c "expected error" "$dir/$name.log" || true)
  [ "$seen" = "$np" ] || { cat "$dir/$name.log"; echo "FAILED: $name: $seen of $np ranks reported the error"; exit 1; }
  grep "^rank 0: expected error" "$dir/$name.log"
}
expect ranks 4 "does not fit this job: it was written by a job of 2 ranks, this job has 4"
expect model 2 "sparse tensor 'layer3.weight' has 50016 elements, the plan's has 50000" other
cmp -s "$plan" "$dir/plan.before" || { echo "FAILED: a refused plan file was changed"; exit 1; }
echo "PASSED: the plan file was refused on every rank, naming the cause"
