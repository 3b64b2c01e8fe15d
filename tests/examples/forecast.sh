#!/bin/sh
# sg-forecast end to end. A CNN checkpoint of sg-train (NS vorticity,
# 16x16) forecasts 6 steps from frames 1-2 of a 4-frame series (past the
# file's end: the model's output feeds it) with 2 members (one perturbed):
# the file is the same, bit for bit, on 1 rank, h=2 and w=3. An FNO
# checkpoint of the navy winds (lat/lon, hours since..., fill values)
# forecasts 4 steps from its frame 129 of 132 on 1 rank and w=3: the same
# bits. check_forecast.py checks the CF attributes, the coordinates and
# provenance with netCDF4 (and xarray when installed). Bad inputs (--steps
# 0, a checkpoint of another model kind, an init file on another grid or
# without the variable, a window past the file's end) fail with a clear
# error on every rank.
#   forecast.sh BIN_DIR MPIEXEC WORK_DIR SRC_DIR
set -eu
bin=$1 mpiexec=$2 work=$3 src=$4
mkdir -p "$work"
cd "$work"
rm -rf ck ckn ./*.nc
navy=/usr/share/ferret-vis/data/monthly_navy_winds.cdf
"$mpiexec" -n 2 "$bin/sg-ns2d" --out ns.nc --n 16 --samples 4 --frames 4 --dt 1e-2 \
  --frame-dt 0.1 --mesh h=2 --overwrite --log-level warn
"$mpiexec" -n 1 "$bin/sg-ns2d" --out ns12.nc --n 12 --samples 1 --frames 3 --dt 1e-2 \
  --frame-dt 0.1 --overwrite --log-level warn
"$mpiexec" -n 1 "$bin/sg-train" --model cnn --data ns.nc --steps 2 --batch 2 --width 4 \
  --blocks 1 --groups 2 --proj-width 8 --history 2 --test-samples 1 --log-level warn --ckpt-dir ck
fc() { # RANKS ARGS...: sg-forecast from the CNN checkpoint
  n=$1
  shift
  "$mpiexec" -n "$n" "$bin/sg-forecast" --ckpt ck/step_000002.nc --log-level warn "$@"
}
ns="--init ns.nc --init-index 1 --init-sample 3 --steps 6 --ensemble 2 --perturb 0.1 --seed 7"
# shellcheck disable=SC2086
fc 1 $ns --out f1.nc --mesh h=1
# shellcheck disable=SC2086
fc 2 $ns --out f2.nc --mesh h=2
# shellcheck disable=SC2086
fc 3 $ns --out f3.nc --mesh w=3
nav=""
if [ -f "$navy" ]; then
  "$mpiexec" -n 1 "$bin/sg-train" --data "$navy" --vars UWND,VWND --dim-map FNOCX=lon,FNOCY=lat,TIME=time \
    --steps 1 --batch 2 --modes 4 --width 4 --layers 1 --proj-width 8 --loss mse --log-level warn \
    --ckpt-dir ckn
  for m in 1:h=1 3:w=3; do
    "$mpiexec" -n "${m%%:*}" "$bin/sg-forecast" --ckpt ckn/step_000001.nc --init "$navy" \
      --init-index 129 --steps 4 --out "n${m%%:*}.nc" --mesh "${m#*:}" --log-level warn
  done
  nav="n1.nc n3.nc $navy"
fi
# shellcheck disable=SC2086
/usr/bin/python3 "$src/tests/examples/check_forecast.py" ns.nc f1.nc f2.nc f3.nc $nav
expect() { # REGEX ARGS...: sg-forecast on 2 ranks fails, every rank says REGEX
  regex=$1
  shift
  rc=0
  out=$(timeout 60 "$mpiexec" -n 2 "$bin/sg-forecast" --log-level warn "$@" 2>&1) || rc=$?
  if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then
    printf '%s\n' "$out"
    echo "FAILED: sg-forecast $* exited $rc (expected an error)"
    exit 1
  fi
  k=$(printf '%s\n' "$out" | grep -E -c "sg-forecast: error: .*($regex)" || true)
  if [ "$k" -lt 2 ]; then
    printf '%s\n' "$out"
    echo "FAILED: sg-forecast $*: /$regex/ on $k of 2 ranks"
    exit 1
  fi
  echo "refused on every rank: $regex"
}
ck="--ckpt ck/step_000002.nc --out bad.nc"
# shellcheck disable=SC2086
expect "steps must be >= 1" $ck --init ns.nc --steps 0
# shellcheck disable=SC2086
expect "holds a 'cnn' model, not 'fno'" $ck --init ns.nc --steps 1 --model fno
# shellcheck disable=SC2086
expect "12x12 grid; the checkpoint's model was trained on 16x16" $ck --init ns12.nc --steps 1
# shellcheck disable=SC2086
expect "ends past the 4 frames" $ck --init ns.nc --init-index 3 --steps 1
if [ -f "$navy" ]; then
  # shellcheck disable=SC2086
  expect "has no variable 'vorticity'" $ck --init "$navy" --steps 1
fi
if [ -e bad.nc ]; then echo "FAILED: a refused forecast left bad.nc"; exit 1; fi
echo "forecasts match on every mesh"
