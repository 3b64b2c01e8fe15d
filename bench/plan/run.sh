#!/usr/bin/env bash
# bench/plan: sg-plan's predicted step time against sg-train's measured one
# for every mesh of 1 and 2 ranks here (ranks <= cores), per model, and the
# Kendall tau of the two rankings of the 2-rank meshes.
#   bench/plan/run.sh [--n 64] [--steps 12] [--models "fno cnn unet vit"]
#                     [--hardware FILE] [--out DIR] [--no-recalibrate]
# Without --hardware it calibrates first (sg-plan-calibrate, 2 ranks); then
# before every run it measures the rates again (--quick, with the run's
# ranks) since a shared machine's load moves between runs.
# Runs of 3..8 ranks would oversubscribe the 2 cores: they are not run
# (the model predicts them with compute stretched by ranks / cores, which
# a busy-polling MPI does not follow: docs/choosing-a-mesh-time.md).
# Prints JSON lines (one per run) and a summary per model.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/tools/env.sh"
n=64 steps=12 batch=8 history=4 models="fno cnn unet vit" hw="" out="" recal=1
while [ $# -gt 0 ]; do
  case "$1" in
    --n) n=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --hardware) hw=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-recalibrate) recal=0; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
work=${out:-$(mktemp -d /tmp/sg-bench-plan.XXXXXX)}
mkdir -p "$work"
bin=$root/build/bin
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
if [ -z "$hw" ]; then
  hw=$work/this-machine
  "$SG_MPIEXEC" -n 2 "$bin/sg-plan-calibrate" --out "$hw" >&2
fi
[ -f "$work/ns.nc" ] || "$SG_MPIEXEC" -n 2 "$bin/sg-ns2d" --out "$work/ns.nc" --n "$n" --samples 6 \
  --frames $((history + 4)) --dt 1e-2 --frame-dt 0.1 --mesh h=2 --log-level warn
echo "{\"machine\": \"$(grep -c ^processor /proc/cpuinfo) cores\", \"load_average\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"hardware\": \"$hw\"}"
: > "$work/runs.jsonl"
for model in $models; do
  case $model in
    fno) size=(--width 32 --modes 12 --layers 4 --proj-width 128) ;;
    cnn) size=(--width 32 --blocks 4 --kernel 3 --groups 4 --proj-width 128) ;;
    unet) size=(--width 16 --levels 3 --groups 4) ;;
    vit) size=(--width 64 --heads 4 --depth 4 --patch 4) ;;
  esac
  meshes="h=1 h=2 w=2 dp=2 fsdp=2:zero=3 pp=2:microbatches=4"
  [ "$model" = vit ] && meshes="h=1 h=2 w=2 dp=2 fsdp=2:zero=3 tp=2 pp=2:microbatches=4"
  for spec in $meshes; do
    mesh=${spec%%:*} extra=()
    [ "$spec" != "$mesh" ] && extra=(--${spec#*:})
    ranks=$(echo "$mesh" | tr ',' '\n' | awk -F= '{p *= $2} BEGIN {p = 1} END {print p}')
    common=(--model "$model" "${size[@]}" --history "$history" --batch "$batch" "${extra[@]}")
    "$SG_MPIEXEC" -n "$ranks" "$bin/sg-train" "${common[@]}" --data "$work/ns.nc" --mesh "$mesh" \
      --steps $((steps + 3)) --test-samples 1 --log-every 100000 --log-level warn \
      --metrics "$work/m.jsonl" >/dev/null
    # the machine's load moves: rates measured again (quick) next to each run,
    # with the run's rank count; the link stays the first calibration's
    hwr=$hw
    if [ "$recal" = 1 ]; then
      hwr=$work/hw-now
      "$SG_MPIEXEC" -n "$ranks" "$bin/sg-plan-calibrate" --quick --out "$hwr" >/dev/null
      grep -E '^(alpha|bw)_' "$hw" > "$work/link"
      grep -vE '^(alpha|bw)_' "$hwr" | cat - "$work/link" > "$hwr.tmp" && mv "$hwr.tmp" "$hwr"
    fi
    pred=$("$bin/bench/sg-plan-sim" predict --hardware "$hwr" --ny "$n" --nx "$n" --vars 1 \
      "${common[@]}" --meshes "$mesh")
    /usr/bin/python3 - "$work/m.jsonl" "$model" "$spec" "$batch" "$pred" <<'PY' | tee -a "$work/runs.jsonl"
import json, statistics, sys
path, model, spec, batch, pred = sys.argv[1:]
recs = [json.loads(l) for l in open(path)]
recs = [r for r in recs if "samples_per_s" in r][3:]          # warm-up dropped
meas = statistics.median(int(batch) / r["samples_per_s"] for r in recs)
p = json.loads(pred)
print(json.dumps({"model": model, "mesh": spec, "measured_s": meas, "predicted_s": p["total_s"],
                  "ratio": p["total_s"] / meas, "split": p}))
PY
  done
done
/usr/bin/python3 - "$work/runs.jsonl" <<'PY'
import json, sys, itertools
runs = [json.loads(l) for l in open(sys.argv[1])]
def tau(a, b):
    s = n = 0
    for i, j in itertools.combinations(range(len(a)), 2):
        x = (a[i] - a[j]) * (b[i] - b[j])
        s += (x > 0) - (x < 0); n += 1
    return s / n if n else float("nan")
for model in dict.fromkeys(r["model"] for r in runs):
    rs = [r for r in runs if r["model"] == model]
    two = [r for r in rs if r["mesh"].split(":")[0] != "h=1"]
    within = sum(abs(r["ratio"] - 1) <= 0.25 for r in rs)
    print(json.dumps({"model": model, "runs": len(rs), "within_25pct": within,
                      "kendall_tau_2rank": tau([r["measured_s"] for r in two],
                                               [r["predicted_s"] for r in two])}))
PY
