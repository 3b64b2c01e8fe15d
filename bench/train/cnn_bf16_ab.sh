#!/bin/bash
# CPU time per step of the bench/train CNN (width 32, 4 blocks, 64², batch 8),
# one thread: the task-clock of LONG steps minus SHORT steps, / (LONG - SHORT),
# variants alternating within each of ROUNDS rounds (bench/RESULTS.md, "bf16
# convolution"). DATA: an ns.nc as bench/train/run.sh makes it;
# SG_TORCH_PYTHON: a python with torch 2.x for the PyTorch variants.
#   DATA=ns.nc [ROUNDS=2 LONG=20 SHORT=5 VARIANTS="f32 bf16_f32kern bf16_amx torch_f32 torch_bf16"] \
#     bench/train/cnn_bf16_ab.sh
# (bf16_amx_f32dw: the AMX convolution with the weight gradient in f32,
# SG_CONV_BF16_DW=0, as before it had a bf16 kernel; bf16_taperound: the
# tape's separate rounding pass per output, SG_BF16_FUSED_ROUND=0, as before
# the kernels rounded in their epilogues.) MODEL=unet: the U-Net instead
# (sg-train's defaults and unet_torch.py's); THREADS: OpenMP threads;
# f32_base, bf16_base: another build's libshardgrid.so from the folder BASE;
# f32_im2col: the im2col + BLAS convolution (SG_CONV_DIRECT=0).
set -eu
cd "$(dirname "$0")/../.."
THREADS=${THREADS:-1} MODEL=${MODEL:-cnn}
# the widest OpenBLAS kernels this CPU runs, unless the caller chose (tools/env.sh)
source tools/env.sh
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=1
LONG=${LONG:-20} SHORT=${SHORT:-5} ROUNDS=${ROUNDS:-2} py=${SG_TORCH_PYTHON:-/opt/torchref/bin/python}
VARIANTS=${VARIANTS:-"f32 bf16_f32kern bf16_amx torch_f32 torch_bf16"}
case $MODEL in
  cnn) size=(--width 32 --blocks 4 --kernel 3 --groups 4 --proj-width 128)
       tsize=(--width 32 --blocks 4 --groups 4) ;;
  unet) size=(--width 16 --levels 3 --groups 4) tsize=(--width 16 --levels 3 --groups 4) ;;
  *) echo "MODEL: cnn or unet" >&2; exit 2 ;;
esac
sg() { # param dtype, steps
  perf stat -x, -e task-clock build/bin/sg-train --model "$MODEL" --data "$DATA" "${size[@]}" \
    --history 10 --batch 8 --steps "$2" --test-samples 1 --mesh h=1 \
    --param-dtype "$1" --log-every 100000 --log-level warn 2>&1 >/dev/null | grep task-clock | cut -d, -f1
}
pt() { # autocast, steps (after its 5 warm-up steps)
  perf stat -x, -e task-clock "$py" "bench/train/${MODEL}_torch.py" --n 64 --batch 8 --history 10 \
    "${tsize[@]}" --threads "$THREADS" --autocast "$1" --steps "$2" 2>&1 >/dev/null |
    grep task-clock | cut -d, -f1
}
for r in $(seq "$ROUNDS"); do
  for v in $VARIANTS; do
    la=$(cut -d' ' -f1 /proc/loadavg)
    case $v in
      f32) a=$(sg f32 "$LONG"); b=$(sg f32 "$SHORT") ;;
      f32_im2col) a=$(SG_CONV_DIRECT=0 sg f32 "$LONG"); b=$(SG_CONV_DIRECT=0 sg f32 "$SHORT") ;;
      bf16_f32kern) a=$(SG_CONV_BF16=0 sg bf16 "$LONG"); b=$(SG_CONV_BF16=0 sg bf16 "$SHORT") ;;
      bf16_amx) a=$(sg bf16 "$LONG"); b=$(sg bf16 "$SHORT") ;;
      bf16_amx_f32dw) a=$(SG_CONV_BF16_DW=0 sg bf16 "$LONG"); b=$(SG_CONV_BF16_DW=0 sg bf16 "$SHORT") ;;
      f32_base) a=$(LD_LIBRARY_PATH=$BASE sg f32 "$LONG"); b=$(LD_LIBRARY_PATH=$BASE sg f32 "$SHORT") ;;
      bf16_base) a=$(LD_LIBRARY_PATH=$BASE sg bf16 "$LONG"); b=$(LD_LIBRARY_PATH=$BASE sg bf16 "$SHORT") ;;
      bf16_taperound) a=$(SG_BF16_FUSED_ROUND=0 sg bf16 "$LONG"); b=$(SG_BF16_FUSED_ROUND=0 sg bf16 "$SHORT") ;;
      torch_f32) a=$(pt 0 $((LONG - 3))); b=$(pt 0 $((SHORT - 3))) ;;
      torch_bf16) a=$(pt 1 $((LONG - 3))); b=$(pt 1 $((SHORT - 3))) ;;
    esac
    python3 -c "a, b = $a, $b; ms = (a - b) / ($LONG - $SHORT); print(f'round $r $MODEL $THREADS thr $v: {ms:.1f} CPU ms/step, {8000 / ms:.1f} samples/CPU-s, load $la')"
  done
done
