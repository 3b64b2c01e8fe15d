#!/usr/bin/env bash
# bench/plan/calibrate_model.sh — sg-plan's rates from the model's own
# steps (issue 19 §2, docs/choosing-a-mesh-time.md "Calibrating from the
# model"), in one command:
#
#   bench/plan/calibrate_model.sh --hardware BASE --out HW [--steps 3]
#                                 [--copies N] -- SG-TRAIN-ARGS...
#
# SG-TRAIN-ARGS are the model, its size, the data and the batch, as
# sg-train and sg-plan both take them (e.g. --model fno --width 32 ...
# --data ns.nc --batch 8). It runs
#   1. sg-train on one rank (mesh h=1) for 1 + steps steps with the tape's
#      op timers on (--op-times): each op class's seconds per step, the
#      median over the steps after the warm-up;
#   2. the same run as N copies at once (N = the cores; one rank each: the
#      node's ranks sharing its memory system, as the shared rates of
#      sg-plan-calibrate), when N >= 2;
#   3. sg-plan --calibrate-from-model: the rates that make the time model
#      predict those seconds on one rank, into HW, BASE's links (alpha,
#      bandwidth), memory and node kept (BASE: sg-plan-calibrate's file, or
#      a shipped one).
# About 4 x (1 + steps) steps of the model; OMP_NUM_THREADS=1 as the runs.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/tools/env.sh"
steps=3 base="" out="" copies=$(nproc)
while [ $# -gt 0 ]; do
  case "$1" in
    --hardware) base=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --copies) copies=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "calibrate_model.sh: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
if [ -z "$base" ] || [ -z "$out" ]; then echo "calibrate_model.sh: --hardware BASE and --out HW are needed (--help)" >&2; exit 2; fi
[ $# -gt 0 ] || { echo "calibrate_model.sh: no model: give sg-train's arguments after -- (--help)" >&2; exit 2; }
case $steps in ''|*[!0-9]*|0) echo "calibrate_model.sh: --steps must be >= 1, not '$steps'" >&2; exit 2 ;; esac
case $copies in ''|*[!0-9]*|0) echo "calibrate_model.sh: --copies must be >= 1, not '$copies'" >&2; exit 2 ;; esac
bin=${SG_BIN:-$root/build/bin}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
work=$(mktemp -d /tmp/sg-calibrate-model.XXXXXX)
trap 'rm -rf "$work"' EXIT
train() { # OP-TIMES-FILE
  "$SG_MPIEXEC" -n 1 "$bin/sg-train" "$@" --mesh h=1 --steps $((steps + 1)) \
    --log-every 100000 --log-level warn > /dev/null
}
files=$work/one
train "$@" --op-times "$work/one"
if [ "$copies" -ge 2 ]; then
  pids=()
  for i in $(seq "$copies"); do
    train "$@" --op-times "$work/shared-$i" & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  for i in $(seq "$copies"); do files=$files,$work/shared-$i; done
fi
"$bin/sg-plan" "$@" --mesh h=1 --hardware "$base" --calibrate-from-model "$files" \
  --hardware-out "$out"
