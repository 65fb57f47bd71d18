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
# -O1 -g1 (line tables only) instead of RelWithDebInfo's -O2 -g: the level
# AddressSanitizer's documentation suggests, file:line in every report, and it
# compiles in 37-44 % of the time (the largest unit-test file: 47 s -> 17 s
# under ASan+UBSan), which is most of these stages' time.
# The test programs (not the runtime) at -O0: instrumented, a test file
# compiles in ~40 % of its -O1 time, and what runs hot is the runtime's code.
common=(-DMGS_WITH_CUDA=OFF -DMGS_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
  "-DMGS_TEST_COMPILE_OPTIONS=-O0;-g1")

if [ "$which" = asan ] || [ "$which" = all ]; then
  printf '\n==> AddressSanitizer + UndefinedBehaviorSanitizer  [%d s]\n' "$SECONDS"
  cmake -S . -B build-asan "${common[@]}" -DMGS_SANITIZE_ADDRESS=ON >/dev/null
  # Everything (benchmarks are off): a list of test binaries here would miss
  # the next MPI test someone adds, and ctest would then fail on it.
  cmake --build build-asan -j "$jobs"
  # Leak checking in the unit tests; not under mpirun (Open MPI's own start-up
  # allocations are reported as leaks). Any UBSan report aborts the test.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --test-dir build-asan -L unit --output-on-failure -j 2
  # The MPI tests at their smallest and largest world sizes: a test's np3
  # variant runs the code its np2 and np4 variants run (every np3 test has
  # both), and the 20-round job-end test has a 10-round np6 twin.
  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --test-dir build-asan -L mpi -LE python -E 'killed|conservation|\.np3$|np4x20' --output-on-failure -j 2 \
    --timeout 600
  # The PyTorch suite against the instrumented libmgs at np 2 and 4: the C ABI
  # as ctypes calls it, tensor memory held until a handle completes, shutdown.
  # Python is not instrumented, so the sanitizer runtime is preloaded (with
  # libstdc++, or ASan cannot intercept the C++ throws that torch's autograd
  # makes). Sanitizer reports go to files (pytest captures fd 2 during a test,
  # and a report's exit would take the capture with it), printed on failure
  # with each rank's output.
  libmgs=build-asan/src/capi/libmgs.so
  if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import torch" 2> /dev/null; then
    preload="$(ldd "$libmgs" | awk '/libasan/ { print $3 }') $(ldd "$libmgs" | awk '/libstdc\+\+/ { print $3 }')"
    for np in 2 4; do
      outdir=$(mktemp -d)
      if ! timeout 600 mpirun --oversubscribe --bind-to none -np "$np" --output-filename "$outdir" \
          -x LD_PRELOAD="$preload" -x ASAN_OPTIONS="detect_leaks=0:alloc_dealloc_mismatch=0:log_path=$outdir/asan" \
          -x UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$outdir/ubsan" -x MGS_LIBRARY="$PWD/$libmgs" \
          -x PYTHONPATH="$PWD/bindings/python" /usr/bin/python3 -m pytest -p no:cacheprovider -q -x tests/python \
          > /dev/null 2>&1; then
        for f in "$outdir"/*san.* "$outdir"/*/rank.*/std*; do
          [ -f "$f" ] && { printf -- '--- %s\n' "$f"; tail -60 "$f"; }
        done
        echo "python suite under AddressSanitizer failed at np $np"; exit 1
      fi
      printf 'python suite under AddressSanitizer, np %s: %s\n' "$np" \
        "$(tail -c 400 "$outdir"/*/rank.0/stdout | sed 's/\x1b\[[0-9;]*m//g' | tail -1)"
      rm -rf "$outdir"
    done
  else
    echo "python suite under AddressSanitizer: skipped (/usr/bin/python3 cannot import torch)"
  fi
fi

if [ "$which" = tsan ] || [ "$which" = all ]; then
  printf '\n==> ThreadSanitizer  [%d s]\n' "$SECONDS"
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
  printf '\n==> libFuzzer targets, short run  [%d s]\n' "$SECONDS"
  scripts/fuzz.sh "${MGS_FUZZ_SECONDS:-15}"
fi
