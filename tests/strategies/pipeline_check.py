#!/usr/bin/python3
"""Check pipelined sg-train runs against the one-process run, in one process
(a netCDF4 import per comparison would cost more than the runs).

usage: pipeline_check.py RTOL ATOL RUN...
In the current directory: ref.jsonl and ck_ref/step_NNNNNN.nc (the
one-process run), and per RUN RUN.jsonl and ck_RUN/step_NNNNNN.stage*.nc
(its per-stage checkpoints). For every RUN: each step's loss and gradient
norm within RTOL relative of the reference's; each stage's parameters
within RTOL relative or ATOL absolute of the reference's; the stages
together hold every parameter exactly once. Exits 1, saying where, at the
first difference. Needs Debian's python3-netcdf4, hence /usr/bin/python3."""
import glob
import json
import sys

import netCDF4
import numpy as np


def metrics(path):
    out = {}
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if "loss" in rec:
                out[rec["step"]] = (rec["loss"], rec["grad_norm"])
    return out


def params(path):
    with netCDF4.Dataset(path) as d:
        return {n: np.asarray(v[:], dtype=np.float64) for n, v in d.variables.items() if n.startswith("params.")}


def check_run(name, rtol, atol, ref_m, ref_p, last):
    m = metrics(f"{name}.jsonl")
    worst = 0.0
    for step, a in sorted(ref_m.items()):
        if step not in m:
            return f"{name}: step {step} missing"
        for what, x, y in zip(("loss", "grad_norm"), a, m[step]):
            rel = abs(x - y) / max(abs(x), 1e-30)
            worst = max(worst, rel)
            if not rel <= rtol:
                return f"{name}: step {step} {what} {y!r} vs reference {x!r} (relative {rel:.3g})"
    files = sorted(glob.glob(f"ck_{name}/step_{last:06d}.stage*.nc"))
    seen = []
    for f in files:
        for n, y in params(f).items():
            seen.append(n)
            x = ref_p.get(n)
            if x is None or x.shape != y.shape:
                return f"{f}: {n} is not a parameter of the reference with its shape"
            ok = np.isfinite(y) & (np.abs(x - y) <= atol + rtol * np.abs(x))
            if not ok.all():
                return f"{f}: {n} differs from the reference ({int((~ok).sum())} of {ok.size})"
    if sorted(seen) != sorted(ref_p):
        return f"{name}: the stages hold {sorted(seen)}, not each of {sorted(ref_p)} once"
    print(f"{name}: {len(ref_m)} steps, {len(files)} stages, {len(seen)} parameters match (worst {worst:.2g})")
    return None


def main():
    rtol, atol, runs = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
    ref_m = metrics("ref.jsonl")
    last = max(ref_m)
    ref_p = params(f"ck_ref/step_{last:06d}.nc")
    for name in runs:
        err = check_run(name, rtol, atol, ref_m, ref_p, last)
        if err:
            print(err)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
