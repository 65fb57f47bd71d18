#!/bin/sh
# expect_failure_within.sh SECONDS command...: passes if the command exits
# non-zero within SECONDS (a hang or a zero exit fails the test).
limit=$1; shift
start=$(date +%s)
timeout -k 5 "$limit" "$@"
rc=$?
elapsed=$(( $(date +%s) - start ))
if [ "$elapsed" -ge "$limit" ]; then
  echo "FAILED: still running after ${limit}s (a hang), exit code $rc"; exit 1
fi
if [ "$rc" -eq 0 ]; then
  echo "FAILED: the job exited 0 although a rank was killed"; exit 1
fi
echo "PASSED: the job failed with exit code $rc after ${elapsed}s"
