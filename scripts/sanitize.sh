#!/usr/bin/env bash
# Builds the CPU runtime with AddressSanitizer+UBSan and with ThreadSanitizer
# and runs the unit tests and the multi-rank MPI tests under them, then gives
# each libFuzzer target (tests/fuzz, clang) a short run.
#   scripts/sanitize.sh [asan|tsan|fuzz|all]     (default: all)
# Used by CI after the README's test command. Findings fail the run.
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-all}
jobs=${SETUP_JOBS:-$(nproc)}
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(-DMGS_WITH_CUDA=OFF -DMGS_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo)

if [ "$which" = asan ] || [ "$which" = all ]; then
  printf '\n==> AddressSanitizer + UndefinedBehaviorSanitizer\n'
  cmake -S . -B build-asan "${common[@]}" -DMGS_SANITIZE_ADDRESS=ON >/dev/null
  # Everything (benchmarks are off): a list of test binaries here would miss
  # the next MPI test someone adds, and ctest would then fail on it.
  cmake --build build-asan -j "$jobs"
  # Leak checking in the unit tests; not under mpirun (Open MPI's own start-up
  # allocations are reported as leaks). Any UBSan report aborts the test.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --test-dir build-asan -L unit --output-on-failure -j 2
  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --test-dir build-asan -L mpi -LE python -E 'killed|conservation' --output-on-failure -j 2 --timeout 600
fi

if [ "$which" = tsan ] || [ "$which" = all ]; then
  printf '\n==> ThreadSanitizer\n'
  cmake -S . -B build-tsan "${common[@]}" -DMGS_SANITIZE_THREAD=ON >/dev/null
  cmake --build build-tsan -j "$jobs" --target mgs_unit_tests mgs_capi_tests mgs_compress_test
  # The selectors' passes run on mgs's own thread pool (common/parallel.h), which
  # TSan sees in full: the compressor tests run multi-threaded here too.
  TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan -L unit --output-on-failure -j 2
  TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/unit/compress/mgs_compress_test --warn NoTests \
    "candidates: bitwise the same for any thread count,selectors: result does not depend on the thread count,scatterAdd: variable counts and rank-order sums match a sequential loop bitwise"
fi

if [ "$which" = fuzz ] || [ "$which" = all ]; then
  # ~15 s per target (4 targets, about a minute of fuzzing); scripts/fuzz.sh
  # with no argument runs 5 minutes each.
  printf '\n==> libFuzzer targets, short run\n'
  scripts/fuzz.sh "${MGS_FUZZ_SECONDS:-15}"
fi
