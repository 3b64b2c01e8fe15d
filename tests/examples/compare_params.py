#!/usr/bin/python3
"""Compare the parameters (variables params.*) of two sg-train checkpoints.

usage: compare_params.py REFERENCE OTHER RTOL [ATOL] [--prefix P] [--exclude S] [--scaled-atol]
Every params.* variable of REFERENCE (every variable whose name starts with
P; "" for all; none whose name contains S) must be in OTHER with the same shape and values within RTOL
relative (ATOL absolute, default 1e-7); exits 1 and says where otherwise.
--scaled-atol: ATOL is a fraction of each variable's largest magnitude in
REFERENCE (for the AdamW moments: the first moment is a signed running
mean of the gradient, some of its elements near zero by cancellation with
rounding of the size of the others; ckpt_ring_check.py says more).
NaN never matches. Needs Debian's python3-netcdf4
(tools/install-deps), hence /usr/bin/python3."""
import sys

import netCDF4
import numpy as np


def main():
    args = sys.argv[1:]
    prefix = "params."
    if "--prefix" in args:
        k = args.index("--prefix")
        prefix = args[k + 1]
        del args[k : k + 2]
    exclude = None
    if "--exclude" in args:
        k = args.index("--exclude")
        exclude = args[k + 1]
        del args[k : k + 2]
    scaled = "--scaled-atol" in args
    if scaled:
        args.remove("--scaled-atol")
    ref_path, other_path, rtol = args[0], args[1], float(args[2])
    atol = float(args[3]) if len(args) > 3 else 1e-7
    with netCDF4.Dataset(ref_path) as a, netCDF4.Dataset(other_path) as b:
        names = [n for n in a.variables if n.startswith(prefix) and not (exclude and exclude in n)]
        if not names:
            print(f"no {prefix}* variables in {ref_path}")
            return 1
        worst = 0.0
        for n in names:
            if n not in b.variables:
                print(f"{n} missing in {other_path}")
                return 1
            x, y = np.asarray(a.variables[n][:], dtype=np.float64), np.asarray(b.variables[n][:], dtype=np.float64)
            if x.shape != y.shape:
                print(f"{n}: shape {y.shape} vs reference {x.shape}")
                return 1
            err = np.abs(x - y)
            tol = atol * float(np.abs(x).max()) + 1e-12 if scaled and x.size else atol
            ok = np.isfinite(y) & (err <= tol + rtol * np.abs(x))
            if not ok.all():
                i = np.unravel_index(np.argmin(ok), ok.shape)
                print(f"{n}{list(i)}: {y[i]!r} vs reference {x[i]!r} ({int((~ok).sum())} of {ok.size} differ)")
                return 1
            worst = max(worst, float((err / np.maximum(np.abs(x), tol)).max())) if x.size else worst
    print(f"{other_path}: {len(names)} variables ({prefix or 'any'}*) match {ref_path} (worst relative {worst:.3g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
