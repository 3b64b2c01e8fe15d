#!/bin/sh
# Activation checkpointing end to end (sg-train, activation_checkpointing):
# with deterministic = true, the loss and gradient-norm trajectories and the
# final test error of `blocks` (and `every:2`) are the same bits as without
# checkpointing, on h=2 (sharded blocks: halo exchanges and global
# statistics recomputed) and on fsdp=2 with zero = 3 (parameters gathered
# again for the recomputation; one grad-ready reduction per parameter);
# the peak activation memory (metrics' peak_work_mib) drops.
#   act_ckpt_trajectories.sh fno|cnn|unet BIN_DIR MPIEXEC WORK_DIR SRC_DIR
set -eu
model=$1 bin=$2 mpiexec=$3 work=$4 src=$5
mkdir -p "$work"
cd "$work"
"$mpiexec" -n 2 "$bin/sg-ns2d" --out ns.nc --n 24 --samples 10 --frames 5 --dt 1e-2 \
  --frame-dt 0.1 --mesh h=2 --overwrite --log-level warn
common="--model $model --data ns.nc --steps 10 --batch 8 --width 8 --modes 4 --layers 3 --blocks 3
        --levels 2 --groups 2 --proj-width 16 --history 2 --test-samples 2 --deterministic
        --log-every 1000 --log-level warn"
run() { # NAME RANKS MESH [extra args]: run sg-train, metrics in NAME.jsonl
  name=$1 n=$2 spec=$3
  shift 3
  rc=0
  # shellcheck disable=SC2086
  "$mpiexec" -n "$n" "$bin/sg-train" $common --mesh "$spec" --metrics "$name.jsonl" "$@" >"$name.log" 2>&1 || rc=$?
  if [ $rc -ne 0 ]; then cat "$name.log"; echo "FAILED: $name (mesh $spec $*)"; exit 1; fi
}
same_bits() { # REF OTHER: loss, grad_norm and final error trajectories identical
  python3 - "$1.jsonl" "$2.jsonl" <<'PY'
import json, sys
def recs(p):
    out = {}
    for line in open(p):
        r = json.loads(line)
        for k in ("loss", "grad_norm", "eval_rel_l2"):
            if k in r:
                out[(k, r["step"])] = r[k]
    return out
a, b = recs(sys.argv[1]), recs(sys.argv[2])
if not a or a != b:
    bad = sorted(k for k in a if a.get(k) != b.get(k))[:3]
    sys.exit(f"{sys.argv[2]} differs from {sys.argv[1]}: {[(k, a.get(k), b.get(k)) for k in bad]}")
print(f"{sys.argv[2]}: {len(a)} values the same bits as {sys.argv[1]}")
PY
}
lower_peak() { # REF OTHER: OTHER's peak_work_mib is below REF's
  python3 - "$1.jsonl" "$2.jsonl" <<'PY'
import json, sys
def peak(p):
    return [json.loads(l)["peak_work_mib"] for l in open(p) if "peak_work_mib" in l][-1]
a, b = peak(sys.argv[1]), peak(sys.argv[2])
print(f"peak_work_mib {a:.3f} without, {b:.3f} with activation checkpointing")
if not b < a:
    sys.exit("activation checkpointing did not lower the peak")
PY
}
run base_h2 2 h=2
run ck_h2 2 h=2 --activation-checkpointing blocks
same_bits base_h2 ck_h2
lower_peak base_h2 ck_h2
run every2_h2 2 h=2 --activation-checkpointing every:2
same_bits base_h2 every2_h2
run base_z3 2 fsdp=2 --zero 3
run ck_z3 2 fsdp=2 --zero 3 --activation-checkpointing blocks
same_bits base_z3 ck_z3
echo "activation checkpointing trajectories match ($model)"
