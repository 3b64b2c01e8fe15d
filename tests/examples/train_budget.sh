#!/bin/sh
# sg-train's time_budget: a budget spent after the first step stops every
# rank at that step boundary (h=2: the ranks agree), writes that step's
# checkpoint and still evaluates (test error and rollout), the evaluation
# equal to a run of that many steps (constant lr, deterministic); a budget
# not spent runs to the end and reports the loop's seconds; bad values are
# refused. Also the rollout's per-sample relative L2 over all frames
# (rollout_rel_l2_seq, the FNO paper's metric): with one frame it equals
# the per-frame value, and on h=2 the one-process value.
#   train_budget.sh BIN_DIR MPIEXEC WORK_DIR SRC_DIR
set -u
bin=$1 mpiexec=$2 work=$3 src=$4
mkdir -p "$work" && cd "$work" || exit 1
rm -rf ck m_*.jsonl
"$mpiexec" -n 2 "$bin/sg-ns2d" --out ns_b.nc --n 16 --samples 6 --frames 6 --dt 1e-2 \
  --frame-dt 0.1 --mesh h=2 --overwrite --log-level warn || exit 1
common="--data ns_b.nc --batch 2 --modes 2 --width 4 --layers 1 --proj-width 8 --history 2
        --test-samples 2 --rollout-train 2 --rollout 2 --schedule constant --deterministic true
        --mesh h=2 --log-level warn"
run() { # run NAME ARGS...: sg-train on $np ranks, metrics m_NAME.jsonl, stdout out_NAME
  name=$1
  shift
  # shellcheck disable=SC2086
  timeout 120 "$mpiexec" -n "${np:-2}" "$bin/sg-train" $common --metrics "m_$name.jsonl" "$@" \
    >"out_$name" 2>&1
  rc=$?
  cat "out_$name"
  [ $rc -eq 0 ] || { echo "train_budget: run $name exit $rc"; exit 1; }
}
fail=0
need() { grep -q -- "$1" "$2" || { echo "train_budget: no '$1' in $2"; fail=1; }; }
run budget --steps 50 --time-budget 1e-9 --ckpt-dir ck
run one --steps 1
run frame1 --steps 1 --rollout 1
np=1 run serial --steps 1 --mesh h=1
run roomy --steps 3 --time-budget 1e6 --time-budget-clock cpu
need "time budget of 1e-09 wall seconds spent after step 1 of 50" out_budget
need '"budget_stop": 1' m_budget.jsonl
need '"rollout_rel_l2"' m_budget.jsonl
[ -f ck/step_000001.nc ] || { echo "train_budget: no checkpoint of step 1"; fail=1; }
e_budget=$(grep '"eval_rel_l2"' m_budget.jsonl | tail -1)
e_one=$(grep '"eval_rel_l2"' m_one.jsonl | tail -1)
if [ -z "$e_one" ] || [ "$e_budget" != "$e_one" ]; then
  echo "train_budget: evaluation '$e_budget' differs from 1 step's '$e_one'"
  fail=1
fi
need '{"step": 3, "train_wall_s": ' m_roomy.jsonl
need '"budget_stop": 0' m_roomy.jsonl
need '"rollout_rel_l2"' m_roomy.jsonl
python3 - <<'PY' || fail=1
import json
def roll(name):
    return [r for r in map(json.loads, open(f"m_{name}.jsonl")) if "rollout_rel_l2" in r][-1]
f1, h2, p1 = roll("frame1"), roll("one"), roll("serial")
assert abs(f1["rollout_rel_l2_seq"] - f1["rollout_rel_l2"][0]) <= 1e-6 * f1["rollout_rel_l2"][0], f1
assert abs(h2["rollout_rel_l2_seq"] - p1["rollout_rel_l2_seq"]) <= 1e-5 * p1["rollout_rel_l2_seq"], (h2, p1)
assert min(h2["rollout_rel_l2"]) * 0.5 < h2["rollout_rel_l2_seq"] < 2 * max(h2["rollout_rel_l2"]), h2
print("train_budget: rollout_rel_l2_seq", f1["rollout_rel_l2_seq"], h2["rollout_rel_l2_seq"],
      p1["rollout_rel_l2_seq"])
PY
# shellcheck disable=SC2086
sh "$src/tests/examples/expect_fail.sh" "time_budget_clock must be wall or cpu" 60 \
  "$mpiexec" -n 2 "$bin/sg-train" $common --steps 1 --time-budget-clock gpu || fail=1
# shellcheck disable=SC2086
sh "$src/tests/examples/expect_fail.sh" "time_budget must be a finite number >= 0" 60 \
  "$mpiexec" -n 2 "$bin/sg-train" $common --steps 1 --time-budget -1 || fail=1
[ $fail -eq 0 ] && echo "train_budget: ok"
exit $fail
