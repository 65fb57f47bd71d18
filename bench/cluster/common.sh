# Shared by bench/cluster/run_*.sh (sourced): the replay binary, the exchange
# switch, and one emulated-cluster run of mgs-replay appending a JSON line.

# MGS_EXCHANGE (allgather | agreed | auto) exists once the O(k)-per-rank
# exchange is merged; before that only the allgather runs, with the variable
# unset (an unknown MGS_* variable is an error at mgs_init).
exchange_supported() {  # lib
  grep -aq "MGS_EXCHANGE" "$1" 2>/dev/null
}

# run_one OUT LABEL HOSTS RATE LATENCY [VAR=VALUE ...] -- REPLAY ARGS...
# Exports the VAR=VALUE pairs to every rank (mpirun -x), runs the replay on
# an emulated cluster and appends its JSON line to OUT; a failed run prints
# its last lines and appends nothing. With MGS_LOG_LEVEL set it reaches every
# rank; with CLUSTER_LOG_DIR set each run's whole output (every rank's log
# lines) is kept there as LABEL.log. With CLUSTER_RUN_TIMEOUT=SECONDS a run
# that takes longer is stopped (emulated_cluster.sh -t) and counts as failed;
# with CLUSTER_LOG_DIR set too, its processes' stacks at that moment are kept
# in LABEL.stacks/ beside the log.
run_one() {
  local out=$1 label=$2 hosts=$3 rate=$4 latency=$5
  shift 5
  local fwd="-x OMP_NUM_THREADS" envs=()
  if [ -n "${MGS_LOG_LEVEL:-}" ]; then
    envs+=("MGS_LOG_LEVEL=$MGS_LOG_LEVEL")
    fwd+=" -x MGS_LOG_LEVEL"
  fi
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    envs+=("$1")
    fwd+=" -x ${1%%=*}"
    shift
  done
  shift
  local log
  log=$(mktemp /tmp/cluster_run.XXXXXX.log)
  local stacks=""
  [ -n "${CLUSTER_LOG_DIR:-}" ] && stacks=$CLUSTER_LOG_DIR/$label.stacks
  if env "${envs[@]}" OMP_NUM_THREADS=1 EMULATED_STACKS_DIR="$stacks" scripts/emulated_cluster.sh -n "$hosts" -r "$rate" -l "$latency" \
      -t "${CLUSTER_RUN_TIMEOUT:-0}" -m "$fwd" -- \
      "$bin" --label "$label" --wire-iface eth0 "$@" > "$log" 2>&1; then
    grep '^{' "$log" >> "$out"
    tail -n 1 "$out" | cut -c1-160 >&2
  else
    echo "run failed ($label): $(tail -n 3 "$log")" >&2
  fi
  if [ -n "${CLUSTER_LOG_DIR:-}" ]; then
    mkdir -p "$CLUSTER_LOG_DIR"
    cp "$log" "$CLUSTER_LOG_DIR/$label.log"
  fi
  rm -f "$log"
}
