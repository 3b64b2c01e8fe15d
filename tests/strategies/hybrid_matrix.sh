#!/bin/sh
# Hybrid runs on one mesh (issue 19 §1): the equivalence matrix. The pairs
# of the mesh dims a model supports, {dp, fsdp (zero 1 and zero 3), pp, tp,
# h, w} (the ViT: ring attention over h and w, Megatron over tp; the FNO:
# spectral layers paired column/row over tp), and the triples
# pp=2,fsdp=2,h=2 and pp=2,dp=2,w=2 (the FNO), pp=2,tp=2,h=2 (both: for the
# ViT ring attention over h inside tp inside a pipeline stage) and
# dp=2,tp=2,h=2 and HSDP on a split domain dp=2,fsdp=2,h=2 (the ViT, with
# dp=2,fsdp=2,sp=2 and pp=2,dp=2,fsdp=2: the samples over two batch dims): 10
# AdamW steps (deterministic
# mode) whose losses and global gradient norms equal the one-process run
# to 1e-5 relative per step, whose final test evaluation does too, and
# whose final parameters equal the one-process checkpoint's (check_runs.py,
# one Python process for the whole matrix). The gradient norm is the check
# that each element counts once: TP-sharded weights not tp times,
# replicated ones not once per replica, pipeline stages summed once.
# pp runs use zero 1 (zero 2/3 inside a stage: docs/pipeline.md) and go
# round the schedules (gpipe, 1f1b, interleaved, zb-h1); pp need not be
# the outermost dim (w=2,pp=2 and tp=2,pp=2).
# The pairs that other tests already check the same way (losses, gradient
# norms, evaluation and final parameters against one process) are not run
# again here (CI time): the FNO's dp x fsdp (zero 1, 3) and fsdp x h
# (zero 1, 3) in plan_trajectories.sh, pp x dp and pp x h in
# pipeline_trajectories.sh; dp x tp and tp x h in train_trajectories.sh
# vit_tp and fno_tp, the ViT's fsdp x tp (zero 1) there too
# (docs/strategies.md, "Hybrid meshes", has the whole table).
# Task swin: the Swin (window 2 on 4x4 tokens) on the pairs of h, w, tp
# with fsdp and pp that train_trajectories_swin and _swin_navy do not
# check (zero 1 and 3 alternating), dp=2,tp=2,h=2 and dp=2,fsdp=2,h=2.
# Task vit16: one 16-rank run over four dims at once, the ViT on
# pp=2,fsdp=2,tp=2,h=2 (zero 1), against one process the same way.
# Tasks cnn, unet: HSDP on a split domain, dp=2,fsdp=2,h=2 (zero 1 and
# zero 3): the samples split by two mesh dims (Shard(0) over dp and fsdp,
# nested), the GroupNorm statistics and the halos over h; the conv nets'
# other pairs are in plan_trajectories.sh, train_trajectories.sh and
# pipeline_trajectories.sh.
#   hybrid_matrix.sh fno|vit|vit16|swin|cnn|unet BIN_DIR MPIEXEC WORK_DIR SRC_DIR
set -eu
model=$1 bin=$2 mpiexec=$3 work=$4 src=$5
mkdir -p "$work"
cd "$work"
"$mpiexec" -n 2 "$bin/sg-ns2d" --out ns16.nc --n 16 --samples 10 --frames 5 --dt 1e-2 \
  --frame-dt 0.1 --mesh h=2 --overwrite --log-level warn
case $model in
fno) size="--model fno --width 8 --modes 4 --layers 2 --proj-width 16" ;; # 4 pieces
# 4 pieces (embedding, 2 blocks, head); 2 heads: tp = 2; 4x4 tokens: ring
# attention over h = 2 or w = 2
vit | vit16) size="--model vit --width 8 --heads 2 --depth 2 --patch 4" ;;
# 4x4 tokens, window 2 (the second block shifted by 1, its windows
# crossing the shard boundaries): h = 2 or w = 2 hold whole windows
swin) size="--model swin --width 8 --heads 2 --depth 2 --patch 4 --window 2" ;;
# 2 residual blocks, GroupNorm of 2 groups; the U-Net 2 levels (16 -> 8
# points: 4 rows a rank at the bottom on h = 2)
cnn) size="--model cnn --width 8 --blocks 2 --groups 2 --proj-width 16" ;;
unet) size="--model unet --width 8 --levels 2 --groups 2 --proj-width 16" ;;
*) echo "unknown model $model"; exit 2 ;;
esac
# batch 12: 6 per data replica, 3 per micro-batch (m = 2)
common="$size --data ns16.nc --steps 10 --batch 12 --history 2 --test-samples 2
        --deterministic --log-every 1000 --log-level warn --check-every 5"
runs=""
run() { # NAME RANKS MESH [extra args]: sg-train, metrics in NAME.jsonl, checkpoint in ck_NAME
  name=$1 n=$2 spec=$3
  shift 3
  rc=0
  rm -rf "ck_$name"
  t0=$(date +%s)
  # shellcheck disable=SC2086
  "$mpiexec" -n "$n" "$bin/sg-train" $common --mesh "$spec" --metrics "$name.jsonl" --ckpt-dir "ck_$name" "$@" \
    >"$name.log" 2>&1 || rc=$?
  if [ $rc -ne 0 ]; then cat "$name.log"; echo "FAILED: $model $name (mesh $spec $*)"; exit 1; fi
  echo "$name: $n ranks, mesh $spec $*: $(($(date +%s) - t0)) s"
  [ "$name" = ref ] || runs="$runs $name"
}
vit_run() { # the same for the ViT only (the FNO's run is in another test, above)
  [ "$model" = fno ] || run "$@"
}
fno_run() { # the same for the FNO only
  [ "$model" != fno ] || run "$@"
}
pp() { # SCHEDULE: a pipeline's keys (2 micro-batches; interleaved: 2 chunks per stage)
  echo "--pp-schedule $1 --microbatches 2"
}
run ref 1 h=1
if [ "$model" = vit16 ]; then
  # shellcheck disable=SC2046
  run q16 16 pp=2,fsdp=2,tp=2,h=2 --zero 1 $(pp 1f1b)
elif [ "$model" = cnn ] || [ "$model" = unet ]; then
  run hsdp_h 8 dp=2,fsdp=2,h=2 --zero 1
  run hsdp_h3 8 dp=2,fsdp=2,h=2 --zero 3
elif [ "$model" = swin ]; then
  # the Swin: the pairs of its own parts (the window attention over h, w;
  # its heads over tp; its pieces in a pipeline) with the other dims that
  # train_trajectories_swin (h x w, dp x h, tp x h) and _swin_navy
  # (dp x tp) do not check, zero 1 and 3 alternating, and the triple
  # dp=2,tp=2,h=2. Not run again (CI time): dp x w (dp x h is) and fsdp x
  # tp (fsdp x h and x w are); the pairs of dp, fsdp and pp alone run the
  # plan's and the pipeline's code, the same for every model (the FNO's
  # and the ViT's runs below)
  # shellcheck disable=SC2046
  {
    run z1_h 4 fsdp=2,h=2 --zero 1
    run z3_w 4 fsdp=2,w=2 --zero 3
    run tp_w 4 tp=2,w=2
    run pp_h 4 pp=2,h=2 $(pp zb-h1)
    run pp_w 4 w=2,pp=2 $(pp interleaved)
    run pp_tp 4 tp=2,pp=2 $(pp 1f1b)
    run dp_tp_h 8 dp=2,tp=2,h=2
    # HSDP on a split domain: the samples over two batch dims (Shard(0)
    # over dp and fsdp, nested), the shifted windows' rolls over h
    run hsdp_h 8 dp=2,fsdp=2,h=2 --zero 1
  }
else
  # pairs without pp
  vit_run dp_z1 4 dp=2,fsdp=2 --zero 1
  vit_run dp_z3 4 dp=2,fsdp=2 --zero 3
  run dp_h 4 dp=2,h=2
  run dp_w 4 dp=2,w=2
  vit_run z1_h 4 fsdp=2,h=2 --zero 1
  vit_run z3_h 4 fsdp=2,h=2 --zero 3
  run z1_w 4 fsdp=2,w=2 --zero 1
  run z3_w 4 fsdp=2,w=2 --zero 3
  run h_w 4 h=2,w=2
  # pairs with pp (zero 1 only), then the triples
  # shellcheck disable=SC2046
  {
    vit_run pp_dp 4 pp=2,dp=2 $(pp gpipe)
    run pp_z1 4 pp=2,fsdp=2 --zero 1 $(pp 1f1b)
    vit_run pp_h 4 pp=2,h=2 $(pp zb-h1)
    run pp_w 4 w=2,pp=2 $(pp interleaved) # pp need not be outermost
    # the 8-rank triples without tp on the FNO only (CI time; the ViT's
    # ring attention inside a pipeline stage is in pp_h, pp_w, pp_tp_h)
    fno_run pp_z1_h 8 pp=2,fsdp=2,h=2 --zero 1 $(pp 1f1b)
    fno_run pp_dp_w 8 pp=2,dp=2,w=2 $(pp interleaved)
  }
  # tensor parallelism (the FNO: its spectral layers paired column/row
  # over tp; a pipeline piece is the pair)
  # shellcheck disable=SC2046
  {
    fno_run z1_tp 4 fsdp=2,tp=2 --zero 1
    run z3_tp 4 fsdp=2,tp=2 --zero 3
    run tp_w 4 tp=2,w=2
    run pp_tp 4 tp=2,pp=2 $(pp 1f1b)
    vit_run dp_tp_h 8 dp=2,tp=2,h=2
    run pp_tp_h 8 pp=2,tp=2,h=2 $(pp zb-h1)
    # HSDP on a split domain: the samples over two batch dims (Shard(0)
    # over dp and fsdp, nested, as the conv nets'), and with sp (ring
    # attention over sp, zero 3) and in a pipeline (3 micro-batches of 1)
    vit_run hsdp_h 8 dp=2,fsdp=2,h=2 --zero 1
    vit_run hsdp_sp 8 dp=2,fsdp=2,sp=2 --zero 3
    vit_run pp_hsdp 8 pp=2,dp=2,fsdp=2 --zero 1 --pp-schedule 1f1b --microbatches 3
  }
fi
exclude=""
# the ViT's key bias (row 1 of qkv.b) has a zero gradient: AdamW turns its
# rounding noise into steps of size lr on any mesh; the loss does not
# depend on it (its q and v rows are checked)
case $model in vit | vit16 | swin) exclude="--exclude qkv.b[1]" ;; esac
# shellcheck disable=SC2086
/usr/bin/python3 "$src/tests/strategies/check_runs.py" 1e-5 1e-6 $exclude $runs
echo "hybrid matrix ($model): every mesh equal to one process"
