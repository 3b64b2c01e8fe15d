#!/bin/sh
# The promise, end to end: sg-train's loss trajectory (20 steps,
# deterministic mode) on several meshes equals the one-process run to 1e-5
# relative per step, for the NS task (a dataset made here by sg-ns2d) or the
# climate example (monthly_navy_winds, longitude split).
#   train_trajectories.sh ns|navy BIN_DIR MPIEXEC WORK_DIR SRC_DIR
set -eu
task=$1 bin=$2 mpiexec=$3 work=$4 src=$5
mkdir -p "$work"
cd "$work"
cmp="python3 $src/tests/examples/compare_losses.py"
if [ "$task" = ns ]; then
  "$mpiexec" -n 2 "$bin/sg-ns2d" --out ns.nc --n 24 --samples 10 --frames 5 --dt 1e-2 \
    --frame-dt 0.1 --mesh h=2 --overwrite --log-level warn
  common="--data ns.nc --steps 20 --batch 4 --modes 4 --width 8 --layers 2 --proj-width 16
          --history 2 --test-samples 2 --deterministic --log-every 1000 --log-level warn"
  meshes="2:h=2 2:w=2 4:h=2,w=2 4:dp=2,h=2 3:h=3"
else
  data=/usr/share/ferret-vis/data/monthly_navy_winds.cdf
  if [ ! -f "$data" ]; then echo "SKIPPED: $data missing (apt-get install ferret-datasets)"; exit 77; fi
  common="--data $data --vars UWND,VWND --dim-map FNOCX=lon,FNOCY=lat,TIME=time --steps 20
          --batch 4 --modes 4 --width 8 --layers 2 --proj-width 16 --loss mse --deterministic
          --log-every 1000 --log-level warn"
  meshes="2:w=2 3:w=3"
fi
# shellcheck disable=SC2086
"$mpiexec" -n 1 "$bin/sg-train" $common --mesh h=1 --metrics ref.jsonl
for m in $meshes; do
  n=${m%%:*} spec=${m#*:}
  # shellcheck disable=SC2086
  "$mpiexec" -n "$n" "$bin/sg-train" $common --mesh "$spec" --metrics "m_$spec.jsonl"
  $cmp ref.jsonl "m_$spec.jsonl" 1e-5
  $cmp ref.jsonl "m_$spec.jsonl" 1e-5 --eval
done
echo "trajectories match"
