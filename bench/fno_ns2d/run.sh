#!/usr/bin/env bash
# bench/fno_ns2d: the FNO paper's 2-D Navier-Stokes task (Li et al. 2021,
# nu = 1e-3, 64x64, 10 frames in -> 40 frames out, N = 1000 training and 200
# test samples; the paper reports a test relative L2 of 0.0128 for FNO-2D).
#   bench/fno_ns2d/run.sh [--samples 1200] [--test 200] [--steps 4000]
#        [--ranks 2] [--mesh dp=2] [--width 20] [--batch 20] [--lr 1e-3]
#        [--data FILE] [--out DIR] [--model fno|fno3d]
# Generates the dataset with sg-ns2d unless --data names an existing file
# (1200 samples x 50 frames: ~1 GB, ~20 core-minutes), trains FNO-2D
# (width 20, 12 modes, 4 layers, as the paper) one step ahead with
# teacher forcing for --steps steps, then rolls out the 40 test frames
# autoregressively and prints one JSON line: the test relative L2 of the
# rollout (mean over frames and at the last frame), the one-step test
# error, wall times and throughput. --model fno3d trains FNO-3D instead
# (the paper's space-time row, 0.0086: width 20, 8 modes in x, y and t,
# time padded by 6, frames 0-9 in and 10-49 out at once, one window per
# sample) and reports its test relative L2 over the 40 frames. Needs a
# built tree (tools/build).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/tools/env.sh"
samples=1200 test=200 steps=4000 ranks=2 mesh=dp=2 width=20 batch=20 lr=1e-3
data="" out=$root/out/fno_ns2d model=fno
while [ $# -gt 0 ]; do
  case "$1" in
    --samples) samples=$2; shift 2 ;;
    --test) test=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --mesh) mesh=$2; shift 2 ;;
    --width) width=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --lr) lr=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "bench/fno_ns2d: unknown option $1" >&2; exit 2 ;;
  esac
done
bin=$root/build/bin
mkdir -p "$out"
data=${data:-$out/ns_v1e-3_n${samples}_t50.nc}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
gen_s=0
if [ ! -f "$data" ]; then
  t0=$(date +%s.%N)
  "$SG_MPIEXEC" -n "$ranks" "$bin/sg-ns2d" --out "$data" --n 64 --samples "$samples" --frames 50 \
    --frame-dt 1 --dt 1e-2 --nu 1e-3 --batch 20 --mesh "dp=$ranks" --log-level warn
  gen_s=$(echo "$(date +%s.%N) - $t0" | bc)
fi
case "$model" in
  fno) margs="--modes 12 --rollout 40" ;;
  fno3d) margs="--model fno3d --modes 8 --modes-t 8 --pad-t 6 --out-frames 40 --rollout 0" ;;
  *) echo "bench/fno_ns2d: --model fno or fno3d, not $model" >&2; exit 2 ;;
esac
rm -f "$out/metrics.jsonl"
t0=$(date +%s.%N)
# shellcheck disable=SC2086
"$SG_MPIEXEC" -n "$ranks" "$bin/sg-train" --config "$root/examples/configs/ns2d_fno.cfg" \
  --data "$data" --mesh "$mesh" --width "$width" --layers 4 --history 10 --lead 1 $margs \
  --test-samples "$test" --batch "$batch" --steps "$steps" --lr "$lr" --schedule cosine --warmup 50 \
  --eval-every 0 --log-every 200 --metrics "$out/metrics.jsonl" --check-every 0 \
  --predict "$out/predictions.nc" | tee "$out/train.log"
train_s=$(echo "$(date +%s.%N) - $t0" | bc)
/usr/bin/python3 - "$out/metrics.jsonl" "$gen_s" "$train_s" "$samples" "$test" "$steps" "$ranks" "$mesh" \
  "$width" "$batch" "$model" <<'PY'
import json, statistics, sys
path, gen_s, train_s, samples, test, steps, ranks, mesh, width, batch, model = sys.argv[1:]
recs = [json.loads(l) for l in open(path)]
if model == "fno3d":
    ev = [r["eval_rel_l2"] for r in recs if "eval_rel_l2" in r]
    sps = [r["samples_per_s"] for r in recs if "samples_per_s" in r]
    print(json.dumps({"bench": "fno_ns2d", "model": "fno3d", "nu": 1e-3, "n": 64,
                      "train_samples": int(samples) - int(test), "test_samples": int(test),
                      "frames_in": 10, "frames_out": 40, "steps": int(steps), "batch": int(batch),
                      "width": int(width), "modes": 8, "modes_t": 8, "pad_t": 6, "ranks": int(ranks),
                      "mesh": mesh, "threads_per_rank": 1, "test_rel_l2": ev[-1] if ev else None,
                      "samples_per_s_median": statistics.median(sps) if sps else None,
                      "generate_s": float(gen_s), "train_s": float(train_s),
                      "paper_fno3d_rel_l2": 0.0086}))
    sys.exit(0)
roll = [r["rollout_rel_l2"] for r in recs if "rollout_rel_l2" in r][-1]
ev = [r["eval_rel_l2"] for r in recs if "eval_rel_l2" in r]
sps = [r["samples_per_s"] for r in recs if "samples_per_s" in r]
print(json.dumps({"bench": "fno_ns2d", "nu": 1e-3, "n": 64, "train_samples": int(samples) - int(test),
                  "test_samples": int(test), "frames_in": 10, "frames_out": len(roll),
                  "steps": int(steps), "batch": int(batch), "width": int(width), "modes": 12,
                  "ranks": int(ranks), "mesh": mesh, "threads_per_rank": 1,
                  "rollout_rel_l2_mean": sum(roll) / len(roll), "rollout_rel_l2_last": roll[-1],
                  "rollout_rel_l2_first": roll[0], "one_step_test_rel_l2": ev[-1] if ev else None,
                  "samples_per_s_median": statistics.median(sps) if sps else None,
                  "generate_s": float(gen_s), "train_s": float(train_s), "paper_fno2d_rel_l2": 0.0128}))
PY
