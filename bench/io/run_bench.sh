#!/bin/sh
# bench/io: sg-bench-io at 1, 2, 4 ranks per backend, each run next to a dd
# measurement of the same size on the same file system (paired, because the
# machine is shared and noisy). Usage: run_bench.sh BUILD_DIR [DIR] [MIB]
B=${1:-build}; D=${2:-/tmp}; M=${3:-256}
drop() { sync; (echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null && echo 1 || echo 0; }
for n in 1 2 4; do
  for be in pnetcdf netcdf4; do
    w=$(dd if=/dev/zero of=$D/sg-dd.bin bs=16M count=$((M / 16)) conv=fdatasync 2>&1 | tail -1)
    c=$(drop)
    r=$(dd if=$D/sg-dd.bin of=/dev/null bs=16M 2>&1 | tail -1)
    rm -f $D/sg-dd.bin
    echo "{\"bench\": \"io\", \"op\": \"dd\", \"ranks\": $n, \"backend\": \"$be\", \"write\": \"$w\", \"read\": \"$r\", \"cold\": $c}"
    mpiexec.mpich -n $n $B/bin/sg-bench-io --mib $M --backend $be --dir $D --reps 3
  done
done
