#!/usr/bin/env bash
# bench/train: training throughput of sg-train (FNO-2D, the ResNet-style CNN and
# the U-Net) at 1, 2 (domain split h=2) and 4 ranks (h=2,w=2), beside the same
# model and step in PyTorch at the same thread count.
#   bench/train/run.sh [--n 64] [--steps 30] [--threads 1] [--models "fno cnn"]
#                      [--meshes "1:h=1 2:h=2 4:h=2,w=2"]
# Prints JSON lines: per run the median samples/s over the timed steps, the
# median time split of a step (compute / halo / collectives), parallel
# efficiency against the 1-rank run (samples/s / (ranks * 1-rank samples/s),
# same global batch: strong scaling), and the peak accounted memory per rank
# (core's sg_malloc accounting: parameters, gradients, optimizer state,
# activations and workspace; "work" is the part above what is held before
# the first step). Needs a built tree (tools/build); for the reference, a
# python with torch: SG_TORCH_PYTHON (e.g. /opt/torchref/bin/python, a venv
# with a current PyTorch 2.x), else Debian's python3-torch (/usr/bin/python3).
# --autocast 1 adds a PyTorch run under CPU bf16 autocast.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/tools/env.sh"
n=64 steps=30 threads=1 batch=8 history=10 models="fno cnn" meshes="1:h=1 2:h=2 4:h=2,w=2"
autocast=0 py=${SG_TORCH_PYTHON:-/usr/bin/python3}
while [ $# -gt 0 ]; do
  case "$1" in
    --n) n=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --meshes) meshes=$2; shift 2 ;;
    --autocast) autocast=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d /tmp/sg-bench-train.XXXXXX)
trap 'rm -rf "$work"' EXIT
bin=$root/build/bin
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=1
"$SG_MPIEXEC" -n 2 "$bin/sg-ns2d" --out "$work/ns.nc" --n "$n" --samples 6 --frames $((history + 4)) \
  --dt 1e-2 --frame-dt 0.1 --mesh h=2 --log-level warn
echo "{\"machine\": \"$(grep -c ^processor /proc/cpuinfo) cores\", \"load_average\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}"
for model in $models; do
  case $model in
    fno) size=(--width 32 --modes 12 --layers 4 --proj-width 128) ;;
    cnn) size=(--width 32 --blocks 4 --kernel 3 --groups 4 --proj-width 128) ;;
    unet) size=(--width 16 --levels 3 --groups 4) ;;
    *) echo "unknown model $model" >&2; exit 2 ;;
  esac
  common=(--model "$model" --data "$work/ns.nc" "${size[@]}" --history "$history" --batch "$batch"
          --steps $((steps + 5)) --test-samples 1 --log-every 100000 --log-level warn)
  rm -f "$work/base"
  for spec in $meshes; do
    ranks=${spec%%:*} mesh=${spec#*:}
    "$SG_MPIEXEC" -n "$ranks" "$bin/sg-train" "${common[@]}" --mesh "$mesh" --metrics "$work/m.jsonl" >/dev/null
    /usr/bin/python3 - "$work/m.jsonl" "$work/base" "$model" "$ranks" "$mesh" "$n" "$batch" "$threads" <<'PY'
import json, os, statistics, sys
path, base, model, ranks, mesh, n, batch, threads = sys.argv[1:]
lines = [json.loads(l) for l in open(path)]
recs = [r for r in lines if "loss" in r][5:]   # skip warm-up
mem = next(r for r in lines if "peak_mem_mib" in r)
med = lambda k: statistics.median(r[k] for r in recs)
out = {"impl": "shardgrid", "model": model, "ranks": int(ranks), "mesh": mesh, "n": int(n),
       "batch": int(batch), "threads_per_rank": int(threads), "samples_per_s": med("samples_per_s"),
       "step_compute_s": med("time_compute"), "step_halo_s": med("time_halo"),
       "step_collectives_s": med("time_collectives"), "peak_mem_mib_per_rank": mem["peak_mem_mib"],
       "peak_work_mib_per_rank": mem["peak_work_mib"]}
if os.path.exists(base):
    b = json.load(open(base))
    out["parallel_efficiency"] = out["samples_per_s"] / (int(ranks) * b["samples_per_s"])
    out["peak_mem_vs_1_rank"] = out["peak_mem_mib_per_rank"] / b["peak_mem_mib_per_rank"]
    out["peak_work_vs_1_rank"] = out["peak_work_mib_per_rank"] / b["peak_work_mib_per_rank"]
elif int(ranks) == 1:
    json.dump(out, open(base, "w"))
print(json.dumps(out))
PY
  done
  if ! "$py" -c "import torch" 2>/dev/null; then
    echo '{"impl": "pytorch", "skipped": "no torch in '"$py"'"}'
    continue
  fi
  for ac in 0 $([ "$autocast" = 1 ] && echo 1); do
    if [ "$model" = fno ]; then
      "$py" "$root/bench/train/fno_torch.py" --n "$n" --batch "$batch" --history "$history" \
        --width 32 --modes 12 --steps "$steps" --threads "$threads" --autocast $ac
    elif [ "$model" = cnn ]; then
      "$py" "$root/bench/train/cnn_torch.py" --n "$n" --batch "$batch" --history "$history" \
        --width 32 --blocks 4 --groups 4 --steps "$steps" --threads "$threads" --autocast $ac
    elif [ "$model" = unet ]; then
      "$py" "$root/bench/train/unet_torch.py" --n "$n" --batch "$batch" --history "$history" \
        --width 16 --levels 3 --groups 4 --steps "$steps" --threads "$threads" --autocast $ac
    fi
  done
done
