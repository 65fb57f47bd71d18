#!/bin/sh
# pip-installs bindings/python into a scratch directory with the library just
# built (MGS_LIBRARY), then imports the installed copy with MGS_LIBRARY unset:
# the library must be found inside the package.
# Usage: check_pip_install.sh PYTHON SOURCE_DIR LIBMGS
set -eu
python=$1 src=$2 libmgs=$3
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# Build from a copy so that nothing is written into the source tree.
# --no-build-isolation: CI has no index to fetch setuptools from.
mkdir "$scratch/pkg"
cp -R "$src/bindings/python/pyproject.toml" "$src/bindings/python/setup.py" "$src/bindings/python/README.md" \
  "$src/bindings/python/mgs" "$scratch/pkg/"
rm -f "$scratch/pkg/mgs/libmgs.so"
MGS_LIBRARY=$libmgs "$python" -m pip install --quiet --no-build-isolation --no-deps --no-cache-dir \
  --target "$scratch/site" "$scratch/pkg"
test -f "$scratch/site/mgs/libmgs.so"
# The bundled binaries: stripped, looking beside themselves first, and mgsrun runnable.
for bin in "$scratch/site/mgs/libmgs.so" "$scratch/site/mgs/bin/mgsrun"; do
  if readelf -S "$bin" | grep -q debug_info; then echo "FAIL: $bin is not stripped"; exit 1; fi
  readelf -d "$bin" | grep -E "R(UN)?PATH" | grep -q 'ORIGIN' || { echo "FAIL: $bin has no \$ORIGIN RPATH"; exit 1; }
done
PYTHONPATH="$scratch/site" "$python" "$scratch/site/bin/mgsrun" --version | grep -q "^mgsrun " ||
  { echo "FAIL: the package's mgsrun command does not run"; exit 1; }
# The sdist carries the C++ sources, and they configure.
(cd "$scratch/pkg" && MGS_SOURCE_DIR=$src "$python" setup.py -q sdist -d "$scratch/dist" >/dev/null 2>&1)
tar -tzf "$scratch"/dist/mgs-*.tar.gz > "$scratch/sdist.txt"
for f in mgs_src/CMakeLists.txt mgs_src/src/capi/mgs_capi.cc mgs_src/include/mgs/mgs.h mgs_src/launcher/mgsrun_main.cc \
         mgs/_runtime.py; do
  grep -q "/$f\$" "$scratch/sdist.txt" || { echo "FAIL: the sdist lacks $f"; exit 1; }
done
mkdir "$scratch/sdist" && tar -xzf "$scratch"/dist/mgs-*.tar.gz -C "$scratch/sdist"
cmake -S "$scratch"/sdist/mgs-*/mgs_src -B "$scratch/sdist-build" -DMGS_BUILD_TESTS=OFF -DMGS_BUILD_BENCH=OFF \
  -DMGS_WITH_CUDA=OFF -DMGS_HEADER_ONLY_LOGGING=ON >/dev/null ||
  { echo "FAIL: the sdist's sources do not configure"; exit 1; }
cd "$scratch"
env -u MGS_LIBRARY PYTHONPATH="$scratch/site" "$python" - <<'PY'
import torch
import mgs
import mgs.torch as hvd
assert mgs.library_path().startswith(mgs.__path__[0]), mgs.library_path()
hvd.init()
assert hvd.size() == 1
assert hvd.allreduce(torch.arange(3.)).tolist() == [0., 1., 2.]
print("installed package OK:", mgs.library_path())
PY
