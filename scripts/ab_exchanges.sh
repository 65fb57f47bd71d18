#!/usr/bin/env bash
# Bitwise A/B of the sparse exchanges between two builds of libmgs:
#
#   scripts/ab_exchanges.sh BASE_LIB NEW_LIB
#
# BASE_LIB, NEW_LIB: paths to libmgs.so (e.g. a worktree's
# build/src/capi/libmgs.so and build/src/capi/libmgs.so). Builds
# scripts/ab/ab_exchanges_driver.cc once, then runs the same deterministic
# multi-rank job (8 steps, layer-wise or single-bucket plans, the cost model's
# presets, no re-planning) against each library for every exchange
# (allgather, agreed, hierarchical at np 4 with MGS_NODE_SIZE=2, dense
# fallback, auto with and without the dense fallback), with a NaN on one rank
# under MGS_NONFINITE=propagate and =error, at np 2 and 4, over MPI (so the
# phased exchanges run in flight). Per scenario it compares every rank's hashes of the
# outputs of every step, the error messages, the final residuals and the
# timing-free statistics counters. Exits 1 if any scenario differs.
# Environment: MPIRUN (default mpirun), AB_NP (default "2 4"), AB_STEPS (8).
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 BASE_LIB NEW_LIB" >&2
  exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
base_dir="$(cd "$(dirname "$1")" && pwd)"
new_dir="$(cd "$(dirname "$2")" && pwd)"
mpirun="${MPIRUN:-mpirun}"
steps="${AB_STEPS:-8}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
c++ -std=c++17 -O2 -I"$root/include" "$root/scripts/ab/ab_exchanges_driver.cc" -L"$new_dir" -lmgs \
  -o "$work/driver"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

common=(-x MGS_COMPRESSOR=topk -x MGS_DENSITY=0.01 -x MGS_CALIBRATION=off -x MGS_PROFILE_STEPS=2
        -x MGS_REPLAN_TOLERANCE=0 -x MGS_PLAN_TRIAL_STEPS=0 -x MGS_THREADS=1 -x MGS_MIN_SPARSE_ELEMENTS=4096)

# name|np list|env (space-separated K=V)|driver args after STEPS
scenarios=(
  "allgather|2 4|MGS_EXCHANGE=allgather MGS_DENSE_FALLBACK=0 MGS_PLANNER=layerwise|"
  "allgather_single|2 4|MGS_EXCHANGE=allgather MGS_DENSE_FALLBACK=0 MGS_PLANNER=single|"
  "agreed|2 4|MGS_EXCHANGE=agreed MGS_DENSE_FALLBACK=0 MGS_PLANNER=layerwise|"
  "agreed_single|2 4|MGS_EXCHANGE=agreed MGS_DENSE_FALLBACK=0 MGS_PLANNER=single|"
  "hierarchical|4|MGS_EXCHANGE=hierarchical MGS_NODE_SIZE=2 MGS_DENSE_FALLBACK=0 MGS_PLANNER=layerwise|"
  "dense|2 4|MGS_EXCHANGE=allgather MGS_DENSE_FALLBACK=1 MGS_DENSITY=0.9 MGS_PLANNER=layerwise|"
  "auto|2 4|MGS_EXCHANGE=auto MGS_PLANNER=layerwise MGS_NODE_SIZE=2|"
  "auto_sparse|2 4|MGS_EXCHANGE=auto MGS_DENSE_FALLBACK=0 MGS_PLANNER=layerwise MGS_NODE_SIZE=2|"
  "allgather_nan_propagate|2 4|MGS_EXCHANGE=allgather MGS_DENSE_FALLBACK=0 MGS_PLANNER=layerwise MGS_NONFINITE=propagate|3 1"
  "agreed_nan_propagate|2 4|MGS_EXCHANGE=agreed MGS_DENSE_FALLBACK=0 MGS_PLANNER=layerwise MGS_NONFINITE=propagate|3 1"
  "hierarchical_nan_propagate|4|MGS_EXCHANGE=hierarchical MGS_NODE_SIZE=2 MGS_DENSE_FALLBACK=0 MGS_PLANNER=layerwise MGS_NONFINITE=propagate|3 1"
  "dense_nan_propagate|2 4|MGS_EXCHANGE=allgather MGS_DENSE_FALLBACK=1 MGS_DENSITY=0.9 MGS_PLANNER=layerwise MGS_NONFINITE=propagate|3 1"
  "allgather_nan_error|2 4|MGS_EXCHANGE=allgather MGS_DENSE_FALLBACK=0 MGS_PLANNER=layerwise MGS_NONFINITE=error|3 1"
  "agreed_nan_error|2 4|MGS_EXCHANGE=agreed MGS_DENSE_FALLBACK=0 MGS_PLANNER=layerwise MGS_NONFINITE=error|3 1"
  "hierarchical_nan_error|4|MGS_EXCHANGE=hierarchical MGS_NODE_SIZE=2 MGS_DENSE_FALLBACK=0 MGS_PLANNER=layerwise MGS_NONFINITE=error|3 1"
  "dense_nan_error|2 4|MGS_EXCHANGE=allgather MGS_DENSE_FALLBACK=1 MGS_DENSITY=0.9 MGS_PLANNER=layerwise MGS_NONFINITE=error|3 1"
)

run() {  # lib_dir np env args -> sorted per-rank lines
  local dir="$1" np="$2" env="$3" args="$4" xs=()
  for kv in $env; do xs+=(-x "$kv"); done
  # shellcheck disable=SC2086
  LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$mpirun" -np "$np" --oversubscribe --bind-to none \
    -x LD_LIBRARY_PATH "${common[@]}" "${xs[@]}" "$work/driver" "$steps" $args 2>"$work/stderr" |
    grep '^rank ' | sort || { cat "$work/stderr" >&2; return 1; }
}

status=0
for s in "${scenarios[@]}"; do
  IFS='|' read -r name nps env args <<<"$s"
  for np in ${AB_NP:-2 4}; do
    [[ " $nps " == *" $np "* ]] || continue
    a="$(run "$base_dir" "$np" "$env" "$args")"
    b="$(run "$new_dir" "$np" "$env" "$args")"
    if [[ -n "$a" && "$a" == "$b" && $(wc -l <<<"$a") -eq $np ]]; then
      printf '%-28s np%s identical: %s\n' "$name" "$np" "$(head -1 <<<"$a" | sed 's/^rank 0: //')"
    else
      status=1
      printf '%-28s np%s DIFFER\n--- base\n%s\n--- new\n%s\n' "$name" "$np" "$a" "$b"
    fi
  done
done
exit $status
