#!/bin/sh
# Pipeline parallelism end to end (sg-train with a pp mesh dim, issue 18):
# the CNN cut into its pieces (lift, 3 residual blocks, projection) over
# 2-4 ranks; 12-step loss trajectories and gradient norms (deterministic
# mode) equal to the one-process run to 1e-5 relative per step, and the
# final parameters (each stage's checkpoint, together covering every
# parameter) too: pp=2 under gpipe and 1f1b, pp=3 (pieces 2, 2, 1), an
# explicit pp_split, interleaved (pp=2 x 2 chunks), zb-h1 (the tape's split
# backward; also on pp=2,h=2 with checkpointed blocks), pp=2,dp=2 and
# pp=2,h=2 (halos and GroupNorm statistics over the domain in a stage),
# pp=2,fsdp=2 with zero 1,
# activation checkpointing inside the stages.
#   pipeline_trajectories.sh BIN_DIR MPIEXEC WORK_DIR SRC_DIR
set -eu
bin=$1 mpiexec=$2 work=$3 src=$4
mkdir -p "$work"
cd "$work"
cmp="python3 $src/tests/examples/compare_losses.py"
"$mpiexec" -n 2 "$bin/sg-ns2d" --out ns.nc --n 16 --samples 10 --frames 5 --dt 1e-2 \
  --frame-dt 0.1 --mesh h=2 --overwrite --log-level warn
common="--model cnn --data ns.nc --steps 12 --batch 8 --width 8 --blocks 3 --groups 2 --proj-width 16
        --history 2 --test-samples 2 --deterministic --log-every 1000 --log-level warn --check-every 4"
run() { # NAME RANKS MESH [extra args]: run sg-train, metrics in NAME.jsonl, checkpoints in ck_NAME
  name=$1 n=$2 spec=$3
  shift 3
  rc=0
  rm -rf "ck_$name"
  # shellcheck disable=SC2086
  "$mpiexec" -n "$n" "$bin/sg-train" $common --mesh "$spec" --metrics "$name.jsonl" --ckpt-dir "ck_$name" "$@" \
    >"$name.log" 2>&1 || rc=$?
  if [ $rc -ne 0 ]; then cat "$name.log"; echo "FAILED: $name (mesh $spec $*)"; exit 1; fi
}
same() { # NAME RANKS MESH [extra]: trajectory, gradient norms and final parameters equal to ref
  run "$@"
  $cmp ref.jsonl "$1.jsonl" 1e-5
  $cmp ref.jsonl "$1.jsonl" 1e-5 --key grad_norm
  for f in "ck_$1"/step_000012.stage*.nc; do
    /usr/bin/python3 "$src/tests/examples/compare_params.py" "$f" ck_ref/step_000012.nc 1e-5 1e-6
  done
  /usr/bin/python3 - ck_ref/step_000012.nc "ck_$1"/step_000012.stage*.nc <<'PY'
import sys, netCDF4
names = lambda p: {n for n in netCDF4.Dataset(p).variables if n.startswith("params.")}
ref, parts = names(sys.argv[1]), [names(p) for p in sys.argv[2:]]
union = set().union(*parts)
if union != ref or sum(map(len, parts)) != len(ref):
    sys.exit(f"stages hold {sorted(union)}, not each of {sorted(ref)} once")
PY
}
run ref 1 h=1
same g2 2 pp=2 --pp-schedule gpipe --microbatches 2
same f2 2 pp=2 --pp-schedule 1f1b --microbatches 4
same f3 3 pp=3 --pp-schedule 1f1b --microbatches 4
same split 2 pp=2 --pp-schedule 1f1b --microbatches 2 --pp-split 4
same il 2 pp=2 --pp-schedule interleaved --microbatches 2 --pp-virtual 2
same zb 2 pp=2 --pp-schedule zb-h1 --microbatches 4
same dp 4 pp=2,dp=2 --pp-schedule 1f1b --microbatches 2
same h 4 pp=2,h=2 --pp-schedule gpipe --microbatches 2
same z1 4 pp=2,fsdp=2 --zero 1 --pp-schedule 1f1b --microbatches 2
same ac 2 pp=2 --pp-schedule 1f1b --microbatches 2 --activation-checkpointing blocks
# zb-h1's split backward with halos and sharded GroupNorm statistics in both
# passes, and checkpointed blocks (run whole in B)
same zbh 4 pp=2,h=2 --pp-schedule zb-h1 --microbatches 2 --activation-checkpointing blocks
echo "pipeline trajectories: all equal to one process"
