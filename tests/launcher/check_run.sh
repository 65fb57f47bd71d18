#!/bin/sh
# Runs a command and checks its exit status and output (stdout + stderr).
#   check_run.sh [--rc 0|nonzero|N] [--match ERE]... [--no-match ERE]... -- command args...
# ctest's PASS_REGULAR_EXPRESSION ignores the exit status, hence this driver.
rc_want=0
matches=""
rejects=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rc) rc_want=$2; shift 2 ;;
    --match) matches="$matches$2
"; shift 2 ;;
    --no-match) rejects="$rejects$2
"; shift 2 ;;
    --) shift; break ;;
    *) echo "check_run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
# The tests set the MGS_* variables they mean; any the caller exported (setup.sh
# exports MGS_LIBRARY) would be forwarded by mgsrun and change the printed command.
for v in $(env | sed -n 's/^\(MGS_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
echo "check_run.sh: exit status $rc"
fail=0
case "$rc_want" in
  nonzero) [ "$rc" -ne 0 ] || { echo "FAIL: wanted a non-zero exit status"; fail=1; } ;;
  *) [ "$rc" -eq "$rc_want" ] || { echo "FAIL: wanted exit status $rc_want"; fail=1; } ;;
esac
old_ifs=$IFS
IFS='
'
for re in $matches; do
  printf '%s\n' "$out" | grep -Eq -- "$re" || { echo "FAIL: output does not match: $re"; fail=1; }
done
for re in $rejects; do
  printf '%s\n' "$out" | grep -Eq -- "$re" && { echo "FAIL: output matches: $re"; fail=1; }
done
IFS=$old_ifs
exit $fail
