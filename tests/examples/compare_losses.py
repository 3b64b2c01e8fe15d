#!/usr/bin/env python3
"""Compare the loss trajectories of two sg-train metrics files (JSON lines).

usage: compare_losses.py REFERENCE OTHER RTOL [--eval | --key NAME]
Every training step of REFERENCE must appear in OTHER with a loss (the
key's value; a list, e.g. rollout_rel_l2, element by element) within RTOL
relative; exits 1 (and says where) otherwise."""
import json
import sys


def losses(path, key):
    out = {}
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if key in rec:
                out[rec["step"]] = rec[key]
    return out


def main():
    ref_path, other_path, rtol = sys.argv[1], sys.argv[2], float(sys.argv[3])
    key = "eval_rel_l2" if "--eval" in sys.argv[4:] else "loss"
    if "--key" in sys.argv[4:]:
        key = sys.argv[sys.argv.index("--key") + 1]
    ref, other = losses(ref_path, key), losses(other_path, key)
    if not ref:
        print(f"no '{key}' records in {ref_path}")
        return 1
    worst = 0.0
    for step, a in sorted(ref.items()):
        if step not in other:
            print(f"step {step} missing in {other_path}")
            return 1
        b = other[step]
        if isinstance(a, list):  # e.g. rollout_rel_l2: one value per frame
            if not isinstance(b, list) or len(a) != len(b):
                print(f"step {step}: {key} {b!r} vs reference {a!r}")
                return 1
            rel = max((abs(x - y) / max(abs(x), 1e-30) for x, y in zip(a, b)), default=0.0)
        else:
            rel = abs(a - b) / max(abs(a), 1e-30)
        worst = max(worst, rel)
        if not rel <= rtol:
            print(f"step {step}: {key} {b!r} vs reference {a!r} (relative {rel:.3g} > {rtol:g})")
            return 1
    print(f"{other_path}: {len(ref)} steps match {ref_path} (worst relative {worst:.3g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
