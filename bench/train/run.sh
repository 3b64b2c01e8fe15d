#!/usr/bin/env bash
# bench/train: training throughput of sg-train (FNO-2D) at 1 and 2 ranks
# (domain split h=2) beside the same model and step in PyTorch.
#   bench/train/run.sh [--n 64] [--steps 30] [--threads 1]
# Prints JSON lines; needs a built tree (tools/build) and, for the reference,
# Debian's python3-torch.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/tools/env.sh"
n=64 steps=30 threads=1 width=32 modes=12 batch=8 history=10
while [ $# -gt 0 ]; do
  case "$1" in
    --n) n=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d /tmp/sg-bench-train.XXXXXX)
trap 'rm -rf "$work"' EXIT
bin=$root/build/bin
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=1
"$SG_MPIEXEC" -n 2 "$bin/sg-ns2d" --out "$work/ns.nc" --n "$n" --samples 6 --frames $((history + 4)) \
  --dt 1e-2 --frame-dt 0.1 --mesh h=2 --log-level warn
common=(--data "$work/ns.nc" --width "$width" --modes "$modes" --layers 4 --history "$history"
        --batch "$batch" --steps $((steps + 5)) --test-samples 1 --log-every 100000 --log-level warn)
for spec in "1 h=1" "2 h=2"; do
  set -- $spec
  "$SG_MPIEXEC" -n "$1" "$bin/sg-train" "${common[@]}" --mesh "$2" --metrics "$work/m.jsonl" >/dev/null
  /usr/bin/python3 - "$work/m.jsonl" "$1" "$2" "$n" "$batch" "$threads" <<'PY'
import json, statistics, sys
path, ranks, mesh, n, batch, threads = sys.argv[1:]
recs = [json.loads(l) for l in open(path) if '"loss"' in l][5:]   # skip warm-up
sps = statistics.median(r["samples_per_s"] for r in recs)
comp = statistics.median(r["time_compute"] for r in recs)
coll = statistics.median(r["time_collectives"] for r in recs)
print(json.dumps({"impl": "shardgrid", "model": "fno", "ranks": int(ranks), "mesh": mesh, "n": int(n),
                  "batch": int(batch), "threads_per_rank": int(threads), "samples_per_s": sps,
                  "step_compute_s": comp, "step_collectives_s": coll}))
PY
done
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  /usr/bin/python3 "$root/bench/train/fno_torch.py" --n "$n" --batch "$batch" --history "$history" \
    --width "$width" --modes "$modes" --steps "$steps" --threads "$threads"
else
  echo '{"impl": "pytorch", "skipped": "python3-torch not installed"}'
fi
