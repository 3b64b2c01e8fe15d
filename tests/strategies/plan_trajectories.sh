#!/bin/sh
# The parallel plan end to end (sg-train over strategies/sg_parallel.h):
# 10-step loss trajectories (deterministic mode) of ZeRO-1 on fsdp meshes,
# HSDP (dp x fsdp), ZeRO over the domain dims, plain dp for every model
# (the FNO's mode-sharded spectral weights included), and gradient
# accumulation, each equal to the one-process run to 1e-5 relative per step
# (and the gradient norms, the final test error and the final parameters),
# for zero = 1, 2, 3; ZeRO with
# deterministic reductions gives the same bits as DDP on a mesh of the same
# shape; a checkpoint written under zero=3 on fsdp=4 resumes on 1 rank, on
# h=2 and on dp=2,fsdp=2 (zero 1) with the losses of the uninterrupted run;
# a bf16 (param_dtype) checkpoint resumes with the same bits.
#   plan_trajectories.sh fno|cnn|unet BIN_DIR MPIEXEC WORK_DIR SRC_DIR
set -eu
model=$1 bin=$2 mpiexec=$3 work=$4 src=$5
mkdir -p "$work"
cd "$work"
cmp="python3 $src/tests/examples/compare_losses.py"
"$mpiexec" -n 2 "$bin/sg-ns2d" --out ns.nc --n 24 --samples 10 --frames 5 --dt 1e-2 \
  --frame-dt 0.1 --mesh h=2 --overwrite --log-level warn
common="--model $model --data ns.nc --steps 10 --batch 12 --width 8 --modes 4 --layers 2 --blocks 2
        --levels 2 --groups 2 --proj-width 16 --history 2 --test-samples 2 --deterministic
        --log-every 1000 --log-level warn --check-every 5"
run() { # NAME RANKS MESH [extra args]: run sg-train, metrics in NAME.jsonl
  name=$1 n=$2 spec=$3
  shift 3
  rc=0
  # shellcheck disable=SC2086
  "$mpiexec" -n "$n" "$bin/sg-train" $common --mesh "$spec" --metrics "$name.jsonl" "$@" >"$name.log" 2>&1 || rc=$?
  if [ $rc -ne 0 ]; then cat "$name.log"; echo "FAILED: $name (mesh $spec $*)"; exit 1; fi
}
runs=""
same() { # NAME RANKS MESH [extra]: trajectory, gradient norms, final error
  # and final parameters equal to ref (checked together by check_runs.py
  # after the matrix: one Python process for all runs)
  run "$@" --ckpt-dir "ck_$1"
  runs="$runs $1"
}
run ref 1 h=1 --ckpt-dir ck_ref
same dp2 2 dp=2
same fsdp2 2 fsdp=2 --zero 1
same fsdp3 3 fsdp=3 --zero 1
same fsdp2h2 4 fsdp=2,h=2 --zero 1
same z2 2 fsdp=2 --zero 2
same z3 4 fsdp=4 --zero 3
same z3h 4 fsdp=2,h=2 --zero 3
same z3u 3 fsdp=3 --zero 3
same z3dom 4 h=2,w=2 --zero 3 --zero-over-domain
same z3hsdp 4 dp=2,fsdp=2 --zero 3
if [ "$model" = fno ]; then # the conv nets take the same plan paths: fewer runs
  same hsdp 4 dp=2,fsdp=2 --zero 1
  same zdom 4 h=2,w=2 --zero 1 --zero-over-domain
  same accum 2 fsdp=2 --zero 1 --grad-accum 2
  same z3acc 2 fsdp=2 --zero 3 --grad-accum 2
fi
# shellcheck disable=SC2086
/usr/bin/python3 "$src/tests/strategies/check_runs.py" 1e-5 1e-6 $runs
# deterministic ZeRO reduces like DDP: the same bits as dp=2
$cmp dp2.jsonl fsdp2.jsonl 0
$cmp dp2.jsonl z2.jsonl 0
if [ "$model" = fno ]; then
  # checkpoints of a zero=3 run on fsdp=4 (parameters and moments sharded)
  # resume anywhere
  rm -rf ck
  run full4 4 fsdp=4 --zero 3 --ckpt-dir ck --ckpt-every 5
  $cmp ref.jsonl full4.jsonl 1e-5
  run res1 1 h=1 --resume ck/step_000005.nc
  $cmp res1.jsonl full4.jsonl 1e-5
  run resh2 2 h=2 --resume ck/step_000005.nc
  $cmp resh2.jsonl full4.jsonl 1e-5
  run reshsdp 4 dp=2,fsdp=2 --zero 1 --resume ck/step_000005.nc
  $cmp reshsdp.jsonl full4.jsonl 1e-5
  # bf16 (param_dtype): the fp32 master weights and moments are what a
  # checkpoint holds; a resume makes the bf16 compute copy from them and
  # continues with the same bits
  run b16 2 fsdp=2 --zero 3 --param-dtype bf16 --ckpt-dir ck16 --ckpt-every 5
  run b16r 2 fsdp=2 --zero 3 --param-dtype bf16 --resume ck16/step_000005.nc
  $cmp b16r.jsonl b16.jsonl 0
  run b16d 2 dp=2 --param-dtype bf16 --resume ck16/step_000005.nc
  $cmp b16d.jsonl b16.jsonl 0 # deterministic: zero 3 reduces as DDP does
  # resuming at or past the last step is an error, not a silent exit 0
  # shellcheck disable=SC2086
  sh "$src/tests/examples/expect_fail.sh" "is at step 10: nothing left of 10 steps" 60 \
    "$mpiexec" -n 1 "$bin/sg-train" $common --mesh h=1 --resume ck/step_000010.nc
fi
echo "plan trajectories match ($model)"
