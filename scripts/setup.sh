#!/usr/bin/env bash
# mgs set-up for a fresh Debian 12 machine:
#   scripts/setup.sh          install what is missing, build, run the main job
#   scripts/setup.sh --test   the same, then run every test (ctest)
# Environment: SETUP_BUILD_DIR (default build), SETUP_JOBS (default: all cores),
# SETUP_CMAKE_ARGS (extra CMake arguments, e.g. -DMGS_WITH_CUDA=OFF).
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
build=${SETUP_BUILD_DIR:-build}
jobs=${SETUP_JOBS:-$(nproc)}
mode=${1:-run}
case "$mode" in
  run|--run) mode=run ;;
  --test|test) mode=test ;;
  *) echo "usage: $0 [--test]" >&2; exit 2 ;;
esac

step() { printf '\n==> %s  [%d s]\n' "$*" "$SECONDS"; }

# --- 1. Packages (Debian) ----------------------------------------------------
packages=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin libspdlog-dev libcli11-dev catch2 nlohmann-json3-dev
          python3-torch python3-numpy python3-sklearn python3-pytest python3-matplotlib
          clang libclang-rt-14-dev)  # clang + libFuzzer: tests/fuzz (scripts/fuzz.sh, sanitize.sh)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  step "installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  step "all Debian packages present"
fi

# Open MPI refuses to start as root unless told it is deliberate (containers, CI).
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

# Free space, in GiB, on the file system that holds the tree (pip unpacks in
# TMPDIR, which is the same one on the machines this runs on).
free_gib() { df -Pk "$root" | awk 'NR==2 { printf "%d", $4 / 1048576 }'; }
# What the builds and sanitizer builds still need after the venvs (~3 GiB).
build_reserve_gib=3

# TensorFlow CPU for the mgs.tensorflow tests: from PyPI into a virtual
# environment (CMake registers those tests only when it exists). TensorFlow
# brings NumPy 2, which Debian's compiled SciPy, scikit-learn and matplotlib
# (Keras imports it) cannot load, so the venv gets its own copies of those.
# A marker records a complete install, so an interrupted one is redone.
if [ "$mode" = test ] && [ ! -f "$root/.venv-tf/.mgs-complete" ]; then
  step "creating .venv-tf with tensorflow-cpu (PyPI)"
  rm -rf "$root/.venv-tf"  # an interrupted install: start clean rather than on top of it
  /usr/bin/python3 -m venv --system-site-packages "$root/.venv-tf"
  if ! { "$root/.venv-tf/bin/pip" install -q --no-cache-dir tensorflow-cpu &&
         "$root/.venv-tf/bin/pip" install -q --no-cache-dir --ignore-installed "numpy>=2" scipy scikit-learn matplotlib; }; then
    rm -rf "$root/.venv-tf"  # give the space back before saying why
    echo "setup: installing tensorflow-cpu into .venv-tf failed (above); $(free_gib) GiB free on $root" >&2
    exit 1
  fi
  touch "$root/.venv-tf/.mgs-complete"
fi

# Current PyTorch 2.x from PyPI for the optional python.torch_current.np2 stage
# (the mgs.torch suite, torch.compile included, against what users install
# today; Debian's python3-torch is 1.13). PyPI's Linux wheel brings the CUDA
# runtime wheels (about 5.3 GiB installed, ~9 GiB at the peak of the install);
# SETUP_SKIP_TORCH_VENV=1 skips it, and so does a disk with too little room
# for it and the builds after it: the stage is then not registered, and this
# says so, rather than the whole set-up dying of a full disk half-way.
torch_venv_need_gib=9
torch_venv_skipped=""
if [ -f "$root/.venv-torch/.mgs-complete" ] &&
   ! "$root/.venv-torch/bin/python" -c 'import sys, torch; sys.exit(int(torch.__version__.split(".")[0]) < 2)' 2>/dev/null; then
  rm -f "$root/.venv-torch/.mgs-complete"  # made before the version was checked: torch 1.13 only
fi
if [ "$mode" = test ] && [ -z "${SETUP_SKIP_TORCH_VENV:-}" ] && [ ! -f "$root/.venv-torch/.mgs-complete" ]; then
  rm -rf "$root/.venv-torch"  # an interrupted install, or one without its marker: start clean
  free=$(free_gib)
  if [ "$free" -lt $((torch_venv_need_gib + build_reserve_gib)) ]; then
    torch_venv_skipped="$free GiB free on $root; it needs $torch_venv_need_gib GiB and the builds $build_reserve_gib more"
    step "SKIPPING .venv-torch (current torch from PyPI): $torch_venv_skipped; python.torch_current.np2 will not run"
  else
    step "creating .venv-torch with current torch (PyPI)"
    /usr/bin/python3 -m venv --system-site-packages "$root/.venv-torch"
    # "torch>=2": the venv sees Debian's torch 1.13, which a plain "torch"
    # requirement accepts, so nothing newer was installed before.
    # The stage is optional: a failed install is reported and removed (its
    # partial wheels would otherwise starve the builds), and the rest goes on.
    if "$root/.venv-torch/bin/pip" install -q --no-cache-dir --upgrade "torch>=2" &&
       "$root/.venv-torch/bin/python" -c 'import sys, torch; sys.exit(int(torch.__version__.split(".")[0]) < 2)'; then
      touch "$root/.venv-torch/.mgs-complete"
    else
      rm -rf "$root/.venv-torch"
      torch_venv_skipped="installing torch>=2 failed (above); $(free_gib) GiB free on $root"
      step "SKIPPING .venv-torch: $torch_venv_skipped; python.torch_current.np2 will not run"
    fi
  fi
fi

# --- 2. Build -----------------------------------------------------------------
step "configuring ($build)"
mkdir -p "$build"
# shellcheck disable=SC2086
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${SETUP_CMAKE_ARGS:-} >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
grep -E "mgs: CUDA" "$build/configure.log" || true
step "building with $jobs jobs"
cmake --build "$build" -j "$jobs"

# --- 3. Main job ----------------------------------------------------------------
export PATH="$root/$build/launcher:$PATH"
if [ -f examples/pytorch/train_digits.py ]; then
  # The same CNN on scikit-learn's digits trained twice on 4 ranks: dense
  # allreduce, then merged-gradient sparsification (Gaussian_k, 1% density,
  # error feedback), and one line comparing accuracy and bytes on the wire.
  # On one host, shared memory makes a dense allreduce of this small model
  # cheaper than selecting it, and the cost model would rightly send it dense;
  # MGS_DENSE_FALLBACK=0 keeps the sparse path on so that it can be seen here
  # (on a network, bench/train shows the defaults choosing it themselves).
  export MGS_LIBRARY="$root/$build/src/capi/libmgs.so" PYTHONPATH="$root/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
  out=$(mktemp -d /tmp/mgs-main-job.XXXXXX)
  step "main job 1/2, dense: mgsrun -np 4 -- /usr/bin/python3 examples/pytorch/train_digits.py"
  mgsrun -np 4 -- /usr/bin/python3 examples/pytorch/train_digits.py --json "$out/dense.json"
  step "main job 2/2, sparse: MGS_DENSE_FALLBACK=0 mgsrun -np 4 --compressor gaussiank --density 0.01 -- /usr/bin/python3 examples/pytorch/train_digits.py"
  MGS_DENSE_FALLBACK=0 mgsrun -np 4 --compressor gaussiank --density 0.01 -- \
    /usr/bin/python3 examples/pytorch/train_digits.py --json "$out/sparse.json" --min-accuracy 0.9
  step "main job: $(/usr/bin/python3 examples/pytorch/compare_runs.py "$out/dense.json" "$out/sparse.json")"
  rm -rf "$out"
else
  step "main job: mgsrun -np 4 -- $build/examples/collectives_demo"
  mgsrun -np 4 -- "$build/examples/collectives_demo"
fi

# --- 4. Tests ---------------------------------------------------------------------
if [ "$mode" = test ]; then
  step "running every test"
  ctest --test-dir "$build" --output-on-failure -j 2 --timeout 600
  [ -z "$torch_venv_skipped" ] ||
    step "NOT RUN: python.torch_current.np2 (current PyTorch from PyPI), no .venv-torch: $torch_venv_skipped"
fi
