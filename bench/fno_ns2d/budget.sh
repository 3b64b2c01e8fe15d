#!/usr/bin/env bash
# bench/fno_ns2d/budget.sh: the equal-budget comparison of the FNO paper's
# table (issue 21, section 2): FNO-2D (width 20, 12 modes, 4 layers,
# projection 128) trained with the paper's recipe by sg-train and by the
# PyTorch reference (fno_paper_torch.py) on the same sg-ns2d data, each
# stopped at the same budget, several seeds; the test relative L2 of the
# autoregressive rollout of both.
#   bench/fno_ns2d/budget.sh [--paper] [--data FILE.nc] [--budgets "60"] [--seeds "0 1"]
#        [--clock cpu|wall] [--samples 50] [--test 10] [--frames 20] [--rollout 10]
#        [--epochs 500] [--step-epochs 100] [--ranks 2] [--threads 2] [--out DIR]
#        [--table RESULTS.jsonl]
# Defaults: the smoke setup (64x64, 40 training and 10 test samples of 20
# frames, 10 frames in, rollout 10, budget 60 CPU-s, seeds 0 1). --paper
# sets the paper's data and the table's budgets: 1000 + 200 samples of 50
# frames, rollout 40, budgets 7200 and 28800 CPU-s (1 h and 4 h of the 2
# cores), seeds 0 1 2; later options override it.
# Recipe (both): 10 frames in; rollout_train = K autoregressive steps with
# backpropagation through all of them (rollout_grad = full); lr 1e-3,
# weight decay 1e-4, step schedule x0.5 every --step-epochs of --epochs;
# batch 20. Differences: sg-train's optimizer is AdamW (decoupled decay)
# and its loss the mean over the K steps and the batch; the reference uses
# the paper's Adam (L2 decay) and summed loss (fno_paper_torch.py). The
# budget: --clock cpu (default) counts the CPU seconds of the training loop
# over all processes and threads (sg-train: summed over its ranks), wall its
# wall seconds; setup and evaluation are not counted. Each run also stops
# after --epochs.
# Prints one JSON line per run (also to OUT/results.jsonl), then a markdown
# table: per implementation and budget, mean +- std over the seeds of the
# rollout's test relative L2 (per frame per sample, mean over samples and
# frames: sg-train's rollout_rel_l2) and the paper's metric (per sample over
# all frames at once: rollout_rel_l2_seq), steps, wall and CPU s.
# --table prints the table of an earlier run's results.jsonl only. Runs
# alternate sg-train / reference per seed. Needs a built tree
# (tools/build) and /opt/torchref/bin/python (PyTorch).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/bench/fno_ns2d
source "$root/tools/env.sh"
samples=50 test=10 frames=20 rollout=10 budgets=60 seeds="0 1" clock=cpu
epochs=500 step_epochs=100 ranks=2 threads=2 data="" out=$root/out/fno_budget table_of=""
history=10 batch=20
torch_py=${TORCH_PY:-/opt/torchref/bin/python}
while [ $# -gt 0 ]; do
  case "$1" in
    --paper) samples=1200 test=200 frames=50 rollout=40 budgets="7200 28800" seeds="0 1 2"; shift ;;
    --data) data=$2; shift 2 ;;
    --budgets) budgets=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --clock) clock=$2; shift 2 ;;
    --samples) samples=$2; shift 2 ;;
    --test) test=$2; shift 2 ;;
    --frames) frames=$2; shift 2 ;;
    --rollout) rollout=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --step-epochs) step_epochs=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --table) table_of=$2; shift 2 ;;
    -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
    *) echo "bench/fno_ns2d/budget.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
table() { # table RESULTS.jsonl: the markdown table
  /usr/bin/python3 - "$1" <<'PY'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
def ms(xs, f="{:.4f}"):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "—"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return (f + " ± " + f).format(statistics.mean(xs), sd)
print(f"\n| implementation | budget ({recs[0]['clock']} s) | seeds | rollout test rel. L2 "
      "(per frame, mean) | paper's metric | train loss | steps | epochs | wall s | CPU s | load |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for b in sorted({r["budget_s"] for r in recs}):
    for impl in ("sg-train", "pytorch"):
        g = [r for r in recs if r["impl"] == impl and r["budget_s"] == b]
        if not g:
            continue
        print(f"| {impl} | {b:g} | {len(g)} | {ms([r['test_rel_l2_mean'] for r in g])} | "
              f"{ms([r['test_rel_l2_paper'] for r in g])} | {ms([r['train_loss'] for r in g])} | "
              f"{ms([r['steps'] for r in g], '{:.1f}')} | {ms([r['epochs'] for r in g], '{:.2f}')} | "
              f"{ms([r['train_wall_s'] for r in g], '{:.0f}')} | "
              f"{ms([r['train_cpu_s'] for r in g], '{:.0f}')} | "
              f"{min(r['load_start'] for r in g):.1f}–{max(r['load_end'] for r in g):.1f} |")
PY
}

if [ -n "$table_of" ]; then table "$table_of"; exit 0; fi
bin=$root/build/bin
mkdir -p "$out"
export OMP_NUM_THREADS=1
data=${data:-$out/ns_v1e-3_n${samples}_t${frames}.nc}
if [ ! -f "$data" ]; then
  "$SG_MPIEXEC" -n "$ranks" "$bin/sg-ns2d" --out "$data" --n 64 --samples "$samples" --frames "$frames" \
    --frame-dt 1 --dt 1e-2 --nu 1e-3 --batch 10 --mesh "dp=$ranks" --log-level warn
fi
npy=$out/$(basename "${data%.nc}").npy
if [ ! -f "$npy" ] || [ "$npy" -ot "$data" ]; then
  /usr/bin/python3 -c "import netCDF4, numpy, sys
numpy.save(sys.argv[2], numpy.asarray(netCDF4.Dataset(sys.argv[1])['vorticity'][:], dtype=numpy.float32))" \
    "$data" "$npy"
fi
# steps per epoch as both count them: training windows of history + K
# frames (one per sample when frames = history + K), last batch dropped
spe=$(( (samples - test) * (frames - history - rollout + 1) / batch ))
[ "$spe" -ge 1 ] || { echo "budget.sh: no full batch of training windows" >&2; exit 2; }
results=$out/results.jsonl
: >"$results"
load() { cut -d' ' -f1 /proc/loadavg; }

run_sg() { # run_sg SEED BUDGET
  local d=$out/sg_s$1_b$2 l0
  rm -rf "$d" && mkdir -p "$d"
  l0=$(load)
  "$SG_MPIEXEC" -n "$ranks" "$bin/sg-train" --config "$root/examples/configs/ns2d_fno.cfg" \
    --data "$data" --mesh "dp=$ranks" --width 20 --modes 12 --layers 4 --proj-width 128 \
    --history "$history" --lead 1 --test-samples "$test" --batch "$batch" --epochs "$epochs" \
    --lr 1e-3 --weight-decay 1e-4 --schedule step --step-size $((step_epochs * spe)) --gamma 0.5 \
    --warmup 0 --clip 0 --loss rel_l2 --rollout-train "$rollout" --rollout-grad full \
    --rollout "$rollout" --seed "$1" --time-budget "$2" --time-budget-clock "$clock" \
    --eval-every 0 --check-every 0 --log-every 50 --metrics "$d/metrics.jsonl" >"$d/train.log" 2>&1 ||
    { cat "$d/train.log" >&2; exit 1; }
  /usr/bin/python3 - "$d/metrics.jsonl" "$1" "$2" "$clock" "$spe" "$ranks" "$l0" "$(load)" <<'PY' | tee -a "$results"
import json, sys
path, seed, budget, clock, spe, ranks, l0, l1 = sys.argv[1:]
recs = [json.loads(l) for l in open(path)]
losses = [r["loss"] for r in recs if "loss" in r]
t = [r for r in recs if "train_cpu_s" in r][-1]
peak = [r["peak_mem_mib"] for r in recs if "peak_mem_mib" in r][-1]
rr = [r for r in recs if "rollout_rel_l2" in r][-1]
roll = rr["rollout_rel_l2"]
print(json.dumps({"impl": "sg-train", "seed": int(seed), "budget_s": float(budget), "clock": clock,
                  "stopped_by_budget": bool(t["budget_stop"]), "steps": len(losses),
                  "epochs": round(len(losses) / int(spe), 3), "steps_per_epoch": int(spe),
                  "train_loss": sum(losses[-int(spe):]) / len(losses[-int(spe):]),
                  "test_rel_l2_mean": sum(roll) / len(roll), "test_rel_l2_paper": rr["rollout_rel_l2_seq"],
                  "test_rel_l2_last": roll[-1], "test_rel_l2_frames": roll,
                  "train_wall_s": t["train_wall_s"], "train_cpu_s": t["train_cpu_s"],
                  "peak_mem_mib_per_rank": peak,
                  "ranks": int(ranks), "threads": 1, "load_start": float(l0), "load_end": float(l1)}))
PY
}

run_torch() { # run_torch SEED BUDGET
  local l0 line
  l0=$(load)
  line=$("$torch_py" "$here/fno_paper_torch.py" --data "$npy" --test "$test" --history "$history" \
    --rollout "$rollout" --batch "$batch" --epochs "$epochs" --step-epochs "$step_epochs" \
    --seed "$1" --budget-s "$2" --clock "$clock" --threads "$threads")
  /usr/bin/python3 -c "import json, sys
r = json.loads(sys.argv[1]); r.update(load_start=float(sys.argv[2]), load_end=float(sys.argv[3]))
print(json.dumps(r))" "$line" "$l0" "$(load)" | tee -a "$results"
}

for b in $budgets; do
  for s in $seeds; do
    run_sg "$s" "$b"
    run_torch "$s" "$b"
  done
done
table "$results"
