#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang with ASan + UBSan) in
# build-fuzz and runs each for a while, starting from the seeds in
# tests/fuzz/corpus and keeping what it finds in build-fuzz/corpus.
#   scripts/fuzz.sh [seconds per target] [target...]   (default 300 s, all four)
# Targets: fuzz_env (MGS_* parser), fuzz_cost_model (cost-model files),
# fuzz_instance (mgs-plan instances and the planners), fuzz_abi (C ABI argument
# checks on one MPI rank). A crash, sanitizer report or failed invariant stops
# that target, leaves the input in build-fuzz/artifacts/<target>/ and makes the
# script exit 1; replay it with build-fuzz/tests/fuzz/<target> <file>.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-300}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(fuzz_env fuzz_cost_model fuzz_instance fuzz_abi)
jobs=${SETUP_JOBS:-$(nproc)}
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# -O1 -g1 (line tables), as in sanitize.sh: the level libFuzzer's and ASan's
# documentation use; CI's fuzz stage (build and four 15 s runs) took 252 s
# against about 394 s at -O2 -g.
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (Debian: clang, libclang-rt-14-dev)" >&2; exit 2; }
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DMGS_FUZZ=ON -DMGS_WITH_CUDA=OFF -DMGS_BUILD_BENCH=OFF \
  -DMGS_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" >/dev/null
cmake --build build-fuzz -j "$jobs" --target "${targets[@]}"

status=0
for t in "${targets[@]}"; do
  seeds=tests/fuzz/corpus/${t#fuzz_}
  corpus=build-fuzz/corpus/$t
  artifacts=build-fuzz/artifacts/$t/
  mkdir -p "$corpus" "$artifacts"
  # The ABI target runs MPI (a singleton) and a coordinator thread: MPI's own
  # start-up allocations would be reported as leaks, so leaks are not checked
  # there; the readers are checked for leaks too.
  leaks=1
  [ "$t" = fuzz_abi ] && leaks=0
  printf '\n==> %s for %s s\n' "$t" "$seconds"
  if ! ASAN_OPTIONS=detect_leaks=$leaks UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
       "build-fuzz/tests/fuzz/$t" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 \
       -artifact_prefix="$artifacts" -print_final_stats=1 "$corpus" "$seeds" 2>"build-fuzz/$t.log"; then
    tail -n 40 "build-fuzz/$t.log" >&2
    echo "fuzz.sh: $t found a problem; inputs in $artifacts" >&2
    status=1
  else
    grep -E '^stat::number_of_executed_units|^Done' "build-fuzz/$t.log" || true
  fi
done
exit $status
