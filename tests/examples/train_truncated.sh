#!/bin/sh
# sg-train on a dataset cut short (as a generator that ran out of disk
# leaves it): an error naming the file on every rank, non-zero exit, for the
# default backend split over h and w and for the serial backend.
#   train_truncated.sh BIN_DIR MPIEXEC WORK_DIR SRC_DIR
set -u
bin=$1 mpiexec=$2 work=$3 src=$4
mkdir -p "$work" && cd "$work" || exit 1
"$mpiexec" -n 2 "$bin/sg-ns2d" --out ns_cut.nc --n 16 --samples 6 --frames 4 --dt 1e-2 \
  --frame-dt 0.1 --mesh h=2 --overwrite --log-level warn || exit 1
truncate -s -100 ns_cut.nc || exit 1
common="--data ns_cut.nc --steps 2 --batch 2 --modes 2 --width 4 --layers 1 --proj-width 8
        --history 2 --test-samples 2 --log-level warn"
fail=0
for args in "--mesh h=2" "--mesh w=2" "--mesh h=2 --backend serial"; do
  # shellcheck disable=SC2086
  sh "$src/tests/examples/expect_fail.sh" "ns_cut.nc is truncated" 90 \
    "$mpiexec" -n 2 "$bin/sg-train" $common $args || fail=1
done
exit $fail
