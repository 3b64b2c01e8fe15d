#!/usr/bin/python3
"""Check sg-train runs (pipelined or on any mesh) against the one-process
run, in one process (a netCDF4 import per comparison would cost more than
the runs).

usage: check_runs.py [--ref REF] RTOL ATOL [--exclude S | --exclude S[I]]... RUN...
In the current directory: REF.jsonl and ck_REF/step_NNNNNN.nc (the
one-process run; REF defaults to ref), and per RUN RUN.jsonl and ck_RUN/step_NNNNNN.nc (its
checkpoint: one file; a pipeline's is written by every stage). For every RUN: each step's
loss and gradient norm, and the final test evaluation (forward through
the stages), within RTOL relative of the reference's; the checkpoint holds
every parameter of the reference, within RTOL relative or ATOL absolute.
--exclude S leaves out of the parameter check every parameter whose name
contains S; S[I] only row I (first axis) of each (the ViT's key bias,
qkv.b[1], has a zero gradient: AdamW turns its rounding noise into steps
of size lr on any mesh, and the loss does not depend on it).
Exits 1, saying where, at the first difference. Needs Debian's python3-netcdf4, hence /usr/bin/python3."""
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
            elif "eval_rel_l2" in rec:
                out["eval"] = (rec["eval_rel_l2"],)
    return out


def params(path):
    with netCDF4.Dataset(path) as d:
        return {n: np.asarray(v[:], dtype=np.float64) for n, v in d.variables.items() if n.startswith("params.")}


def excluded(n, excludes):
    """The rows of parameter n left out: None (none), [] (all) or a list of
    row indices."""
    rows = None
    for e in excludes:
        s, _, i = e.partition("[")
        if s in n:
            if not i:
                return []
            rows = (rows or []) + [int(i.rstrip("]"))]
    return rows


def check_run(name, rtol, atol, ref_m, ref_p, last, excludes):
    m = metrics(f"{name}.jsonl")
    worst = 0.0
    for step, a in ref_m.items():
        if step not in m:
            return f"{name}: step {step} missing"
        for what, x, y in zip(("loss", "grad_norm") if step != "eval" else ("eval_rel_l2",), a, m[step]):
            rel = abs(x - y) / max(abs(x), 1e-30)
            worst = max(worst, rel)
            if not rel <= rtol:
                return f"{name}: step {step} {what} {y!r} vs reference {x!r} (relative {rel:.3g})"
    f = f"ck_{name}/step_{last:06d}.nc"
    got = params(f)
    if sorted(got) != sorted(ref_p):
        return f"{f}: holds {sorted(got)}, not the reference's {sorted(ref_p)}"
    for n, y in got.items():
        x = ref_p[n]
        if x.shape != y.shape:
            return f"{f}: {n} has shape {y.shape}, the reference {x.shape}"
        ok = np.isfinite(y) & (np.abs(x - y) <= atol + rtol * np.abs(x))
        rows = excluded(n, excludes)
        if rows == []:
            continue
        if rows:
            ok[rows] = True
        if not ok.all():
            return f"{f}: {n} differs from the reference ({int((~ok).sum())} of {ok.size})"
    print(f"{name}: {len(ref_m)} steps and the evaluation, {len(got)} parameters match (worst {worst:.2g})")
    return None


def main():
    args, ref = sys.argv[1:], "ref"
    if args[:1] == ["--ref"]:
        ref, args = args[1], args[2:]
    rtol, atol, runs = float(args[0]), float(args[1]), args[2:]
    excludes = []
    while runs and runs[0] == "--exclude":
        excludes.append(runs[1])
        runs = runs[2:]
    ref_m = metrics(f"{ref}.jsonl")
    last = max(k for k in ref_m if k != "eval")
    ref_p = params(f"ck_{ref}/step_{last:06d}.nc")
    for name in runs:
        err = check_run(name, rtol, atol, ref_m, ref_p, last, excludes)
        if err:
            print(err)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
