#!/usr/bin/env bash
# The crash reporter names the crashing thread and, resolved, the function
# and line that crashed; the process still dies of the signal.
#   check_crash_report.sh CRASHING_EXE REPORTER_LIB RESOLVER
set -u
exe=$1 lib=$2 resolve=$3
ulimit -c 0
out=$(LD_PRELOAD=$lib "$exe" 2>&1)
rc=$?
fail() { printf 'FAIL: %s\n--- output ---\n%s\n' "$1" "$out"; exit 1; }
[ $rc -eq $((128 + 11)) ] || fail "exit status $rc, expected death by SIGSEGV (139)"
grep -q "SIGSEGV (address (nil)) in thread 'mgs-victim'" <<< "$out" || fail "no report naming the thread"
resolved=$("$resolve" <<< "$out")
grep -q "crashHere().*crash_in_thread.cc:9" <<< "$resolved" || fail "the crashing function was not resolved: $resolved"
echo "ok: $(grep -c '#[0-9]' <<< "$out") frames, crash resolved to crashHere"
