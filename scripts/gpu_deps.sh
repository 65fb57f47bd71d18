#!/usr/bin/env bash
# Makes .deps/, the folder a GPU device call carries (carry [".deps"]): the
# header-only dependencies of the full build that a GPU image may lack or hold
# in another major version, taken from this machine's Debian packages:
#   catch2 (Catch2 v2), libcli11-dev, nlohmann-json3-dev, libspdlog-dev and
#   libfmt-dev (both used header-only: -DMGS_HEADER_ONLY_LOGGING=ON), and the
#   C headers of libopenmpi-dev (only used where the GPU machine has Open
#   MPI's libmpi.so.40 but no mpi.h; scripts/lib/gpu_tree.sh says when).
# Layout: .deps/include/{catch2,CLI,nlohmann,spdlog,fmt}, one small CMake
# config per package in .deps/lib/cmake/<Package>/ whose paths are relative
# to the config file (the folder can move), .deps/openmpi/include,
# .deps/MANIFEST.txt. CMake finds them with -DCMAKE_PREFIX_PATH=$PWD/.deps or
# -D<Package>_DIR=$PWD/.deps/lib/cmake/<Package>; each config prints where it
# was loaded from ("mgs deps: ..."). scripts/gpu_build.sh full uses .deps when
# it is there.
#   scripts/gpu_deps.sh [DEST]          # DEST: .deps by default
# Prints the folder's size (the device tool carries at most 64 MiB in all).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.deps}
command -v dpkg-query > /dev/null || { echo "gpu_deps: needs dpkg-query (a Debian machine)" >&2; exit 2; }

# The upstream version of an installed package (no epoch, no +ds or Debian
# revision), or nothing when it is not installed.
pkg_version() {
  dpkg-query -W -f='${db:Status-Status} ${Version}\n' "$1" 2> /dev/null |
    awk '$1 == "installed" {print $2}' | sed -E 's/^[0-9]+://; s/[-+~].*$//'
}
missing=()
for p in catch2 libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libopenmpi-dev; do
  [ -n "$(pkg_version "$p")" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu_deps: not installed: ${missing[*]} (apt-get install -y ${missing[*]})" >&2
  exit 2
fi
catch2_v=$(pkg_version catch2)
cli11_v=$(pkg_version libcli11-dev)
json_v=$(pkg_version nlohmann-json3-dev)
spdlog_v=$(pkg_version libspdlog-dev)
fmt_v=$(pkg_version libfmt-dev)
ompi_v=$(pkg_version libopenmpi-dev)
case $catch2_v in 2.*) ;; *) echo "gpu_deps: catch2 is $catch2_v, not Catch2 v2" >&2; exit 2 ;; esac

rm -rf "$dest"
mkdir -p "$dest/include" "$dest/lib/cmake" "$dest/openmpi/include/openmpi"
cp -r /usr/include/catch2 /usr/include/CLI /usr/include/nlohmann /usr/include/spdlog /usr/include/fmt "$dest/include/"
ompi_inc=$(dirname "$(dpkg-query -L libopenmpi-dev | grep -m1 '/include/mpi\.h$')")
cp "$ompi_inc/mpi.h" "$ompi_inc/mpi_portable_platform.h" "$ompi_inc/mpi-ext.h" "$dest/openmpi/include/"
[ -d "$ompi_inc/openmpi/mpiext" ] && cp -r "$ompi_inc/openmpi/mpiext" "$dest/openmpi/include/openmpi/"
echo "$ompi_v" > "$dest/openmpi/VERSION"

# <Package>ConfigVersion.cmake: compatible with a request of the same major
# version and at most this version.
version_file() {
  local name=$1 version=$2
  cat > "$dest/lib/cmake/$name/${name}ConfigVersion.cmake" << EOF
# Written by scripts/gpu_deps.sh: $name $version, same-major compatibility.
set(PACKAGE_VERSION "$version")
set(PACKAGE_VERSION_COMPATIBLE TRUE)
if(PACKAGE_FIND_VERSION)
  string(REGEX MATCH "^[0-9]+" _mgs_major "\${PACKAGE_VERSION}")
  if(PACKAGE_VERSION VERSION_LESS PACKAGE_FIND_VERSION OR NOT PACKAGE_FIND_VERSION_MAJOR STREQUAL _mgs_major)
    set(PACKAGE_VERSION_COMPATIBLE FALSE)
  elseif(PACKAGE_VERSION VERSION_EQUAL PACKAGE_FIND_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
  unset(_mgs_major)
endif()
EOF
}

# <Package>Config.cmake: the header-only targets over .deps/include, found
# relative to this file. $3: the targets' CMake code, which names the folder
# _mgs_deps_include (replaced by a variable of this package's own: one
# config loads another through find_dependency, in the same scope).
config_file() {
  local name=$1 version=$2 body=${3//_mgs_deps_include/_mgs_deps_${1}_include}
  mkdir -p "$dest/lib/cmake/$name"
  cat > "$dest/lib/cmake/$name/${name}Config.cmake" << EOF
# Written by scripts/gpu_deps.sh from Debian's package: $name $version,
# headers only, under the .deps folder three levels above this file.
get_filename_component(_mgs_deps_${name}_include "\${CMAKE_CURRENT_LIST_DIR}/../../../include" ABSOLUTE)
$body
set(${name}_VERSION "$version")
message(STATUS "mgs deps: $name $version from \${CMAKE_CURRENT_LIST_DIR}")
unset(_mgs_deps_${name}_include)
EOF
  version_file "$name" "$version"
}

config_file Catch2 "$catch2_v" '
if(NOT TARGET Catch2::Catch2)
  add_library(Catch2::Catch2 INTERFACE IMPORTED)
  set_target_properties(Catch2::Catch2 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_mgs_deps_include}")
endif()
# include(Catch) and catch_discover_tests() come from this folder.
list(APPEND CMAKE_MODULE_PATH "${CMAKE_CURRENT_LIST_DIR}")'
cp /usr/lib/cmake/Catch2/Catch.cmake /usr/lib/cmake/Catch2/CatchAddTests.cmake "$dest/lib/cmake/Catch2/"

config_file CLI11 "$cli11_v" '
if(NOT TARGET CLI11::CLI11)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  set_target_properties(CLI11::CLI11 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_mgs_deps_include}")
endif()'

config_file nlohmann_json "$json_v" '
if(NOT TARGET nlohmann_json::nlohmann_json)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  set_target_properties(nlohmann_json::nlohmann_json PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_mgs_deps_include}")
endif()'

# fmt header-only: fmt::fmt is the same target (no compiled library here).
config_file fmt "$fmt_v" '
if(NOT TARGET fmt::fmt-header-only)
  add_library(fmt::fmt-header-only INTERFACE IMPORTED)
  set_target_properties(fmt::fmt-header-only PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_mgs_deps_include}"
                        INTERFACE_COMPILE_DEFINITIONS "FMT_HEADER_ONLY=1")
  add_library(fmt::fmt INTERFACE IMPORTED)
  set_target_properties(fmt::fmt PROPERTIES INTERFACE_LINK_LIBRARIES fmt::fmt-header-only)
endif()'

# spdlog header-only over the fmt above (Debian builds it with external fmt);
# spdlog::spdlog is the same target.
config_file spdlog "$spdlog_v" '
if(NOT fmt_DIR)
  set(fmt_DIR "${CMAKE_CURRENT_LIST_DIR}/../fmt")
endif()
include(CMakeFindDependencyMacro)
find_dependency(fmt)
find_dependency(Threads)
if(NOT TARGET spdlog::spdlog_header_only)
  add_library(spdlog::spdlog_header_only INTERFACE IMPORTED)
  set_target_properties(spdlog::spdlog_header_only PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_mgs_deps_include}"
                        INTERFACE_COMPILE_DEFINITIONS "SPDLOG_FMT_EXTERNAL"
                        INTERFACE_LINK_LIBRARIES "fmt::fmt-header-only;Threads::Threads")
  add_library(spdlog::spdlog INTERFACE IMPORTED)
  set_target_properties(spdlog::spdlog PROPERTIES INTERFACE_LINK_LIBRARIES spdlog::spdlog_header_only)
endif()'

{
  echo "catch2 $catch2_v"
  echo "cli11 $cli11_v"
  echo "nlohmann-json $json_v"
  echo "spdlog $spdlog_v"
  echo "fmt $fmt_v"
  echo "openmpi-headers $ompi_v"
} > "$dest/MANIFEST.txt"

# Nothing in the folder may name this machine's /usr paths.
if grep -rlE '"?/usr/(include|lib|share)' "$dest/lib/cmake" > /dev/null; then
  echo "gpu_deps: a config file in $dest/lib/cmake names /usr:" >&2
  grep -rnE '"?/usr/(include|lib|share)' "$dest/lib/cmake" >&2
  exit 1
fi
kib=$(du -sk "$dest" | cut -f1)
echo "gpu_deps: $dest: $(tr '\n' ',' < "$dest/MANIFEST.txt" | sed 's/,$//; s/,/, /g')"
echo "gpu_deps: $dest is $((kib / 1024)).$(((kib % 1024) * 10 / 1024)) MiB ($kib KiB; the device tool carries at most 64 MiB)"
[ "$kib" -lt $((48 * 1024)) ] || { echo "gpu_deps: too large to carry" >&2; exit 1; }
