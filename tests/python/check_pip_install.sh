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
