#!/bin/sh
# Threads per rank do not change the numbers: sg-train's CNN and U-Net (f32,
# one rank, three steps) at OMP_NUM_THREADS 1, 2 and 3 print the same bits of
# every step's loss and gradient norm and of the final evaluation (the
# metrics print doubles to 17 digits; relative tolerance 0). 48 x 48 grids:
# the 3x3 convolutions' three tiles per image (rows 22 + 22 + 4), so both
# phases of the backward's col2im and uneven slot runs are exercised.
#   train_threads.sh BIN_DIR MPIEXEC WORK_DIR SRC_DIR
set -u
bin=$1 mpiexec=$2 work=$3 src=$4
mkdir -p "$work" && cd "$work" || exit 1
OMP_NUM_THREADS=1 "$mpiexec" -n 1 "$bin/sg-ns2d" --out ns.nc --n 48 --samples 5 --frames 5 \
  --dt 1e-2 --frame-dt 0.1 --overwrite --log-level warn || exit 1
fail=0
for model in cnn unet; do
  case $model in
    cnn) size="--width 8 --blocks 2 --kernel 3 --groups 4 --proj-width 16" ;;
    unet) size="--width 8 --levels 2 --groups 4" ;;
  esac
  for th in 1 2 3; do
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=$th "$mpiexec" -n 1 "$bin/sg-train" --model $model --data ns.nc $size \
      --history 2 --batch 3 --steps 3 --test-samples 1 --mesh h=1 --log-level warn \
      --metrics "${model}_$th.json" >/dev/null || { echo "sg-train $model, $th threads failed"; exit 1; }
  done
  for th in 2 3; do
    for key in loss grad_norm eval_rel_l2; do
      python3 "$src/tests/examples/compare_losses.py" "${model}_1.json" "${model}_$th.json" 0 \
        --key $key || fail=1
    done
  done
done
exit $fail
