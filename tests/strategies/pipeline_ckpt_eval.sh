#!/bin/sh
# Pipeline checkpoints and evaluation end to end (sg-train with a pp mesh
# dim, issue 18). Per model with pipeline pieces (one `check` line each):
#  - a pp=2 run writes one checkpoint per step in the usual format: its
#    parameters and moments equal the one-process checkpoint's, the same
#    variables; its losses, evaluations (eval_every and the final test
#    evaluation, run forward through the stages), predictions (predict)
#    and 3-frame rollout equal the one-process run's;
#  - checkpoints load on any mesh: pp=2's on 1 rank and on h=2 (which
#    writes again), the 1-rank one on pp=2 and under interleaved (pp=2 x 2
#    chunks: a stage's pieces are not contiguous in the table), h=2's on
#    pp=3 and on pp=2,fsdp=2 (zero 1: moments sharded inside a stage), the
#    interleaved run's on 1 rank; every continued run's losses,
#    evaluations and rollout equal the uninterrupted one-process run's
#    (relative 1e-5), and what the interleaved and the zero-1 pipelines
#    write at the end equals the one-process checkpoint.
#   pipeline_ckpt_eval.sh BIN_DIR MPIEXEC WORK_DIR SRC_DIR
set -eu
bin=$1 mpiexec=$2 work=$3 src=$4
mkdir -p "$work"
cd "$work"
cmp="python3 $src/tests/examples/compare_losses.py"
cmpp="/usr/bin/python3 $src/tests/examples/compare_params.py"
"$mpiexec" -n 2 "$bin/sg-ns2d" --out ns.nc --n 16 --samples 10 --frames 5 --dt 1e-2 \
  --frame-dt 0.1 --mesh h=2 --overwrite --log-level warn
run() { # NAME RANKS MESH [extra args]: sg-train, metrics in NAME.jsonl
  name=$1 n=$2 spec=$3
  shift 3
  rc=0
  # shellcheck disable=SC2086
  "$mpiexec" -n "$n" "$bin/sg-train" $common --mesh "$spec" --metrics "$name.jsonl" "$@" \
    >"$name.log" 2>&1 || rc=$?
  if [ $rc -ne 0 ]; then cat "$name.log"; echo "FAILED: $name (mesh $spec $*)"; exit 1; fi
}
same() { # NAME: its losses and evaluations equal the one-process run's
  $cmp "$1.jsonl" ref.jsonl 1e-5
  $cmp "$1.jsonl" ref.jsonl 1e-5 --eval
  $cmp "$1.jsonl" ref.jsonl 1e-5 --key rollout_rel_l2
}
resume() { # NAME RANKS MESH CHECKPOINT [extra]: continue from CHECKPOINT
  name=$1 n=$2 spec=$3 ck=$4
  shift 4
  rm -rf "ck_$name"
  run "$name" "$n" "$spec" --resume "$ck" --ckpt-dir "ck_$name" --ckpt-every 3 "$@"
  grep -q "resumed from $ck" "$name.log" || { cat "$name.log"; echo "FAILED: $name did not resume"; exit 1; }
  same "$name"
}
check() { # MODEL [model args]: the whole matrix for one model
  model=$1
  shift
  mkdir -p "$model"
  cd "$model"
  common="--model $model --data ../ns.nc --steps 12 --batch 8 --history 2 --test-samples 2
          --deterministic --log-every 1000 --log-level info --eval-every 4 --rollout 3 $*"
  rm -rf ck_ref ck_pp2
  run ref 1 h=1 --ckpt-dir ck_ref --ckpt-every 6 --predict ref.nc
  run pp2 2 pp=2 --microbatches 2 --ckpt-dir ck_pp2 --ckpt-every 6 --predict pp2.nc
  $cmp ref.jsonl pp2.jsonl 1e-5 # every step and evaluation of ref
  $cmp ref.jsonl pp2.jsonl 1e-5 --eval
  $cmp ref.jsonl pp2.jsonl 1e-5 --key rollout_rel_l2
  [ "$(ls ck_pp2)" = "$(printf 'step_000006.nc\nstep_000012.nc')" ] ||
    { ls ck_pp2; echo "FAILED: pp=2 writes one checkpoint per step"; exit 1; }
  for s in 000006 000012; do
    $cmpp "ck_ref/step_$s.nc" "ck_pp2/step_$s.nc" 1e-5 1e-6
    $cmpp "ck_ref/step_$s.nc" "ck_pp2/step_$s.nc" 1e-4 1e-6 --prefix adam_ --scaled-atol
    $cmpp "ck_pp2/step_$s.nc" "ck_ref/step_$s.nc" 1e-4 1e-6 --prefix "" # no extra variables
  done
  $cmpp ref.nc pp2.nc 1e-5 1e-6 --prefix ""
  resume r1 1 h=1 ck_pp2/step_000006.nc
  resume rh2 2 h=2 ck_pp2/step_000006.nc
  resume rpp2 2 pp=2 ck_ref/step_000006.nc --microbatches 2
  resume ril 2 pp=2 ck_ref/step_000006.nc --pp-schedule interleaved --microbatches 2
  resume rpp3 3 pp=3 ck_rh2/step_000009.nc --microbatches 4
  resume rz1 4 pp=2,fsdp=2 ck_rh2/step_000009.nc --zero 1 --microbatches 2
  resume ril1 1 h=1 ck_ril/step_000009.nc
  for name in ril rz1; do # written by an interleaved and a zero-1 pipeline
    $cmpp ck_ref/step_000012.nc "ck_$name/step_000012.nc" 1e-5 1e-6
    $cmpp ck_ref/step_000012.nc "ck_$name/step_000012.nc" 1e-4 1e-6 --prefix adam_ --scaled-atol
  done
  cd ..
}
# one line per model with pipeline pieces (sg_model_nblocks > 0)
check cnn --width 8 --blocks 3 --groups 2 --proj-width 16
echo "pipeline checkpoints and evaluation: all equal to one process"
