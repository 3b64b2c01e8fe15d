#!/bin/sh
# bench/io: sg-bench-io at 1, 2, 4 ranks per backend and read path, each run
# next to a dd measurement of the same size on the same file system (paired,
# because the machine is shared and noisy); every sg-bench-io repetition is
# also paired with plain POSIX I/O of the same bytes (--posix 1).
# Usage: run_bench.sh BUILD_DIR [DIR] [MIB] [REPS]
B=${1:-build}; D=${2:-/tmp}; M=${3:-256}; R=${4:-5}
drop() { sync; (echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null && echo 1 || echo 0; }
dd_pair() {
  w=$(dd if=/dev/zero of=$D/sg-dd.bin bs=16M count=$((M / 16)) conv=fdatasync 2>&1 | tail -1)
  c=$(drop)
  r=$(dd if=$D/sg-dd.bin of=/dev/null bs=16M 2>&1 | tail -1)
  rm -f $D/sg-dd.bin
  echo "{\"bench\": \"io\", \"op\": \"dd\", \"ranks\": $1, \"backend\": \"$2\", \"write\": \"$w\", \"read\": \"$r\", \"cold\": $c, \"load\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}"
}
for n in 1 2 4; do
  dd_pair $n pnetcdf
  mpiexec.mpich -n $n $B/bin/sg-bench-io --mib $M --backend pnetcdf --dir $D --reps $R --posix 1
  mpiexec.mpich -n $n $B/bin/sg-bench-io --mib $M --backend pnetcdf --dir $D --reps $R --posix 1 --no-direct 1 --no-direct-write 1
  dd_pair $n netcdf4
  mpiexec.mpich -n $n $B/bin/sg-bench-io --mib $M --backend netcdf4 --dir $D --reps $R --posix 1
  mpiexec.mpich -n $n $B/bin/sg-bench-io --mib $M --backend netcdf4 --dir $D --reps $R --posix 1 --independent 1
done
# hints tried (2 ranks): forced collective buffering, PnetCDF copy-swap on write
mpiexec.mpich -n 2 $B/bin/sg-bench-io --mib $M --backend pnetcdf --dir $D --reps $R --posix 1 --no-direct 1 --hints "romio_cb_read=enable,romio_cb_write=enable"
mpiexec.mpich -n 2 $B/bin/sg-bench-io --mib $M --backend pnetcdf --dir $D --reps $R --posix 1 --hints "romio_cb_read=disable,romio_cb_write=disable"
mpiexec.mpich -n 2 $B/bin/sg-bench-io --mib $M --backend pnetcdf --dir $D --reps $R --posix 1 --hints "nc_in_place_swap=disable"
