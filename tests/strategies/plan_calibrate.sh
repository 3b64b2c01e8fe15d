#!/bin/sh
# sg-plan-calibrate --quick on 2 ranks (issue 19 §2): the file it writes
# has the single-stream rates and the shared ones (shared_ranks = 2, every
# *_shared rate > 0) and each rate's spread over the rounds, and sg-plan
# loads it and predicts a 2-rank mesh.
#   plan_calibrate.sh BIN_DIR MPIEXEC WORK_DIR SOURCE_DIR
set -eu
bin=$1 mpiexec=$2 work=$3 src=$4
mkdir -p "$work"
hw=$work/hw
# short samples (5 ms, not --quick's 50 ms): the test checks the file, not
# the machine's rates, in a second or two
OMP_NUM_THREADS=1 SG_PLAN_CAL_SAMPLE_S=0.005 "$mpiexec" -n 2 "$bin/sg-plan-calibrate" --quick --out "$hw"
grep -q '^shared_ranks = 2$' "$hw" || { echo "FAILED: shared_ranks is not 2"; cat "$hw"; exit 1; }
for k in gemm_flops conv_flops fft_flops mem_bw attn_flops act_rate norm_rate lnorm_rate up_rate; do
  awk -v k="${k}_shared" '$1 == k { found = 1; if (!($3 > 0)) bad = 1 }
      END { exit !(found && !bad) }' "$hw" || { echo "FAILED: ${k}_shared is not > 0"; exit 1; }
done
# the spreads are written (comments: 5 rounds, one line per rate)
grep -q '^# calibration: each rate the median of 5 rounds' "$hw" || { echo "FAILED: no calibration comment"; exit 1; }
[ "$(grep -c '^# spread [a-z_]* = [0-9.]* [0-9.]*$' "$hw")" = 9 ] || { echo "FAILED: not 9 spread lines"; exit 1; }
out=$("$bin/sg-plan" --config "$src/examples/configs/ns2d_vit.cfg" --data-grid 64x64 \
      --ranks 2 --mesh dp=2 --hardware "$hw" --json)
echo "$out"
echo "$out" | grep -q '"step_s": [0-9]' || { echo "FAILED: no step time"; exit 1; }
echo "plan_calibrate: PASSED"
