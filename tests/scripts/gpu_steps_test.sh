#!/usr/bin/env bash
# CPU test of the GPU scripts' step machinery (scripts/lib/gpu_steps.sh) and
# of the scripts' refusal to pass without a GPU (ctest scripts.gpu_steps):
#   * bash -n of every scripts/*.sh and scripts/lib/*.sh;
#   * fake steps: passing, failing, past its cap (TIMEOUT, its process group
#     killed), skipped by the deadline, a missing tool, an expected ctest
#     test not registered, a skipped ctest test, a step after a failed one,
#     a step that skips itself: the exact lines (seconds aside), the logs
#     under OUT, steps.txt, the verdict and the exit status;
#   * all passing gives PASS (0), only skips INCOMPLETE (2);
#   * gpu_smoke.sh and gpu_session.sh part1 where nvidia-smi lists no GPU:
#     FAIL at the first step, in seconds, having built nothing;
#   * the test file a failed python.np2 names (its crash reruns take it);
#   * scripts/lib/ncu_summary.py on a made-up Nsight Compute CSV.
#   tests/scripts/gpu_steps_test.sh [REPO_ROOT]
set -u
root=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
tmp=$(mktemp -d)
trap '[ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAILED: $*"; fails=$((fails + 1)); }
check() { # DESCRIPTION EXPECTED ACTUAL
  if [ "$2" = "$3" ]; then ok "$1"; else
    bad "$1"
    diff <(printf '%s\n' "$2") <(printf '%s\n' "$3") | sed 's/^/    /'
  fi
}
# Step lines with their seconds as N (the only part that varies).
norm() { sed -E 's/ \([0-9]+ s\)/ (N s)/; s/[0-9]+ s left of/T s left of/'; }

# --- syntax -------------------------------------------------------------------
for f in "$root"/scripts/*.sh "$root"/scripts/lib/*.sh; do
  bash -n "$f" 2> "$tmp/syntax" || { bad "bash -n $f: $(cat "$tmp/syntax")"; continue; }
done
ok "bash -n of scripts/*.sh and scripts/lib/*.sh"

# --- a run of fake steps ------------------------------------------------------
ctdir=$tmp/ctest
mkdir -p "$ctdir"
cat > "$ctdir/CTestTestfile.cmake" << 'EOF'
add_test(alpha "/bin/sh" "-c" "exit 0")
add_test(skipper "/bin/sh" "-c" "exit 77")
set_tests_properties(skipper PROPERTIES SKIP_RETURN_CODE 77)
EOF
cat > "$tmp/run.sh" << EOF
set -u
. "$root/scripts/lib/gpu_steps.sh"
passing() { echo "hello from passing"; }
failing() { echo "about to fail"; gs_reason "broken on purpose"; return 1; }
slow() { sleep 30 & echo \$! > "$tmp/slow.pid"; wait; }
self_skip() { gs_reason "nothing to do here"; return \$GS_SKIP; }
gs_init fake 100
gs_step passing 5 passing
gs_step failing 5 failing
gs_step slow 1 slow
gs_step too_long 1000 passing
gs_step -n gs-no-such-tool missing_tool 5 passing
gs_step unregistered 10 gs_registered "$ctdir" alpha gamma
gs_step registered 10 gs_registered "$ctdir" alpha skipper
gs_step ctest_pass 20 gs_ctest "$ctdir" 10 alpha
gs_step ctest_skipped 20 gs_ctest "$ctdir" 10 alpha skipper
gs_step -a failing after_failing 5 passing
gs_step self_skip 5 self_skip
gs_finish
EOF
t0=$SECONDS
OUT=$tmp/out GPU_DEADLINE=60 bash "$tmp/run.sh" > "$tmp/run.out" 2>&1
rc=$?
took=$((SECONDS - t0))
check "fake run: exit status 1 (FAIL)" 1 "$rc"
expected="PASS     passing (N s)
FAIL     failing (N s): broken on purpose; see 02_failing.log
TIMEOUT  slow (N s): cap 1 s reached; see 03_slow.log
SKIPPED  too_long (N s): deadline: T s left of 60, the step's cap is 1000 s
FAIL     missing_tool (N s): gs-no-such-tool not found (PATH and /usr/local/cuda/bin)
FAIL     unregistered (N s): not registered in $ctdir: gamma; see 06_unregistered.log
PASS     registered (N s)
PASS     ctest_pass (N s)
FAIL     ctest_skipped (N s): did not pass: skipper (Skipped); see 09_ctest_skipped.log
SKIPPED  after_failing (N s): needs failing; failing FAIL: broken on purpose
SKIPPED  self_skip (N s): nothing to do here"
check "fake run: the step lines as printed" "$expected" "$(grep -E '^(PASS|FAIL|TIMEOUT|SKIPPED) ' "$tmp/run.out" | head -11 | norm)"
check "fake run: steps.txt holds the same lines" "$expected" "$(norm < "$tmp/out/steps.txt")"
verdict="VERDICT fake: FAIL (11 steps: 3 passed, 4 failed, 1 timed out, 3 skipped; "
last=$(tail -1 "$tmp/run.out")
check "fake run: the verdict is the last line" "$verdict" "${last:0:${#verdict}}"
check "fake run: verdict.txt" "$last" "$(cat "$tmp/out/verdict.txt")"
check "fake run: the passing step's log" "hello from passing" "$(cat "$tmp/out/01_passing.log")"
check "fake run: the failing step's log" "about to fail" "$(cat "$tmp/out/02_failing.log")"
grep -q "^  | about to fail" "$tmp/run.out" && ok "fake run: the failed step's last log lines are shown" ||
  bad "fake run: the failed step's log lines are not shown"
[ -f "$tmp/out/03_slow.log" ] && ok "fake run: the timed-out step has its log" || bad "no 03_slow.log"
# Gone, or a zombie its new parent has not reaped yet.
alive() { local st; st=$(ps -o stat= -p "$1" 2> /dev/null); [ -n "$st" ] && [ "${st:0:1}" != Z ]; }
pid=$(cat "$tmp/slow.pid" 2> /dev/null)
if [ -z "$pid" ]; then
  bad "fake run: the timed-out step did not start its child"
elif alive "$pid"; then
  bad "fake run: the timed-out step's child is still running"
  kill "$pid"
else
  ok "fake run: the timed-out step's process group was killed"
fi
[ ! -e "$tmp/out/current_step.txt" ] && ok "fake run: no current_step.txt left" || bad "current_step.txt left behind"
[ "$took" -le 12 ] && ok "fake run: took $took s" || bad "fake run took $took s"

# --- verdicts: all passed, only skipped, nothing ran ----------------------------
cat > "$tmp/pass.sh" << EOF
. "$root/scripts/lib/gpu_steps.sh"
gs_init fine 100
gs_step one 5 true
gs_step two 5 true
gs_finish
EOF
OUT=$tmp/pass bash "$tmp/pass.sh" > "$tmp/pass.out" 2>&1
check "all passing: exit status 0" 0 $?
check "all passing: verdict" "VERDICT fine: PASS (2 steps: 2 passed, 0 failed, 0 timed out, 0 skipped;" \
  "$(tail -1 "$tmp/pass.out" | cut -d' ' -f1-14)"
cat > "$tmp/skip.sh" << EOF
. "$root/scripts/lib/gpu_steps.sh"
gs_init partly 100
gs_step one 5 true
gs_step big 500 true
gs_finish
EOF
OUT=$tmp/skip GPU_DEADLINE=50 bash "$tmp/skip.sh" > "$tmp/skip.out" 2>&1
check "a skipped step: exit status 2" 2 $?
check "a skipped step: verdict INCOMPLETE" "VERDICT partly: INCOMPLETE" "$(tail -1 "$tmp/skip.out" | cut -d' ' -f1-3)"
cat > "$tmp/none.sh" << EOF
. "$root/scripts/lib/gpu_steps.sh"
gs_init empty 100
gs_finish
EOF
OUT=$tmp/none bash "$tmp/none.sh" > "$tmp/none.out" 2>&1
check "no step ran: exit status 1" 1 $?

# --- the GPU scripts without a GPU ----------------------------------------------
# nvidia-smi that finds no GPU (as on a machine without a driver); the same
# on a machine that has one, so that this test never starts a build.
mkdir -p "$tmp/bin"
printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver."\nexit 9\n' \
  > "$tmp/bin/nvidia-smi"
chmod +x "$tmp/bin/nvidia-smi"
for script in "gpu_smoke.sh" "gpu_session.sh part1"; do
  t0=$SECONDS
  # shellcheck disable=SC2086
  PATH=$tmp/bin:$PATH OUT=$tmp/${script%% *} GPU_BUILD_DIR=$tmp/b1 GPU_FULL_BUILD_DIR=$tmp/b2 \
    timeout 60 bash "$root/scripts/"$script > "$tmp/gpu.out" 2>&1
  rc=$?
  took=$((SECONDS - t0))
  check "$script without a GPU: exit status 1" 1 "$rc"
  check "$script without a GPU: verdict FAIL" "VERDICT" "$(tail -1 "$tmp/gpu.out" | cut -d' ' -f1)"
  tail -1 "$tmp/gpu.out" | grep -q ": FAIL (" && ok "$script: FAIL verdict" || bad "$script verdict: $(tail -1 "$tmp/gpu.out")"
  check "$script without a GPU: the probe fails first" \
    "FAIL     probe (N s): no GPU: nvidia-smi lists none (NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.); see 01_probe.log" \
    "$(head -1 "$tmp/${script%% *}/steps.txt" | norm)"
  n_skipped=$(grep -c "^SKIPPED .*: no usable GPU (probe FAIL)$" "$tmp/${script%% *}/steps.txt")
  n_all=$(wc -l < "$tmp/${script%% *}/steps.txt")
  check "$script without a GPU: every other step SKIPPED" "$((n_all - 1))" "$n_skipped"
  [ ! -e "$tmp/b1" ] && [ ! -e "$tmp/b2" ] && ok "$script: nothing built" || bad "$script made a build folder"
  [ "$took" -le 20 ] && ok "$script: took $took s" || bad "$script took $took s"
  grep -q PASS "$tmp/${script%% *}/verdict.txt" && bad "$script: PASS in verdict.txt"
done

# --- the file python.np2 failed in (gpu_full_check.sh's crash reruns) ----------
printf '%s\n' '....F' 'FAILED test_objects.py::test_broadcast_object[2] - AssertionError' > "$tmp/np2_failed.log"
printf '%s\n' 'Fatal Python error: Segmentation fault' '' 'Thread 0x00007f (most recent call first):' \
  '  File "/usr/lib/python3/dist-packages/torch/functional.py", line 10 in f' \
  '  File "/repo/tests/python/test_collectives.py", line 88 in test_allreduce_in_place' \
  '  File "/repo/tests/python/conftest.py", line 5 in fixture' > "$tmp/np2_crash.log"
printf '%s\n' 'something else went wrong' > "$tmp/np2_other.log"
got=$(bash -c '. "$1/scripts/gpu_full_check.sh"; for f in "${@:2}"; do echo "[$(full_failing_file "$f")]"; done' _ \
  "$root" "$tmp/np2_failed.log" "$tmp/np2_crash.log" "$tmp/np2_other.log")
check "the failing test file: from FAILED, from a crash's stack, none" "[test_objects]
[test_collectives]
[]" "$got"

# --- ncu_summary.py --------------------------------------------------------------
{
  echo '"ID","Kernel Name","Grid Size","Metric Name","Metric Unit","Metric Value"'
  i=0
  for shape in per-pass per-pass one-launch one-launch; do
    for k in initKernel fusedKernel; do
      echo "\"$i\",\"void mgs::cuda::$k<float>(int)\",\"(1, 1, 1)\",\"gpu__time_duration.sum\",\"ns\",\"1,000\""
      i=$((i + 1))
    done
    [ $shape = per-pass ] && k=passKernel || k=passLoopKernel
    echo "\"$i\",\"void mgs::cuda::$k(int)\",\"(2, 1, 1)\",\"gpu__time_duration.sum\",\"ns\",\"2500\""
    i=$((i + 1))
  done
} > "$tmp/ncu.csv"
if command -v python3 > /dev/null; then
  got=$(python3 "$root/scripts/lib/ncu_summary.py" "$tmp/ncu.csv" | grep '^select call')
  check "ncu_summary.py: the last call of each shape" "select call 1 (per-pass): 4.5 us
select call 2 (one-launch): 4.5 us" "$got"
fi

if [ $fails = 0 ]; then
  echo "gpu_steps_test: all passed"
  exit 0
fi
echo "gpu_steps_test: $fails FAILED"
echo "---- the fake run's output:"
cat "$tmp/run.out"
exit 1
