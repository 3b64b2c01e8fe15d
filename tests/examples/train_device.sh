#!/bin/sh
# sg-train on one GPU (device = cuda; issue 22) against the host, end to
# end: the FNO (grid channels on) and the CNN, 10 steps on a 32x32 NS
# dataset made here by sg-ns2d, one process each: every step's loss and the
# final test error within 1e-3 relative of the host run (f32: cuFFT/cuBLAS
# against FFTW/the host GEMM over 10 AdamW steps); then a cuda run stopped
# at step 5 with its checkpoint, resumed on the host (the same file
# format), steps 6-10 within 1e-3 of the cuda run. Exit 77 without a CUDA
# device (1 with SG_REQUIRE_GPU, as tools/test-gpu sets). With two GPUs or
# more also the CNN over tp=2, one rank per GPU, against the host.
#   train_device.sh BIN_DIR MPIEXEC WORK_DIR SRC_DIR
set -eu
bin=$1 mpiexec=$2 work=$3 src=$4
mkdir -p "$work"
cd "$work"
ndev=$("$mpiexec" -n 1 "$bin/sg-info" --json | sed -n 's/.*"cuda_devices": \([0-9]*\).*/\1/p' | head -1)
if [ -z "$ndev" ] || [ "$ndev" -lt 1 ]; then
  if [ -n "${SG_REQUIRE_GPU:-}" ] && [ "${SG_REQUIRE_GPU}" != 0 ]; then
    echo "no CUDA device: FAILED (SG_REQUIRE_GPU)"; exit 1
  fi
  echo "no CUDA device: skipped"; exit 77
fi
cmp="python3 $src/tests/examples/compare_losses.py"
"$mpiexec" -n 1 "$bin/sg-ns2d" --out ns32.nc --n 32 --samples 8 --frames 4 --dt 1e-2 \
  --frame-dt 0.1 --mesh h=1 --overwrite --log-level warn
for model in fno cnn; do
  common="--model $model --data ns32.nc --steps 10 --batch 2 --width 8 --modes 4 --layers 2
          --blocks 1 --groups 2 --proj-width 16 --history 2 --test-samples 2 --clip 1
          --deterministic --log-every 1000 --log-level warn"
  run() { # NAME [extra]
    name=$1
    shift
    # shellcheck disable=SC2086
    if ! "$mpiexec" -n 1 "$bin/sg-train" $common --metrics "$name.jsonl" "$@" >"$name.log" 2>&1; then
      cat "$name.log"; echo "FAILED: $model $name ($*)"; exit 1
    fi
  }
  rm -rf "ck_$model"
  run "${model}_host" --device host
  run "${model}_cuda" --device cuda
  $cmp "${model}_host.jsonl" "${model}_cuda.jsonl" 1e-3
  $cmp "${model}_host.jsonl" "${model}_cuda.jsonl" 1e-3 --eval
  run "${model}_stop" --device cuda --stop-after 5 --ckpt-dir "ck_$model"
  run "${model}_resumed" --device host --resume "ck_$model/step_000005.nc"
  # steps 6-10 of the resumed run against the cuda run's
  python3 - "${model}_cuda.jsonl" "${model}_resumed.jsonl" <<'PY'
import json, sys
ref = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r}
oth = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2])) if "loss" in r}
bad = [s for s in oth if s not in ref or abs(oth[s] - ref[s]) > 1e-3 * abs(ref[s])]
print("resumed steps", sorted(oth), "against the cuda run: differ at", bad)
sys.exit(1 if bad or sorted(oth) != list(range(6, 11)) else 0)
PY
  echo "$model: cuda against the host, and a cuda checkpoint resumed on the host: ok"
done
# two GPUs: the CNN over tp=2, one rank per GPU (its tp collectives and the
# plan on device buffers over NCCL) against the host on the same mesh (a
# split batch or domain waits for dist_loss on the device: sg_plan_check)
if [ "$ndev" -ge 2 ]; then
  common="--model cnn --data ns32.nc --steps 10 --batch 2 --width 8 --blocks 1
          --groups 2 --history 2 --test-samples 2 --clip 1 --deterministic
          --mesh tp=2 --log-every 1000 --log-level warn"
  for dev in host cuda; do
    # shellcheck disable=SC2086
    if ! "$mpiexec" -n 2 "$bin/sg-train" $common --device $dev \
         --metrics "cnn_tp2_$dev.jsonl" >"cnn_tp2_$dev.log" 2>&1; then
      cat "cnn_tp2_$dev.log"; echo "FAILED: cnn tp=2 --device $dev"; exit 1
    fi
  done
  $cmp cnn_tp2_host.jsonl cnn_tp2_cuda.jsonl 1e-3
  $cmp cnn_tp2_host.jsonl cnn_tp2_cuda.jsonl 1e-3 --eval
  echo "cnn tp=2 on two GPUs against the host: ok"
fi
echo "train_device: PASSED"
