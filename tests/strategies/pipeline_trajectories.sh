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
# ZeRO inside the stages (pp=2,fsdp=2; every micro-batch's tape carries the
# plan's hooks), in place of pp=2,dp=2 under 1f1b and zb-h1: zero 3 (FSDP:
# gathers in every F, B and W) and zero 2, the FNO under 1f1b (zero 3) and
# zb-h1 (zero 2), the CNN the other way round, at 1e-5 like the rest; the
# FNO's zero-3 checkpoint of step 10 resumes on 1 rank with the
# one-process losses. bf16 (param_dtype, CNN) against the one-process
# bf16 run: pp=2 with one micro-batch at 1e-5 (the same roundings; f32
# sums in another order only), pp=2,fsdp=2 zero 3 zb-h1 with 2
# micro-batches at 5e-3 relative (parameters 1e-4 absolute): a gradient is
# rounded to bf16 each time it is ready, and with micro-batches in flight,
# or split over the fsdp ranks before the reduction, that happens to other
# partial sums than in one process: bf16's 2^-8 resolution (measured
# 7e-4 at worst over 20 steps; 1.3e-3 for pp=2 1f1b with 4).
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
  ms=${mesh%:*} n=${mesh#*:} tag=$(echo "${mesh%:*}" | tr -d '=,') # (run sets spec)
  split=""
  [ "$ms" = pp=3 ] && split=$p3
  # shellcheck disable=SC2086
  run "g_$tag" "$n" "$ms" --pp-schedule gpipe --microbatches 2 $split
  # ZeRO inside the stages: on the FNO and the CNN, 1f1b and zb-h1 run on
  # pp=2,fsdp=2 in place of pp=2,dp=2 (gpipe, interleaved and the U-Net
  # keep DDP inside a stage; m = 2: still two micro-batches in flight on
  # stage 0, at half the collectives of m = 4)
  fspec=$ms ftag=$tag fz="--microbatches 4" zspec=$ms ztag=$tag zz="--microbatches 4"
  if [ "$ms" = pp=2,dp=2 ] && [ "$model" != unet ]; then
    fspec=pp=2,fsdp=2 ftag=pp2fsdp2 zspec=pp=2,fsdp=2 ztag=pp2fsdp2
    fz="--microbatches 2 --zero 3 --ckpt-every 10" zz="--microbatches 2 --zero 2"
    [ "$model" = fno ] || fz="--microbatches 2 --zero 2" zz="--microbatches 2 --zero 3"
  fi
  # shellcheck disable=SC2086
  run "f_$ftag" "$n" "$fspec" --pp-schedule 1f1b $split $fz
  [ "$ms" = pp=3 ] || run "i_$tag" "$n" "$ms" --pp-schedule interleaved --microbatches 2 --pp-virtual 2
  # shellcheck disable=SC2086
  run "z_$ztag" "$n" "$zspec" --pp-schedule zb-h1 $split $zz
done
if [ "$model" = cnn ]; then
  run split 2 pp=2 --pp-schedule 1f1b --microbatches 2 --pp-split 4
  run z1 4 pp=2,fsdp=2 --zero 1 --pp-schedule 1f1b --microbatches 2
  run ac 2 pp=2 --pp-schedule 1f1b --microbatches 2 --activation-checkpointing blocks
  # zb-h1's split backward with halos and sharded GroupNorm statistics in
  # both passes, and checkpointed blocks (run whole in B)
  run zbh 4 pp=2,h=2 --pp-schedule zb-h1 --microbatches 2 --activation-checkpointing blocks
fi
if [ "$model" = fno ]; then # the zero-3 pipeline's checkpoint on 1 rank
  run z3res 1 h=1 --resume ck_f_pp2fsdp2/step_000010.nc
  runs=${runs% z3res} # steps 11.. only: its losses
  /usr/bin/python3 "$src/tests/examples/compare_losses.py" z3res.jsonl ref.jsonl 1e-5
fi
if [ "$model" = cnn ]; then # bf16 against the one-process bf16 run
  run ref16 1 h=1 --param-dtype bf16
  run b16 2 pp=2 --param-dtype bf16 --pp-schedule gpipe --microbatches 1
  run b16z 4 pp=2,fsdp=2 --zero 3 --param-dtype bf16 --pp-schedule zb-h1 --microbatches 2
  runs=${runs% ref16 b16 b16z}
  /usr/bin/python3 "$src/tests/strategies/check_runs.py" --ref ref16 1e-5 1e-6 b16
  /usr/bin/python3 "$src/tests/strategies/check_runs.py" --ref ref16 5e-3 1e-4 b16z
fi
# shellcheck disable=SC2086
/usr/bin/python3 "$src/tests/strategies/check_runs.py" 1e-5 $atol $runs
echo "pipeline trajectories ($model): all equal to one process"
