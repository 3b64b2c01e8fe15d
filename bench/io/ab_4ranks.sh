#!/bin/sh
# bench/io: 4-rank A/B of the io layer's oversubscription measures, three
# interleaved rounds of sg-bench-io (256 MiB, --reps 3, --posix 1):
#   default                 per-rank handles, per-rank create, yielding waits
#   SG_IO_SHADOW=0          collective create (PnetCDF)
#   SG_IO_SHADOW=0 SG_IO_WAIT=spin   ... and blocking MPI_Wait agreements
# and, when OLD_BUILD is given, that build's sg-bench-io (e.g. main's) first
# in every round. Builds are taken as BUILD/bin + BUILD/lib (copy them aside
# if they may be rebuilt meanwhile). Run under the bench lock:
#   OMP_NUM_THREADS=1 flock /tmp/sg-bench.lock bench/io/ab_4ranks.sh build [OLD]
# Usage: ab_4ranks.sh BUILD [OLD_BUILD] [DIR]
B=${1:-build}; OLD=$2; D=${3:-/tmp}
run() { # label build backend env...
  l=$1; b=$2; be=$3; shift 3
  echo "## $l load $(cut -d' ' -f1-3 /proc/loadavg)"
  env LD_LIBRARY_PATH=$b/lib "$@" mpiexec.mpich -n 4 $b/bin/sg-bench-io \
    --mib 256 --dir $D --reps 3 --posix 1 --backend $be
}
for i in 1 2 3; do
  for be in pnetcdf netcdf4; do
    [ -n "$OLD" ] && run old-$be $OLD $be
    run new-$be $B $be
    [ $be = pnetcdf ] && run new-$be-shadow0 $B $be SG_IO_SHADOW=0
    run new-$be-spin-shadow0 $B $be SG_IO_SHADOW=0 SG_IO_WAIT=spin
  done
done
