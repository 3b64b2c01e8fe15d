#!/usr/bin/env bash
# bench/plan/validate.sh — sg-plan's step-time predictions against sg-train's
# measured steps, in one command (issue 19 §2, docs/choosing-a-mesh-time.md):
#
#   bench/plan/validate.sh [--out DIR] [--steps 8] [--models "fno cnn unet vit"]
#                          [--cpu-time] [--run-oversubscribed]
#                          [--calibrate-from-model]
#
# It calibrates the machine once (sg-plan-calibrate --quick: every rate
# the median of 5 rounds of >= 50 ms samples on activation-sized working
# sets, on one rank alone and on every rank at once, alternating; the
# shared ones the 2-rank meshes use; rates and spreads printed at the end;
# the rates are model-independent), then for each model (tiny configs on
# a 64 x 64 Navier-Stokes set, batch 8) runs sg-train on
# every mesh of 1 and 2 ranks the model accepts (h, w, dp, fsdp with ZeRO-3,
# pp with 4 micro-batches, tp; sg-plan's check decides) and asks sg-plan
# (--mesh M --json --hardware the calibration) for its prediction. It prints
#   - a table: model, mesh, predicted s/step, measured s/step, ratio
#     (predicted / measured), within 25%?, and the predicted and measured
#     split (compute, halo, collectives: sg-train's own timers, wall);
#   - per model the runs within 25% and the Kendall tau between the
#     predicted and the measured ranking of its 2-rank meshes: tau-a (every
#     pair counts) and tau-b with ties, a pair tied on a side where its two
#     times differ by no more than the larger of the two runs' step-to-step
#     spread (interquartile range / median of the timed steps);
#   - one rank with half the batch (a dp=2 rank's work, alone on the
#     node), not judged: its predicted and measured compute beside the
#     dp=2 row's, to tell ranks that slow each other from work that does
#     not halve;
#   - the 3..8-rank meshes sg-plan ranks first, marked oversubscribed:
#     reported, not judged (more ranks than cores share them: the cost
#     model stretches compute by ranks / cores, which MPI's busy-polling
#     waits make a lower bound). --run-oversubscribed also runs them.
# --calibrate-from-model predicts each model with rates from its own first
# steps instead (bench/plan/calibrate_model.sh: 1 + 3 steps of the model
# on one rank with the tape's op timers, then the same run on every core
# at once; the rates that predict each op class's measured seconds; the
# calibration above still gives the links): the compute measured on the
# real kernels at the real shapes, only the communication and the
# per-rank shapes modelled. About 30 s more (4 x 4 steps per model).
# Only runs with ranks <= cores are judged. Measured: the median wall time
# of a step after 3 warm-up steps (sg-train's metrics). On a machine
# shared with other jobs the wall time measures the scheduler: --cpu-time
# takes both sides in CPU time instead (thread-CPU-time calibration; a
# run's CPU seconds per step and rank from two runs of 3 and 3 + steps
# steps, against the predicted total minus the pipeline bubble), as
# bench/plan/run.sh does. The script says which it used and the load
# average at the start and the end. About 1-2 minutes on a quiet 2-core
# machine (30 runs of ~11 steps, one quick calibration of ~10 s).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/tools/env.sh"
steps=8 models="fno cnn unet vit" out="" cpu_time=0 run_over=0 from_model=0
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --cpu-time) cpu_time=1; shift ;;
    --run-oversubscribed) run_over=1; shift ;;
    --calibrate-from-model) from_model=1; shift ;;
    -h|--help) sed -n '2,49p' "$0"; exit 0 ;;
    *) echo "validate.sh: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
bin=$root/build/bin
if [ $from_model = 1 ] && [ $cpu_time = 1 ]; then
  echo "validate.sh: --calibrate-from-model times the model in wall time: not with --cpu-time" >&2
  exit 2
fi
for b in sg-train sg-plan sg-plan-calibrate sg-ns2d; do
  [ -x "$bin/$b" ] || { echo "validate.sh: $bin/$b missing: build first (tools/build)" >&2; exit 2; }
done
work=${out:-$(mktemp -d /tmp/sg-plan-validate.XXXXXX)}
mkdir -p "$work"
cores=$(nproc)
n=64 batch=8 history=4 warm=3
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
cal=(--quick)
if [ $cpu_time = 1 ]; then
  cal+=(--cpu-time)
  # the layer's own waits yield at once, so that a rank waiting for a
  # descheduled peer gives its core away instead of charging spin time
  export SG_HALO_YIELD=early SG_FFT_SPIN_US=0 SG_AGREE_WAIT=yield
fi
mpirun() { "$SG_MPIEXEC" -n "$@"; }
# the CPU seconds of a command and its children (the ranks, via mpiexec)
cpu() {
  /usr/bin/python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.ru_utime + r.ru_stime)' "$@"
}
ranks_of() { echo "$1" | tr ',' '\n' | awk -F= 'BEGIN {p = 1} {p *= $2} END {print p}'; }
size_of() {
  case $1 in
    fno) echo "--width 32 --modes 12 --layers 4 --proj-width 128" ;;
    cnn) echo "--width 32 --blocks 4 --kernel 3 --groups 4 --proj-width 128" ;;
    unet) echo "--width 16 --levels 3 --groups 4" ;;
    vit) echo "--width 64 --heads 4 --depth 4 --patch 4" ;;
  esac
}
load() { cut -d' ' -f1-3 /proc/loadavg; }
# the first line a command prints ("" when it fails: a mesh that does not
# fit); its whole output is read (no SIGPIPE under pipefail)
first_line() { local o; o=$("$@" 2>/dev/null) || o=""; printf '%s\n' "$o" | sed -n 1p; }
echo "validate.sh: $cores cores, load average $(load), timing: $([ $cpu_time = 1 ] && echo 'CPU time' || echo 'wall time'), calibration: $([ $from_model = 1 ] && echo "the model's steps" || echo 'micro-benchmarks'), work dir $work" >&2
la=$(cut -d' ' -f1 /proc/loadavg)
if [ $cpu_time = 0 ] && awk -v l="$la" -v c="$cores" 'BEGIN {exit !(l > 0.5 * c)}'; then
  echo "validate.sh: WARNING load average $la on $cores cores: wall times measure the other jobs (--cpu-time?)" >&2
fi
data=$work/ns.nc
np=$([ "$cores" -ge 2 ] && echo 2 || echo 1) # ranks of the data and the calibration
[ -f "$data" ] || mpirun "$np" "$bin/sg-ns2d" --out "$data" --n $n --samples 6 \
  --frames $((history + 4)) --dt 1e-2 --frame-dt 0.1 --mesh "h=$np" --log-level warn --overwrite
runs=$work/runs.jsonl
: > "$runs"
echo "{\"cores\": $cores, \"timing\": \"$([ $cpu_time = 1 ] && echo cpu || echo wall)\", \"calibrated_from\": \"$([ $from_model = 1 ] && echo model || echo micro)\", \"load_average_start\": \"$(load)\"}" >> "$runs"

# one mesh: sg-plan's prediction, sg-train's measurement, a JSON line
measure() { # MODEL SPEC HW [judged|oversubscribed|alone] [BATCH]
  local model=$1 spec=$2 hw=$3 verdict=$4 b=${5:-$batch}
  local mesh=${spec%%:*} extra=() size
  [ "$spec" != "$mesh" ] && read -r -a extra <<< "${spec#*:}"
  read -r -a size <<< "$(size_of "$model")"
  local ranks; ranks=$(ranks_of "$mesh")
  local common=(--model "$model" "${size[@]}" --history "$history" --batch "$batch" --data "$data"
                --test-samples 1 "${extra[@]}")
  local pred
  pred=$(first_line "$bin/sg-plan" "${common[@]}" --mesh "$mesh" --ranks "$ranks" --hardware "$hw" --json --all)
  if [ -z "$pred" ] || ! grep -q '"fits": true' <<< "$pred"; then
    echo "{\"model\": \"$model\", \"mesh\": \"$spec\", \"skipped\": true}" >> "$runs"
    return
  fi
  local run=("$SG_MPIEXEC" -n "$ranks" "$bin/sg-train" "${common[@]}" --mesh "$mesh"
             --log-every 100000 --log-level warn)
  local c0=0 c1=0 m=$work/m-$model-${mesh//[=,]/_}.jsonl
  if [ $cpu_time = 1 ]; then
    c0=$(cpu "${run[@]}" --steps $warm)
    c1=$(cpu "${run[@]}" --steps $((steps + warm)) --metrics "$m")
  else
    "${run[@]}" --steps $((steps + warm)) --metrics "$m" > /dev/null
  fi
  /usr/bin/python3 - "$m" "$model" "$spec" "$ranks" "$verdict" "$pred" "$c0" "$c1" "$steps" "$warm" "$b" \
    "$cpu_time" <<'PY' >> "$runs"
import json, statistics, sys
m, model, spec, ranks, verdict, pred, c0, c1, steps, warm, batch, cpu = sys.argv[1:]
recs = [json.loads(l) for l in open(m) if "samples_per_s" in l][int(warm):]
med = lambda k: statistics.median(r[k] for r in recs)
p = json.loads(pred)
steps_s = [int(batch) / r["samples_per_s"] for r in recs]
wall = statistics.median(steps_s)
q = statistics.quantiles(steps_s, n=4) if len(steps_s) > 1 else [wall, wall, wall]
cpu_s = (float(c1) - float(c0)) / int(steps) / int(ranks)
coll = sum(p.get(k, 0) for k in ("allreduce_s", "reduce_scatter_s", "allgather_s",
                                 "alltoall_s", "ring_s", "p2p_s"))
row = {"model": model, "mesh": spec, "ranks": int(ranks), "verdict": verdict,
       "predicted_s": p["step_s"] if cpu == "0" else p["step_s"] - p["bubble_s"],
       "measured_s": wall if cpu == "0" else cpu_s, "measured_wall_s": wall,
       "spread": (q[2] - q[0]) / wall if cpu == "0" else 0.0,
       "pred_split": [p["compute_s"], p["halo_s"], coll, p["bubble_s"]],
       "meas_split": [med("time_compute"), med("time_halo"), med("time_collectives")]}
print(json.dumps(row))
PY
}

# one calibration for all the models: its kernels and working sets are
# fixed (bench/plan's activation sizes), not the model's, so the rates are
# model-independent; each is the median of 5 rounds of >= 50 ms samples
# (sg-plan-calibrate --quick), single-stream and shared alternating
hw=$work/hw
echo "validate.sh: calibrating (load $(load))" >&2
mpirun "$np" "$bin/sg-plan-calibrate" "${cal[@]}" --out "$hw" > /dev/null
# a calibration's single-stream and shared rates and their spreads, for the table
cal_record() { # HW NAME
/usr/bin/python3 - "$1" "$2" <<'PY' >> "$runs"
import json, re, sys
kv, spread = {}, {}
for line in open(sys.argv[1]):
    m = re.match(r"# spread (\w+) = ([0-9.]+) ([0-9.]+)$", line)
    if m:
        spread[m.group(1)] = [float(m.group(2)), float(m.group(3))]
    elif "=" in line and not line.lstrip().startswith("#"):
        k, v = (x.strip() for x in line.split("=", 1))
        kv[k] = v
rates = {k: [float(kv[k]), float(kv[k + "_shared"])] for k in
         ("gemm_flops", "conv_flops", "fft_flops", "mem_bw", "attn_flops", "act_rate",
          "norm_rate", "lnorm_rate", "up_rate") if k + "_shared" in kv}
print(json.dumps({"calibration": sys.argv[2], "shared_ranks": int(kv.get("shared_ranks", 0)),
                  "rates": rates, "spread": spread}))
PY
}
cal_record "$hw" all
for model in $models; do
  hw=$work/hw
  if [ $from_model = 1 ]; then
    # this model's rates from its own first steps, the links from $work/hw
    echo "validate.sh: $model: calibrating from its steps (load $(load))" >&2
    read -r -a size <<< "$(size_of "$model")"
    "$root/bench/plan/calibrate_model.sh" --hardware "$work/hw" --out "$work/hw-$model" --copies "$np" -- \
      --model "$model" "${size[@]}" --history "$history" --batch "$batch" --data "$data" \
      --test-samples 1 > /dev/null
    hw=$work/hw-$model
    cal_record "$hw" "$model"
  fi
  for spec in h=1 h=2 w=2 dp=2 "fsdp=2:--zero 3" "pp=2:--microbatches 4 --pp-split even" tp=2; do
    mesh=${spec%%:*}
    [ "$(ranks_of "$mesh")" -le "$cores" ] || continue
    echo "validate.sh: $model $mesh (load $(load))" >&2
    measure "$model" "$spec" "$hw" judged
  done
  # not judged: one rank with half the batch, a dp=2 rank's work alone on
  # the node (the other core idle): its compute against the dp=2 row's
  # separates the ranks slowing each other from work that does not halve
  if [ "$cores" -ge 2 ]; then
    echo "validate.sh: $model h=1 batch $((batch / 2)), alone (load $(load))" >&2
    measure "$model" "h=1:--batch $((batch / 2))" "$hw" alone $((batch / 2))
  fi
  # the 3..8-rank meshes: sg-plan's first choice per rank count
  for r in 3 4 5 6 7 8; do
    [ "$r" -gt "$cores" ] || continue
    read -r -a size <<< "$(size_of "$model")"
    best=$(first_line "$bin/sg-plan" --model "$model" "${size[@]}" --history "$history" --batch "$batch" \
           --data "$data" --ranks "$r" --hardware "$hw" --json)
    [ -n "$best" ] || { echo "{\"model\": \"$model\", \"mesh\": \"(none of $r ranks fits)\", \"skipped\": true}" >> "$runs"; continue; }
    if [ $run_over = 1 ]; then
      bmesh=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["mesh"])' "$best")
      measure "$model" "$bmesh" "$hw" oversubscribed
    else
      /usr/bin/python3 -c 'import json,sys
p = json.loads(sys.argv[1])
print(json.dumps({"model": sys.argv[2], "mesh": p["mesh"], "ranks": int(sys.argv[3]),
                  "verdict": "oversubscribed", "predicted_s": p["step_s"]}))' "$best" "$model" "$r" >> "$runs"
    fi
  done
done
echo "{\"load_average_end\": \"$(load)\"}" >> "$runs"
/usr/bin/python3 "$root/bench/plan/validate_table.py" "$runs"
