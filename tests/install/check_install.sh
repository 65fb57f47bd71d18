#!/bin/sh
# check_install.sh BUILD_DIR: install into a scratch prefix, then build and run
# a downstream project with find_package(mgs) and with pkg-config.
set -eu
build=$1
src=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
LD_LIBRARY_PATH="$work/prefix/lib:${LD_LIBRARY_PATH:-}" "$work/consumer/consumer"
# pkg-config: mgs.pc must point into the prefix given to `cmake --install`,
# not the one the build was configured with.
pc_libdir=$(PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --variable=libdir mgs)
[ "$(cd "$pc_libdir" && pwd -P)" = "$(cd "$work/prefix/lib" && pwd -P)" ] ||
  { echo "mgs.pc libdir is $pc_libdir, not $work/prefix/lib"; exit 1; }
PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" cc "$src/consumer/main.c" -o "$work/pc_consumer" \
  $(PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --cflags --libs mgs)
LD_LIBRARY_PATH="$work/prefix/lib:${LD_LIBRARY_PATH:-}" "$work/pc_consumer"
echo "install check passed"
