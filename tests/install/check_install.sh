#!/bin/sh
# Install shardgrid from the build tree into a fresh prefix, then configure,
# build and run a consumer with find_package(shardgrid), and check the
# pkg-config file; then the user-kernel example (examples/user-kernel) the
# same way. Usage: check_install.sh BUILD_DIR SOURCE_DIR MPICC MPIEXEC
set -eu
build=$1 src=$2 mpicc=$3 mpiexec=$4
work=$build/install-test
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
test -f "$work/prefix/include/shardgrid/sg_mesh.h"
test -f "$work/prefix/include/shardgrid/sg_config.h"
cmake -S "$src/tests/install/consumer" -B "$work/consumer" \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DMPI_C_COMPILER="$mpicc" >/dev/null
cmake --build "$work/consumer" >/dev/null
LD_LIBRARY_PATH="$work/prefix/lib:${LD_LIBRARY_PATH:-}" "$mpiexec" -n 1 "$work/consumer/consumer"
# the user-kernel example: its own project, built out of tree, and its
# sharded-vs-one-process self-check at 2 ranks
cmake -S "$src/examples/user-kernel" -B "$work/user-kernel" \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DMPI_C_COMPILER="$mpicc" >/dev/null
cmake --build "$work/user-kernel" >/dev/null
LD_LIBRARY_PATH="$work/prefix/lib:${LD_LIBRARY_PATH:-}" OMP_NUM_THREADS=1 \
  "$mpiexec" -n 2 "$work/user-kernel/sg-user-kernel" | grep "user-kernel: ok"
PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --cflags --libs shardgrid
echo "install check passed"
