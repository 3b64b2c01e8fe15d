#!/usr/bin/env bash
# (Superseded by bench/plan/validate.sh, which calibrates per model, asks
# sg-plan itself and judges; kept to reproduce the RESULTS.md runs of
# 2026-11-26.)
# bench/plan: sg-plan's predicted step time against sg-train's measured one
# for every mesh of 1 and 2 ranks here (ranks <= cores), per model, and the
# Kendall tau of the two rankings of the 2-rank meshes.
#   bench/plan/run.sh [--n 64] [--steps 10] [--models "fno cnn unet vit"]
#                     [--out DIR]
#
# This machine is shared with other jobs (load averages of 5-15 on its 2
# cores are common), so a step's wall time measures the scheduler more
# than the code. Both sides are therefore taken in CPU time: the rates are
# calibrated in thread CPU time (sg-plan-calibrate --cpu-time, both ranks
# busy; one file for every run), and a run's step costs the CPU time of its ranks per
# step per rank, from two runs of 3 and 3 + steps steps (the difference
# leaves out start-up, data loading and the final evaluation). MPICH
# busy-polls its waits, so on a quiet machine with a core per rank the
# wall time of a step equals this CPU time; under load a waiting rank also
# spins through its time slices while its peer is descheduled, which
# inflates the 2-rank numbers; the layer's waits are set to yield at once
# (below) to keep that small, MPICH's own still spin. A pipeline stage's
# bubble is idle, not CPU: the CPU comparison is against the predicted
# total minus the bubble. The wall-time median of sg-train's metrics is
# compared with the predicted total too (ratio_wall).
# Runs of 3..8 ranks would oversubscribe the 2 cores: not run (see
# docs/choosing-a-mesh-time.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/tools/env.sh"
n=64 steps=10 batch=8 history=4 models="fno cnn unet vit" out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --n) n=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
work=${out:-$(mktemp -d /tmp/sg-bench-plan.XXXXXX)}
mkdir -p "$work"
bin=$root/build/bin
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# the layer's own waits yield at once (halo, FFT, agreement), so that a
# rank waiting for a descheduled peer gives the core away instead of
# charging spin time to the step
export SG_HALO_YIELD=early SG_FFT_SPIN_US=0 SG_AGREE_WAIT=yield
# the CPU time of a command and its children (the ranks, through mpiexec)
cpu() {
  /usr/bin/python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.ru_utime + r.ru_stime)' "$@"
}
"$SG_MPIEXEC" -n 2 "$bin/sg-plan-calibrate" --cpu-time --out "$work/hw" >&2
[ -f "$work/ns.nc" ] || "$SG_MPIEXEC" -n 2 "$bin/sg-ns2d" --out "$work/ns.nc" --n "$n" --samples 6 \
  --frames $((history + 4)) --dt 1e-2 --frame-dt 0.1 --mesh h=2 --log-level warn
echo "{\"machine\": \"$(grep -c ^processor /proc/cpuinfo) cores\", \"load_average\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}"
: > "$work/runs.jsonl"
for model in $models; do
  case $model in
    fno) size=(--width 32 --modes 12 --layers 4 --proj-width 128) ;;
    cnn) size=(--width 32 --blocks 4 --kernel 3 --groups 4 --proj-width 128) ;;
    unet) size=(--width 16 --levels 3 --groups 4) ;;
    vit) size=(--width 64 --heads 4 --depth 4 --patch 4) ;;
  esac
  meshes="h=1 h=2 w=2 dp=2 fsdp=2:--zero=3 pp=2:--microbatches=4"
  [ "$model" = vit ] && meshes="$meshes tp=2"
  for spec in $meshes; do
    mesh=${spec%%:*} extra=()
    [ "$spec" != "$mesh" ] && extra=("${spec#*:}")
    ranks=$(echo "$mesh" | tr ',' '\n' | awk -F= 'BEGIN {p = 1} {p *= $2} END {print p}')
    common=(--model "$model" "${size[@]}" --history "$history" --batch "$batch" "${extra[@]}")
    run=("$SG_MPIEXEC" -n "$ranks" "$bin/sg-train" "${common[@]}" --data "$work/ns.nc" --mesh "$mesh"
         --test-samples 1 --log-every 100000 --log-level warn)
    c0=$(cpu "${run[@]}" --steps 3)
    c1=$(cpu "${run[@]}" --steps $((steps + 3)) --metrics "$work/m.jsonl")
    pred=$("$bin/bench/sg-plan-sim" predict --hardware "$work/hw" --ny "$n" --nx "$n" --vars 1 \
      "${common[@]}" --meshes "$mesh")
    /usr/bin/python3 - "$work/m.jsonl" "$model" "$spec" "$batch" "$pred" "$c0" "$c1" "$steps" "$ranks" \
      <<'PY' | tee -a "$work/runs.jsonl"
import json, statistics, sys
path, model, spec, batch, pred, c0, c1, steps, ranks = sys.argv[1:]
recs = [json.loads(l) for l in open(path)]
recs = [r for r in recs if "samples_per_s" in r][3:]          # warm-up dropped
wall = statistics.median(int(batch) / r["samples_per_s"] for r in recs)
meas = (float(c1) - float(c0)) / int(steps) / int(ranks)
p = json.loads(pred)
busy = p["total_s"] - p["bubble_s"]     # a rank's CPU time leaves out its idle bubble
print(json.dumps({"model": model, "mesh": spec, "measured_cpu_s": meas, "measured_wall_s": wall,
                  "predicted_s": p["total_s"], "predicted_busy_s": busy, "ratio": busy / meas,
                  "ratio_wall": p["total_s"] / wall, "split": p}))
PY
  done
done
# one hardware file for every run: the table, the runs within 25%, tau
/usr/bin/python3 "$root/bench/plan/compare.py" --sim "$bin/bench/sg-plan-sim" "$work/runs.jsonl" "$work/hw"
echo "{\"load_average_end\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}"
