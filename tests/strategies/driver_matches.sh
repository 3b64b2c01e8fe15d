#!/bin/sh
# examples/parallel-driver (a user's driver on the plan) prints the same
# losses on a mesh as on one process (relative 1e-5).
#   driver_matches.sh DRIVER MPIEXEC N MESH ZERO
set -eu
drv=$1 mpiexec=$2 n=$3 mesh=$4 zero=$5
ref=$("$mpiexec" -n 1 "$drv" h=1 0)
got=$("$mpiexec" -n "$n" "$drv" "$mesh" "$zero")
printf '%s\n' "$got"
printf '%s\n%s\n' "$ref" "$got" | python3 -c '
import sys
lines = [l.split() for l in sys.stdin if l.startswith("step")]
half = len(lines) // 2
ref, got = lines[:half], lines[half:]
assert half > 0 and len(ref) == len(got), "missing steps"
for a, b in zip(ref, got):
    x, y = float(a[3]), float(b[3])
    if abs(x - y) > 1e-5 * abs(x):
        sys.exit("step %s: loss %r vs one process %r" % (a[1], y, x))
print("%d steps match one process" % half)
'
