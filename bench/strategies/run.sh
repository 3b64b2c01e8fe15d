#!/usr/bin/env bash
# Strategies benchmark: sg-train samples/s and peak memory per rank for DDP,
# ZeRO-1/2/3 and HSDP, FNO / CNN / U-Net, at 1, 2 and 4 ranks, fp32 and
# bf16 (param_dtype), with and without activation checkpointing, on one
# NS dataset (made here by sg-ns2d). Prints one JSON object per run and a
# markdown table (each run side by side with fp32 DDP on the same rank
# count).
#   bench/strategies/run.sh BUILD_DIR WORK_DIR [STEPS] [MODELS] [CONFIGS]
# MODELS: e.g. "fno cnn"; CONFIGS: "RANKS:MESH:ZERO[:VARIANT] ...", VARIANT
# fp32 (default), bf16 (param_dtype) or ckpt (activation_checkpointing =
# blocks), e.g. "2:dp=2:0 2:fsdp=2:3:bf16" (default: all of the below).
# Medians over the steps after the first 3 (warm-up).
set -euo pipefail
build=$(cd "$1" && pwd) work=$2 steps=${3:-23}
models=${4:-fno cnn unet}
configs=${5:-1:h=1:0 1:h=1:0:bf16 1:h=1:0:ckpt 2:dp=2:0 2:dp=2:0:bf16 2:dp=2:0:ckpt 2:fsdp=2:1 2:fsdp=2:2
  2:fsdp=2:3 2:fsdp=2:3:bf16 2:fsdp=2:3:ckpt 4:dp=4:0 4:fsdp=4:3 4:dp=2,fsdp=2:3 4:fsdp=2,h=2:3}
src=$(cd "$(dirname "$0")/../.." && pwd)
. "$src/tools/env.sh"
mkdir -p "$work"
cd "$work"
[ -f ns64.nc ] || "$SG_MPIEXEC" -n 2 "$build/bin/sg-ns2d" --out ns64.nc --n 64 --samples 20 --frames 6 \
  --dt 1e-2 --frame-dt 0.1 --mesh h=2 --overwrite --log-level warn
export OMP_NUM_THREADS=1
out=results.jsonl
: > "$out"
for model in $models; do
  for cfg in $configs; do
    IFS=: read -r n mesh zero variant <<<"$cfg"
    variant=${variant:-fp32}
    extra=()
    case $variant in
      bf16) extra=(--param-dtype bf16) ;;
      ckpt) extra=(--activation-checkpointing blocks) ;;
    esac
    rm -f m.jsonl
    "$SG_MPIEXEC" -n "$n" "$build/bin/sg-train" --model "$model" --data ns64.nc --steps "$steps" --batch 8 \
      --width 16 --modes 8 --layers 4 --blocks 2 --levels 3 --groups 4 --proj-width 32 --history 2 \
      --test-samples 2 --log-every 1000 --log-level warn --mesh "$mesh" --zero "$zero" --metrics m.jsonl \
      "${extra[@]}" >/dev/null
    python3 - "$model" "$n" "$mesh" "$zero" "$variant" >>"$out" <<'PY'
import json, statistics, sys
model, n, mesh, zero, variant = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
recs = [json.loads(l) for l in open("m.jsonl")]
sps = [r["samples_per_s"] for r in recs if "samples_per_s" in r][3:]
mem = [r for r in recs if "peak_mem_mib" in r][-1]
print(json.dumps({"model": model, "ranks": n, "mesh": mesh, "zero": zero, "variant": variant,
                  "samples_per_s": statistics.median(sps), "peak_mem_mib": mem["peak_mem_mib"],
                  "peak_work_mib": mem["peak_work_mib"]}))
PY
    tail -n 1 "$out"
  done
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ddp = {(r["model"], r["ranks"]): r["samples_per_s"] for r in rows
       if r["zero"] == 0 and r["variant"] == "fp32" and r["mesh"].startswith(("dp", "h=1"))}
print("| model | ranks | mesh | zero | variant | samples/s | vs fp32 DDP same ranks | peak MiB/rank | activations+work MiB |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    base = ddp.get((r["model"], r["ranks"]))
    rel = "%.2f" % (r["samples_per_s"] / base) if base else "-"
    print("| %s | %d | %s | %d | %s | %.1f | %s | %.1f | %.1f |" % (r["model"], r["ranks"], r["mesh"], r["zero"],
          r["variant"], r["samples_per_s"], rel, r["peak_mem_mib"], r["peak_work_mib"]))
PY
