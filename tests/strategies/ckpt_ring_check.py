#!/usr/bin/python3
"""Check a ring of resumed sg-train runs against the uninterrupted run, in
one Python process (ckpt_ring.sh).

usage: ckpt_ring_check.py REF_JSONL RING_JSONL REF_CKPT RING_CKPT [--exclude S]
Every training step of REF_JSONL appears exactly once in RING_JSONL (the
segments' metrics, concatenated) with its loss, grad_norm and lr within
1e-5 relative, and the final test evaluation too; RING_CKPT holds the same
variables as REF_CKPT (none whose name contains S), the parameters
(params.*) within 1e-5 relative or 1e-6 absolute, the AdamW moments
(adam_*) within 1e-4 relative or 1e-6 of the variable's largest magnitude
(absolute). Exits 1, saying where, at the first difference.

The moments' absolute floor follows the variable's scale: the first
moment is a signed running mean of the gradient, so some of its elements
sit near zero (cancellation) while their f32 sums carry rounding of the
size of the gradient's other elements; a mesh that rounds differently (a
w=3 segment's patch embedding on im2col rather than the direct kernel,
before 909885d) moved adam_m.unpatch.w[50] = 4.7e-6 by 1.5e-9, 1e-7 of the
variable's largest element 0.071, past a fixed floor of 1e-9. A moment
not carried over, or off by a step, is off by its own size and still
fails. Needs Debian's python3-netcdf4, hence /usr/bin/python3."""
import json
import sys

import netCDF4
import numpy as np


def records(path):
    steps, ev = {}, None
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if "loss" in rec:
                if rec["step"] in steps:
                    raise SystemExit(f"{path}: step {rec['step']} ran twice")
                steps[rec["step"]] = rec
            elif "eval_rel_l2" in rec:
                ev = rec["eval_rel_l2"]
    return steps, ev


def rel(a, b):
    return abs(a - b) / max(abs(a), 1e-30)


def check_metrics(ref_path, ring_path):
    ref, ref_ev = records(ref_path)
    ring, ring_ev = records(ring_path)
    if sorted(ref) != sorted(ring):
        return f"{ring_path}: steps {sorted(ring)}, the reference {sorted(ref)}"
    worst = 0.0
    for step, a in sorted(ref.items()):
        for key in ("loss", "grad_norm", "lr"):
            r = rel(a[key], ring[step][key])
            worst = max(worst, r)
            if not r <= 1e-5:
                return f"step {step}: {key} {ring[step][key]!r} vs reference {a[key]!r} (relative {r:.3g})"
    if ref_ev is None or ring_ev is None or not rel(ref_ev, ring_ev) <= 1e-5:
        return f"final test evaluation {ring_ev!r} vs reference {ref_ev!r}"
    print(f"{ring_path}: {len(ref)} steps (loss, grad_norm, lr) and the evaluation match (worst {worst:.2g})")
    return None


def check_ckpt(ref_path, ring_path, exclude):
    with netCDF4.Dataset(ref_path) as a, netCDF4.Dataset(ring_path) as b:
        names = sorted(n for n in a.variables if not (exclude and exclude in n))
        got = sorted(n for n in b.variables if not (exclude and exclude in n))
        if names != got:
            return f"{ring_path} holds {got}, the reference {names}"
        for n in names:
            x = np.asarray(a.variables[n][:], dtype=np.float64)
            y = np.asarray(b.variables[n][:], dtype=np.float64)
            if x.shape != y.shape:
                return f"{ring_path}: {n} has shape {y.shape}, the reference {x.shape}"
            scale = float(np.abs(x).max()) if x.size else 0.0
            rtol, atol = (1e-5, 1e-6) if n.startswith("params.") else (1e-4, max(1e-6 * scale, 1e-12))
            ok = np.isfinite(y) & (np.abs(x - y) <= atol + rtol * np.abs(x))
            if not ok.all():
                return f"{ring_path}: {n} differs from the reference ({int((~ok).sum())} of {ok.size})"
    print(f"{ring_path}: {len(names)} variables (parameters and moments) match {ref_path}")
    return None


def main():
    args = sys.argv[1:]
    exclude = None
    if "--exclude" in args:
        k = args.index("--exclude")
        exclude = args[k + 1]
        del args[k : k + 2]
    err = check_metrics(args[0], args[1]) or check_ckpt(args[2], args[3], exclude)
    if err:
        print(err)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
