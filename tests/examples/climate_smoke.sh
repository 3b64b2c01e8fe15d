#!/bin/sh
# The climate config (examples/configs/navy_winds_climate.cfg) cut to a
# short run: after STEPS steps its latitude-weighted RMSE at lead 1 on the
# held-out 24 months beats persistence (and climatology) for UWND and VWND.
# The full run and its numbers: bench/RESULTS.md, "climate: monthly navy winds".
#   climate_smoke.sh BIN_DIR WORK_DIR SRC_DIR STEPS
set -eu
bin=$1 work=$2 src=$3 steps=$4
mkdir -p "$work"
cd "$work"
"$bin/sg-train" --config "$src/examples/configs/navy_winds_climate.cfg" --steps "$steps" \
  --eval-every 0 --rollout 1 --log-every 1000 --log-level warn --metrics climate.jsonl >climate.log 2>&1 ||
  { cat climate.log; exit 1; }
python3 - climate.jsonl <<'PY'
import json, sys
rec = [r for r in map(json.loads, open(sys.argv[1])) if r.get("lead") == 1][-1]
bad = []
for v in ("UWND", "VWND"):
    m, p, c = (rec[f"rmse_{v}{s}"] for s in ("", "_persistence", "_climatology"))
    print(f"{v} lead 1 latitude-weighted RMSE: model {m:.3f}, persistence {p:.3f}, climatology {c:.3f}")
    if not (m < p and m < c):
        bad.append(v)
if bad:
    sys.exit(f"the model does not beat persistence and climatology at lead 1 for {', '.join(bad)}")
PY
