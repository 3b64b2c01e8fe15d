#!/bin/bash
# Halo exchange with malloc'd ("user") and plan-allocated ("plan") blocks,
# 2 ranks, four layouts, ALT alternations (default 5), then overlap.
# Usage: bench/halo/run_blocks.sh BUILD_DIR OUT_DIR [ALT]
# Tables: python3 bench/halo/summarize.py OUT_DIR/exchange.jsonl
set -euo pipefail
build=$1 out=$2 alt=${3:-5}
B=$build/bin/sg-bench-halo
MPIEXEC=${MPIEXEC:-mpiexec.mpich}
export OMP_NUM_THREADS=1
mkdir -p "$out"
: > "$out/exchange.jsonl"
: > "$out/overlap.jsonl"
for a in $(seq "$alt"); do
  for split in h w; do for lay in cl packed; do for blk in user plan; do
    $MPIEXEC -n 2 "$B" --reps 41 --only exchange --split $split \
      --layout $lay --block $blk >> "$out/exchange.jsonl"
  done; done; done
done
for a in 1 2; do for blk in user plan; do
  $MPIEXEC -n 2 "$B" --reps 31 --only overlap --block $blk >> "$out/overlap.jsonl"
done; done
