#!/bin/sh
# Multi-step (autoregressive) training end to end (sg-train rollout_train,
# rollout_grad, rollout_curriculum): 10-step trajectories with
# rollout_train = 4 (losses, gradient norms, the final test errors of the
# model and the baselines) equal to one process to 1e-5 relative on h=2,
# dp=2,h=2 and w=3; the pushforward variant on h=2 and pp=2 (steps 1 ..
# K-1 forward only through the stages, fed back on every stage); a curriculum
# (K = 1, 1, 1, 2, ...) on h=2; activation checkpointing per step the same
# bits as without, with a lower peak; a masked time series (COADS SST, land
# masked: the masked loss and feedback) on h=2; the baselines (persistence,
# climatology) of the final evaluation and the rollout equal to a direct
# computation from the file (also with history 1, lead 2), and on SST the
# latitude-weighted RMSE and ACC (WeatherBench 2) of the baselines too,
# at leads 1-3 from every test init (rollout = 3 on a time series);
# loss_weighting = latitude on h=2, and on pp=2 (with pushforward on the
# masked series and the metrics at every lead) equal to one process.
#   rollout_trajectories.sh fno|cnn BIN_DIR MPIEXEC WORK_DIR SRC_DIR
set -eu
model=$1 bin=$2 mpiexec=$3 work=$4 src=$5
mkdir -p "$work"
cd "$work"
cmp="python3 $src/tests/examples/compare_losses.py"
"$mpiexec" -n 2 "$bin/sg-ns2d" --out ns.nc --n 24 --samples 10 --frames 8 --dt 1e-2 \
  --frame-dt 0.1 --mesh h=2 --overwrite --log-level warn
common="--model $model --data ns.nc --steps 10 --batch 4 --width 8 --modes 4 --layers 2 --blocks 2
        --groups 2 --proj-width 16 --history 2 --test-samples 2 --deterministic --rollout-train 4
        --log-every 1000 --log-level warn"
run() { # NAME RANKS MESH [extra args]: run sg-train, metrics in NAME.jsonl
  name=$1 n=$2 spec=$3
  shift 3
  rc=0
  # shellcheck disable=SC2086
  "$mpiexec" -n "$n" "$bin/sg-train" $common --mesh "$spec" --metrics "$name.jsonl" "$@" >"$name.log" 2>&1 || rc=$?
  if [ $rc -ne 0 ]; then cat "$name.log"; echo "FAILED: $name (mesh $spec $*)"; exit 1; fi
}
same() { # REF NAME RANKS MESH [extra]: run NAME, its trajectory equal to REF's
  ref=$1
  shift
  run "$@"
  for key in loss grad_norm eval_rel_l2 eval_persistence_rel_l2 eval_climatology_rel_l2; do
    $cmp "$ref.jsonl" "$1.jsonl" 1e-5 --key $key
  done
}
same_bits() { # REF OTHER: loss and gradient-norm trajectories identical
  $cmp "$1.jsonl" "$2.jsonl" 0
  $cmp "$1.jsonl" "$2.jsonl" 0 --key grad_norm
}
run ref 1 h=1 --rollout 3
/usr/bin/python3 "$src/tests/examples/check_baselines.py" ref.jsonl ns.nc vorticity 2 1 2 3 1e-5
# history 1, lead 2: targets and the rollout's frames two apart
run lead2 1 h=1 --history 1 --lead 2 --rollout-train 2 --rollout 3
/usr/bin/python3 "$src/tests/examples/check_baselines.py" lead2.jsonl ns.nc vorticity 1 2 2 3 1e-5
same ref h2 2 h=2
same ref dph2 4 dp=2,h=2
same ref w3 3 w=3
run pf 1 h=1 --rollout-grad pushforward
same pf pf_h2 2 h=2 --rollout-grad pushforward
same pf pf_pp 2 pp=2 --rollout-grad pushforward
run cur 1 h=1 --rollout-curriculum 3
same cur cur_h2 2 h=2 --rollout-curriculum 3
python3 - cur.jsonl <<'PY'
import json, sys
k = [json.loads(l)["rollout_steps"] for l in open(sys.argv[1]) if "rollout_steps" in l]
if k != [1, 1, 1, 2, 2, 2, 3, 3, 3, 4]:
    sys.exit(f"curriculum: K per step {k}, expected 1,1,1,2,2,2,3,3,3,4")
print("curriculum: K per step", k)
PY
run ck_h2 2 h=2 --activation-checkpointing blocks
same_bits h2 ck_h2
python3 - h2.jsonl ck_h2.jsonl <<'PY'
import json, sys
def peak(p):
    return [json.loads(l)["peak_work_mib"] for l in open(p) if "peak_work_mib" in l][-1]
a, b = peak(sys.argv[1]), peak(sys.argv[2])
print(f"peak_work_mib {a:.3f} without, {b:.3f} with activation checkpointing (rollout_train 4)")
if not b < a:
    sys.exit("activation checkpointing did not lower the peak")
PY
# a time series with land masked: masked loss, masked feedback, baselines
coads="--data /usr/share/ferret-vis/data/coads_climatology.cdf --vars SST --dim-map COADSX=lon,COADSY=lat,TIME=time
       --test-frames 3 --history 1 --steps 4 --batch 2 --width 4 --blocks 1 --proj-width 8 --rollout-train 3
       --rollout 3"
# shellcheck disable=SC2086
run sst 1 h=1 $coads
/usr/bin/python3 "$src/tests/examples/check_baselines.py" sst.jsonl \
  /usr/share/ferret-vis/data/coads_climatology.cdf SST 1 1 3 3 1e-5
# shellcheck disable=SC2086
same sst sst_h2 2 h=2 $coads
for key in rmse_SST acc_SST rmse_SST_persistence rmse_SST_leads acc_SST_leads rmse_SST_persistence_leads; do
  $cmp sst.jsonl sst_h2.jsonl 1e-5 --key $key
done
# the latitude-weighted loss (cos(lat) weights times the land mask): the
# same trajectory on h=2 (rows split: each rank its rows' weights), and
# not the unweighted one
if [ "$model" = fno ]; then # (the loss is the model's business: once)
  # shellcheck disable=SC2086
  run sstw 1 h=1 $coads --loss-weighting latitude
  # shellcheck disable=SC2086
  same sstw sstw_h2 2 h=2 $coads --loss-weighting latitude
  if $cmp sst.jsonl sstw.jsonl 1e-3 >/dev/null; then echo "FAILED: loss_weighting = latitude left the loss unchanged"; exit 1; fi
  # and through a pipeline: the last stage's weighted loss, multi-step
  # training with pushforward (steps 1-2 forward through the stages, the
  # masked predictions fed back on every stage), the latitude-weighted
  # metrics at every lead (rollout = 3: the forecasts run forward through
  # the stages, the last one scores)
  # shellcheck disable=SC2086
  run sstw1 1 h=1 $coads --loss-weighting latitude --rollout-grad pushforward
  # shellcheck disable=SC2086
  same sstw1 sstw1_pp 2 pp=2 $coads --loss-weighting latitude --rollout-grad pushforward
  for key in rmse_SST acc_SST rmse_SST_leads acc_SST_leads rmse_SST_persistence_leads; do
    $cmp sstw1.jsonl sstw1_pp.jsonl 1e-5 --key $key
  done
fi
echo "rollout trajectories match ($model)"
