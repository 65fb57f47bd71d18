# shellcheck shell=bash
# Step machinery of the GPU scripts (gpu_smoke.sh, gpu_session.sh,
# gpu_check.sh, gpu_full_check.sh); sourced, never run. A run is a list of
# steps in the order of their value, each a command (usually a shell function
# of the calling script) with a cap in seconds:
#
#   gs_init TAG DEFAULT_DEADLINE_S   # deadline: $GPU_DEADLINE, else the default
#   gs_step [-n TOOL]... [-a STEP]... NAME CAP COMMAND [ARGS...]
#   gs_mark NAME STATUS REASON       # a step's line without running anything
#   gs_finish                        # summary and verdict; status 0 only on PASS
#
# The deadline counts from the start of the shell (bash's SECONDS), so that
# one device command's whole run is bounded. A step
#   * is SKIPPED, not run, when gs_stop has named a reason (no GPU), when a
#     step named with -a did not pass (the line names the first cause), or
#     when the time left before the deadline is less than its CAP (later,
#     smaller steps may still run);
#   * FAILS at once when a tool named with -n is missing (looked up on PATH,
#     which gs_init extends with /usr/local/cuda/bin);
#   * else runs in its own process group (stdin /dev/null), stdout and stderr
#     going straight to $OUT/NN_NAME.log. At CAP seconds the whole group gets
#     TERM, 5 s later KILL: TIMEOUT. Exit 0 is PASS; exit $GS_SKIP (75) is
#     SKIPPED; any other exit is FAIL. A step gives the reason printed on its
#     line with gs_reason TEXT (or by writing to the file $GS_REASON_FILE);
#     $GS_LOG is its own log.
# Each step ends with one line, printed at once and appended to $OUT/steps.txt:
#   PASS     NAME (12 s)
#   FAIL     NAME (3 s): REASON
# $OUT/current_step.txt names the step that is running (what a command killed
# at its limit was doing). The verdict, printed last and written to
# $OUT/verdict.txt: PASS when every step passed, FAIL when any failed or timed
# out, INCOMPLETE when none failed but some were skipped (gs_finish returns 0,
# 1 and 2).
#
# Also: gs_have TOOL, gs_need TOOL (in a step: reason and status 1 when
# missing), gs_left (seconds to the deadline), gs_stop REASON,
# gs_registered BUILD NAME... (every name registered in ctest, else the
# missing ones as the reason), gs_ctest BUILD LIMIT NAME... (those ctest
# tests, each of which must pass: skipped or not run is a failure).

GS_SKIP=75

gs_init() {
  GS_TAG=$1
  GS_DEADLINE=${GPU_DEADLINE:-$2}
  OUT=${OUT:-build-gpu/$GS_TAG}
  mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
  export OUT
  GS_STEPS_FILE=$OUT/steps.txt
  : > "$GS_STEPS_FILE"
  GS_N=0
  GS_NPASS=0 GS_NFAIL=0 GS_NTIMEOUT=0 GS_NSKIP=0
  GS_STOPPED=""
  declare -gA GS_STATUS=() GS_CAUSE=()
  case ":$PATH:" in *:/usr/local/cuda/bin:*) ;; *) PATH=$PATH:/usr/local/cuda/bin ;; esac
  export PATH PYTHONUNBUFFERED=1
  echo "$GS_TAG: deadline ${GS_DEADLINE} s from the start of this command (${SECONDS} s gone); logs in $OUT"
}

gs_left() { echo $(( GS_DEADLINE - SECONDS )); }

gs_have() { command -v "$1" > /dev/null 2>&1; }

gs_reason() { printf '%s' "$*" > "${GS_REASON_FILE:-/dev/null}"; }

gs_need() {
  gs_have "$1" && return 0
  gs_reason "$1 not found (PATH and /usr/local/cuda/bin)"
  return 1
}

gs_stop() { GS_STOPPED=$*; }

# The line of a step that ended: printed, appended to steps.txt, counted.
gs_mark() {
  local name=$1 status=$2 reason=${3:-} dur=${4:-0} line
  GS_STATUS[$name]=$status
  # What a step that needs this one will name as the cause.
  if [ "$status" != PASS ] && [ -z "${GS_CAUSE[$name]:-}" ]; then
    GS_CAUSE[$name]="$name $status${reason:+: ${reason%; see *}}"
    GS_CAUSE[$name]=${GS_CAUSE[$name]:0:200}
  fi
  case $status in
    PASS) GS_NPASS=$((GS_NPASS + 1)) ;;
    FAIL) GS_NFAIL=$((GS_NFAIL + 1)) ;;
    TIMEOUT) GS_NTIMEOUT=$((GS_NTIMEOUT + 1)) ;;
    *) GS_NSKIP=$((GS_NSKIP + 1)) ;;
  esac
  line=$(printf '%-8s %s (%d s)%s' "$status" "$name" "$dur" "${reason:+: $reason}")
  printf '%s\n' "$line" >> "$GS_STEPS_FILE"
  printf '%s\n' "$line"
}

gs_step() {
  local tools=() after=() opt OPTIND=1
  while getopts "n:a:" opt; do
    case $opt in
      n) tools+=("$OPTARG") ;;
      a) after+=("$OPTARG") ;;
      *) echo "gs_step: bad option" >&2; return 2 ;;
    esac
  done
  shift $((OPTIND - 1))
  local name=$1 cap=$2
  shift 2
  GS_N=$((GS_N + 1))
  local log
  log=$OUT/$(printf '%02d' "$GS_N")_$(printf '%s' "$name" | tr -c 'A-Za-z0-9._-' '_').log
  if [ -n "$GS_STOPPED" ]; then
    gs_mark "$name" SKIPPED "$GS_STOPPED"
    return 0
  fi
  local a
  for a in "${after[@]}"; do
    if [ "${GS_STATUS[$a]:-}" != PASS ]; then
      GS_CAUSE[$name]=${GS_CAUSE[$a]:-$a not run}
      gs_mark "$name" SKIPPED "needs $a; ${GS_CAUSE[$name]}"
      return 0
    fi
  done
  local left
  left=$(gs_left)
  if [ "$left" -lt "$cap" ]; then
    gs_mark "$name" SKIPPED "deadline: ${left} s left of ${GS_DEADLINE}, the step's cap is ${cap} s"
    return 0
  fi
  local t
  for t in "${tools[@]}"; do
    if ! gs_have "$t"; then
      gs_mark "$name" FAIL "$t not found (PATH and /usr/local/cuda/bin)"
      return 0
    fi
  done
  GS_REASON_FILE=$OUT/.reason GS_LOG=$log
  export GS_REASON_FILE GS_LOG
  : > "$GS_REASON_FILE"
  local mark=$OUT/.timed_out
  rm -f "$mark"
  printf '%s (cap %d s) started at %d s; log %s\n' "$name" "$cap" "$SECONDS" "$log" > "$OUT/current_step.txt"
  local t0=$SECONDS pid wd rc
  set -m
  ( "$@" ) < /dev/null > "$log" 2>&1 &
  pid=$!
  ( sleep "$cap"; : > "$mark"; kill -TERM -- "-$pid"; sleep 5; kill -KILL -- "-$pid" ) \
    < /dev/null > /dev/null 2>&1 &
  wd=$!
  set +m
  { wait "$pid"; } 2> /dev/null
  rc=$?
  { kill -TERM -- "-$wd"; wait "$wd"; } > /dev/null 2>&1
  # Whatever the step left behind in its group (a stuck rank) goes too.
  kill -KILL -- "-$pid" > /dev/null 2>&1
  local dur=$((SECONDS - t0)) reason
  reason=$(head -c 400 "$GS_REASON_FILE" | tr '\n' ' ')
  local base=${log##*/}
  if [ -e "$mark" ]; then
    gs_mark "$name" TIMEOUT "cap ${cap} s reached${reason:+; $reason}; see $base" "$dur"
  elif [ "$rc" = 0 ]; then
    gs_mark "$name" PASS "$reason" "$dur"
  elif [ "$rc" = "$GS_SKIP" ]; then
    gs_mark "$name" SKIPPED "${reason:-skipped by the step}" "$dur"
  else
    gs_mark "$name" FAIL "${reason:-exit $rc}; see $base" "$dur"
  fi
  rm -f "$GS_REASON_FILE" "$mark" "$OUT/current_step.txt"
  unset GS_REASON_FILE GS_LOG
  return 0
}

# The verdict line; details (the last lines of each failed step's log) come
# before the summary, so that the verdict is the last line of the output.
gs_finish() {
  local verdict=PASS code=0
  if [ $((GS_NFAIL + GS_NTIMEOUT)) -gt 0 ]; then
    verdict=FAIL code=1
  elif [ "$GS_NSKIP" -gt 0 ]; then
    verdict=INCOMPLETE code=2
  elif [ "$GS_NPASS" = 0 ]; then
    verdict=FAIL code=1  # nothing ran: never a pass
  fi
  local f
  for f in "$OUT"/[0-9][0-9]_*.log; do
    [ -e "$f" ] || continue
    local n=${f##*/}
    n=${n#[0-9][0-9]_}
    n=${n%.log}
    if grep -qE "^(FAIL|TIMEOUT) +[^ ]+ .*see ${f##*/}\$" "$GS_STEPS_FILE"; then
      echo "---- last lines of ${f##*/}"
      tail -n "${GPU_TAIL_LINES:-8}" "$f" | cut -c1-300 | sed 's/^/  | /'
    fi
  done
  echo "---- $GS_TAG summary"
  cat "$GS_STEPS_FILE"
  local total=$((GS_NPASS + GS_NFAIL + GS_NTIMEOUT + GS_NSKIP))
  local line="VERDICT $GS_TAG: $verdict ($total steps: $GS_NPASS passed, $GS_NFAIL failed, $GS_NTIMEOUT timed out, $GS_NSKIP skipped; ${SECONDS} s of ${GS_DEADLINE})"
  printf '%s\n' "$line" > "$OUT/verdict.txt"
  printf '%s\n' "$line"
  return $code
}

# ctest's registered test names in BUILD.
gs_ctest_names() { ctest --test-dir "$1" -N 2> /dev/null | sed -n 's/^ *Test *#[0-9]*: //p'; }

gs_registered() {
  local build=$1 missing=() n
  shift
  local names
  names=$(gs_ctest_names "$build")
  for n in "$@"; do
    grep -qxF -- "$n" <<< "$names" || missing+=("$n")
  done
  [ ${#missing[@]} = 0 ] && return 0
  gs_reason "not registered in $build: ${missing[*]}"
  echo "not registered in $build: ${missing[*]}"
  return 1
}

# A name as an extended regular expression that matches only itself.
gs_re() { printf '%s' "$1" | sed 's/[]*.^$()+?{}|[]/\\&/g'; }

# Runs the named ctest tests (exact names) with ctest's own per-test LIMIT;
# each must be reported Passed: ctest's exit status is 0 for a skipped test.
gs_ctest() {
  local build=$1 limit=$2 re="" n bad=() rc
  shift 2
  for n in "$@"; do re+="${re:+|}$(gs_re "$n")"; done
  ctest --test-dir "$build" --output-on-failure --timeout "$limit" -R "^($re)\$" 2>&1 | tee "$OUT/.ctest.out"
  rc=${PIPESTATUS[0]}
  local line st
  for n in "$@"; do
    line=$(grep -E "Test +#[0-9]+: $(gs_re "$n") " "$OUT/.ctest.out" | tail -1)
    st=$(printf '%s' "$line" | sed -E 's/.* \.*(\*\*\*)?([A-Za-z][A-Za-z ]*[a-z]) +[0-9.]+ sec.*/\2/')
    [ -n "$line" ] || st="did not run"
    [ "$st" = Passed ] || bad+=("$n ($st)")
  done
  rm -f "$OUT/.ctest.out"
  [ ${#bad[@]} = 0 ] && [ "$rc" = 0 ] && return 0
  local IFS=,
  gs_reason "did not pass: ${bad[*]:-ctest exit $rc}"
  return 1
}
