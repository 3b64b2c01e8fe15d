#!/usr/bin/env bash
# bench/train: peak memory per rank of the ViT under each sequence-parallel
# flavour (sp_mode ring, ulysses, usp over the domain dims h, w; and TP with
# and without Megatron-SP's tp_sequence), 1, 2 and 4 ranks. sg-train's
# peak_mem_mib / peak_work_mib (core's sg_malloc accounting: the largest
# over the ranks; "work" is activations and workspace, above what is held
# before the first step) after 2 steps: counted, not timed, so the load of
# the machine does not move them.
#   bench/train/sp_memory.sh [--n 64] [--patch 2] [--width 64] [--heads 4] [--depth 4] [--batch 4]
# Prints one JSON line per run.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/tools/env.sh"
n=64 patch=2 width=64 heads=4 depth=4 batch=4
while [ $# -gt 0 ]; do
  case "$1" in
    --n) n=$2; shift 2 ;;
    --patch) patch=$2; shift 2 ;;
    --width) width=$2; shift 2 ;;
    --heads) heads=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d /tmp/sg-sp-memory.XXXXXX)
trap 'rm -rf "$work"' EXIT
bin=$root/build/bin
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
"$bin/sg-ns2d" --out "$work/ns.nc" --n "$n" --samples 4 --frames 5 --dt 1e-2 --frame-dt 0.1 \
  --mesh h=1 --log-level warn
# ranks:mesh:extra keys
runs="1:h=1:sp_mode=ring
2:h=2:sp_mode=ring 2:h=2:sp_mode=ulysses 2:w=2:sp_mode=usp 2:h=2:sp_mode=usp
4:h=4:sp_mode=ring 4:h=4:sp_mode=ulysses 4:h=2,w=2:sp_mode=ring 4:h=2,w=2:sp_mode=ulysses
4:h=2,w=2:sp_mode=usp 4:w=4:sp_mode=usp
2:tp=2:tp_sequence=false 2:tp=2:tp_sequence=true 4:tp=4:tp_sequence=false 4:tp=4:tp_sequence=true"
for spec in $runs; do
  IFS=: read -r ranks mesh kv <<<"$spec"
  key=${kv%%=*} val=${kv#*=}
  rm -f "$work/m.jsonl"
  "$SG_MPIEXEC" -n "$ranks" "$bin/sg-train" --model vit --data "$work/ns.nc" --steps 2 \
    --batch "$batch" --width "$width" --heads "$heads" --depth "$depth" --patch "$patch" \
    --history 2 --test-samples 1 --log-level warn --mesh "$mesh" "--${key//_/-}" "$val" \
    --metrics "$work/m.jsonl" >/dev/null
  /usr/bin/python3 - "$work/m.jsonl" "$ranks" "$mesh" "$key" "$val" "$n" "$patch" "$width" \
    "$heads" "$depth" "$batch" <<'PY'
import json, sys
path, ranks, mesh, key, val, n, patch, width, heads, depth, batch = sys.argv[1:]
mem = next(r for r in map(json.loads, open(path)) if "peak_mem_mib" in r)
print(json.dumps({"model": "vit", "ranks": int(ranks), "mesh": mesh, key: val,
                  "tokens": (int(n) // int(patch)) ** 2, "width": int(width), "heads": int(heads),
                  "depth": int(depth), "batch": int(batch), "peak_mem_mib_per_rank": mem["peak_mem_mib"],
                  "peak_work_mib_per_rank": mem["peak_work_mib"]}))
PY
done
