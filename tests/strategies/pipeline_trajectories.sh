#!/bin/sh
# Pipeline parallelism end to end (sg-train with a pp mesh dim, issue 18):
# MODEL (fno, cnn or unet) cut into its pieces; per mesh and schedule, 20
# AdamW steps (deterministic mode) whose losses and gradient norms equal
# the one-process run to 1e-5 relative per step, whose final test
# evaluation (forward through the stages) does too, and whose final
# parameters (the pipeline's one checkpoint, written by every stage) equal
# the one-process checkpoint's. Meshes pp=2, pp=3 (uneven
# pieces), pp=2,h=2 (halos, GroupNorm statistics, the FFT and the FNO's
# mode-sharded spectral weights over the domain inside a stage) and
# pp=2,dp=2, each under gpipe, 1f1b, interleaved (pp=2 x 2 chunks; not on
# pp=3: 6 virtual stages need m a multiple of 3) and zb-h1. The CNN also:
# an explicit pp_split, pp=2,fsdp=2 with zero 1, activation checkpointing,
# and zb-h1 (the tape's split backward) on pp=2,h=2 with checkpointed blocks.
# The U-Net's skips cross the cuts (on pp=3 skip 0 crosses stage 1). The
# pp=2 runs split by measured cost (pp_split = auto, the default), pp=3 by
# count (even) or an explicit list.
#   pipeline_trajectories.sh BIN_DIR MPIEXEC WORK_DIR SRC_DIR DATA MODEL
# MODEL data: make the dataset DATA (once, for every model: the CTest
# fixture pipeline_traj_data).
set -eu
bin=$1 mpiexec=$2 work=$3 src=$4 data=$5 model=$6
mkdir -p "$work"
cd "$work"
if [ "$model" = data ]; then
  exec "$mpiexec" -n 2 "$bin/sg-ns2d" --out "$data" --n 16 --samples 10 --frames 5 --dt 1e-2 \
    --frame-dt 0.1 --mesh h=2 --overwrite --log-level warn
fi
case $model in
# atol: the parameters' absolute tolerance (their scale is 0.1). The
# U-Net's 5e-6: one weight of 1152 (enc2.conv1.w, a near-zero gradient
# that AdamW normalises) ends 2.6e-6 from one process on h=2 without any
# pipeline too (the domain split's sums); the pipelines give the same.
fno) size="--width 8 --modes 4 --layers 3 --proj-width 16" p3="--pp-split even" atol=1e-6 ;;  # 5 pieces: 2, 2, 1
cnn) size="--width 8 --blocks 3 --groups 2 --proj-width 16" p3="--pp-split even" atol=1e-6 ;; # 5 pieces: 2, 2, 1
unet) size="--width 4 --levels 3 --groups 2" p3="--pp-split 1,3" atol=5e-6 ;;  # 6 pieces: 1, 2, 3
*) echo "unknown model $model"; exit 2 ;;
esac
common="--model $model $size --data $data --steps 20 --batch 8 --history 2 --test-samples 2
        --deterministic --log-every 1000 --log-level warn --check-every 4"
runs=""
run() { # NAME RANKS MESH [extra args]: sg-train, metrics in NAME.jsonl, checkpoints in ck_NAME
  name=$1 n=$2 spec=$3
  shift 3
  rc=0
  rm -rf "ck_$name"
  # shellcheck disable=SC2086
  "$mpiexec" -n "$n" "$bin/sg-train" $common --mesh "$spec" --metrics "$name.jsonl" --ckpt-dir "ck_$name" "$@" \
    >"$name.log" 2>&1 || rc=$?
  if [ $rc -ne 0 ]; then cat "$name.log"; echo "FAILED: $model $name (mesh $spec $*)"; exit 1; fi
  [ "$name" = ref ] || runs="$runs $name"
}
run ref 1 h=1
for mesh in pp=2:2 pp=3:3 pp=2,h=2:4 pp=2,dp=2:4; do
  spec=${mesh%:*} n=${mesh#*:} tag=$(echo "${mesh%:*}" | tr -d '=,')
  split=""
  [ "$spec" = pp=3 ] && split=$p3
  # shellcheck disable=SC2086
  run "g_$tag" "$n" "$spec" --pp-schedule gpipe --microbatches 2 $split
  # shellcheck disable=SC2086
  run "f_$tag" "$n" "$spec" --pp-schedule 1f1b --microbatches 4 $split
  [ "$spec" = pp=3 ] || run "i_$tag" "$n" "$spec" --pp-schedule interleaved --microbatches 2 --pp-virtual 2
  # shellcheck disable=SC2086
  run "z_$tag" "$n" "$spec" --pp-schedule zb-h1 --microbatches 4 $split
done
if [ "$model" = cnn ]; then
  run split 2 pp=2 --pp-schedule 1f1b --microbatches 2 --pp-split 4
  run z1 4 pp=2,fsdp=2 --zero 1 --pp-schedule 1f1b --microbatches 2
  run ac 2 pp=2 --pp-schedule 1f1b --microbatches 2 --activation-checkpointing blocks
  # zb-h1's split backward with halos and sharded GroupNorm statistics in
  # both passes, and checkpointed blocks (run whole in B)
  run zbh 4 pp=2,h=2 --pp-schedule zb-h1 --microbatches 2 --activation-checkpointing blocks
fi
# shellcheck disable=SC2086
/usr/bin/python3 "$src/tests/strategies/check_runs.py" 1e-5 $atol $runs
echo "pipeline trajectories ($model): all equal to one process"
