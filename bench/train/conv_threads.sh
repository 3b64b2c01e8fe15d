#!/bin/bash
# Wall and CPU (user + sys) time per step of the bench/train CNN and U-Net,
# f32 and bf16, at 1 and 2 OpenMP threads, one rank: LONG minus SHORT steps,
# alternating within each of ROUNDS rounds (bench/RESULTS.md, "bf16 policy:
# the rounding passes in the kernels").
#   DATA=ns.nc [ROUNDS=1 LONG=20 SHORT=5 MODELS="cnn unet" DTYPES="f32 bf16"
#    THREADS="1 2"] bench/train/conv_threads.sh
# OpenBLAS picks its kernels from the CPU; set OPENBLAS_CORETYPE in the
# environment to pin them (e.g. Zen or Haswell on AVX2 machines, Cooperlake or
# SkylakeX with AVX-512: naming a core type the CPU lacks faults). sg-info
# prints the kernels in use. On a machine shared with other jobs, libgomp's
# default spin-wait makes 2 threads slower than 1: GOMP_SPINCOUNT=10000 (or
# OMP_WAIT_POLICY=passive) in the environment is passed on (bench/RESULTS.md,
# "Two threads per rank").
set -eu
cd "$(dirname "$0")/../.."
# OPENBLAS_CORETYPE: the caller's, else the widest kernels this CPU runs
# (tools/env.sh: Cooperlake, SkylakeX or Haswell; a fixed Cooperlake died of
# SIGILL on an AVX2-only CPU)
source tools/env.sh
export OPENBLAS_NUM_THREADS=1
LONG=${LONG:-20} SHORT=${SHORT:-5} ROUNDS=${ROUNDS:-1}
run() { # model dtype threads steps -> "wall user sys"
  case $1 in
    cnn) size=(--width 32 --blocks 4 --kernel 3 --groups 4 --proj-width 128) ;;
    unet) size=(--width 16 --levels 3 --groups 4) ;;
  esac
  OMP_NUM_THREADS=$3 /usr/bin/time -f "%e %U %S" build/bin/sg-train --model "$1" --data "$DATA" \
    "${size[@]}" --history 10 --batch 8 --steps "$4" --test-samples 1 --mesh h=1 --param-dtype "$2" \
    --log-every 100000 --log-level warn 2>&1 >/dev/null | tail -1
}
for r in $(seq "$ROUNDS"); do
  for m in ${MODELS:-cnn unet}; do for dt in ${DTYPES:-f32 bf16}; do for th in ${THREADS:-1 2}; do
    la=$(cut -d' ' -f1 /proc/loadavg)
    a=$(run "$m" "$dt" "$th" "$LONG"); b=$(run "$m" "$dt" "$th" "$SHORT")
    python3 -c "
a = [float(v) for v in '$a'.split()]; b = [float(v) for v in '$b'.split()]; n = $LONG - $SHORT
w = (a[0] - b[0]) / n; c = (a[1] + a[2] - b[1] - b[2]) / n
print(f'round $r $m $dt threads $th: wall {w * 1e3:.0f} ms/step ({8 / w:.1f} samples/s), cpu {c * 1e3:.0f} ms/step, load $la')"
  done; done; done
done
