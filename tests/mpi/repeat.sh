#!/bin/sh
# repeat.sh N command...: runs the command N times; fails on the first run
# that exits non-zero or prints a Python traceback or an ignored exception
# (an exception in an atexit handler does not change the exit code).
n=$1; shift
i=1
while [ "$i" -le "$n" ]; do
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -ne 0 ] || printf '%s\n' "$out" | grep -q -e 'Traceback' -e 'Exception ignored' -e 'MGS_ERR'; then
    printf '%s\n' "$out"
    echo "FAILED: run $i of $n exited with $rc"
    exit 1
  fi
  i=$((i + 1))
done
echo "PASSED: $n runs, no error on any rank"
