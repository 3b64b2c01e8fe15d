#!/usr/bin/env python3
"""bench/train: A/B of sg-train's ViT step (the shape of vit_vs_torch.py:
64x64, patch 4, width 64, 4 heads, depth 4, batch 4), alternating rounds.
A: a directory with a baseline sg-train and its libshardgrid.so* (AB_A,
default /tmp/vitsA; LD_LIBRARY_PATH wins over the RUNPATH), B: this tree's
build. Charged by the child's CPU time, (25-step run - 5-step run) / 20.
Prints whether the two runs' losses are the same bits.

  AB_A=/tmp/vitsA bench/train/vit_ab.py [rounds=3] [threads=1]"""
import json, os, subprocess, sys, tempfile
W = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
work = tempfile.mkdtemp(prefix="sg-vit-ab.")
data = os.path.join(work, "ns.nc")
if not os.path.exists(data):
    subprocess.run([W + "/build/bin/sg-ns2d", "--out", data, "--n", "64", "--samples", "6", "--frames", "14",
                    "--dt", "1e-2", "--frame-dt", "0.1", "--mesh", "h=1", "--log-level", "warn"], check=True)
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
threads = sys.argv[2] if len(sys.argv) > 2 else "1"
steps = 20
A = os.environ.get("AB_A", "/tmp/vitsA")
def run(which, n):
    env = dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS="1", OPENBLAS_CORETYPE=os.environ.get(
                   "OPENBLAS_CORETYPE", "Cooperlake" if "avx512f" in open("/proc/cpuinfo").read() else "Haswell"),
               OMP_WAIT_POLICY="passive")
    if which == "A":
        env["LD_LIBRARY_PATH"] = A; exe = A + "/sg-train"
    else:
        exe = W + "/build/bin/sg-train"
    met = os.path.join(work, f"m{which}.jsonl")
    if os.path.exists(met): os.remove(met)
    cmd = [exe, "--model", "vit", "--data", data, "--width", "64", "--heads", "4", "--depth", "4", "--patch", "4",
           "--history", "10", "--batch", "4", "--test-samples", "1", "--log-every", "1", "--log-level", "warn",
           "--mesh", "h=1", "--metrics", met, "--steps", str(n)]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
    _, st, ru = os.wait4(p.pid, 0)
    assert st == 0, which
    losses = [r["loss"] for r in map(json.loads, open(met)) if "loss" in r]
    return ru.ru_utime + ru.ru_stime, losses
res = {"A": [], "B": []}
for r in range(rounds):
    for w in "AB":
        cl, la = run(w, steps + 5); cs, _ = run(w, 5)
        res[w].append((cl - cs) / steps)
        res.setdefault("loss" + w, la)
        print(w, r, f"{(cl - cs) / steps:.4f}", "load", open("/proc/loadavg").read().split()[0], flush=True)
print("losses identical:", res["lossA"] == res["lossB"], res["lossA"][-1], res["lossB"][-1])
import statistics as s
ma, mb = s.median(res["A"]), s.median(res["B"])
print(f"median A {ma:.4f} B {mb:.4f}  A/B {ma / mb:.3f}")
subprocess.run(["rm", "-rf", work])
