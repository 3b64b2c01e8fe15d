#!/usr/bin/env python3
"""bench/train: the ViT training step of sg-train beside the same ViT and
step in PyTorch (bench/train/vit_torch.py: eager, torch.compile, and eager
under CPU bf16 autocast), one process, 1 and 2 threads, alternating in one
run so the variants see the same load.

  SG_TORCH_PYTHON=/opt/torchref/bin/python bench/train/vit_vs_torch.py \
      [--n 64] [--patch 4] [--width 64] [--heads 4] [--depth 4] [--batch 4] \
      [--steps 20] [--threads 1,2] [--rounds 1] [--variants eager,compile,autocast]

Charged by CPU time (the machine is shared): sg-train's step is the
difference of the CPU time (getrusage of the child) of a run of steps + 5
and one of 5 steps, / steps (initialisation, the warm-up steps and the
evaluation cancel); PyTorch's is the median process CPU time of a step
after 5 warm-up steps. With 2 threads the CPU time includes both threads
(and OpenMP's spin-waits on both sides): per CPU-second is then a
throughput per core. Wall-clock samples/s (medians) are printed too, for a
quiet machine. One JSON line per run and a table."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "build", "bin")


def run_cpu(cmd, env):
    """Run cmd; (its children's CPU seconds, stdout)."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    if status != 0:
        sys.exit(f"vit_vs_torch: {cmd[0]} failed ({status})")
    return ru.ru_utime + ru.ru_stime, out


def ours(a, data, threads, work):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1")
    met = os.path.join(work, "m.jsonl")
    cmd = [os.path.join(BIN, "sg-train"), "--model", "vit", "--data", data, "--width",
           str(a.width), "--heads", str(a.heads), "--depth", str(a.depth), "--patch",
           str(a.patch), "--history", str(a.history), "--batch", str(a.batch),
           "--test-samples", "1", "--log-every", "100000", "--log-level", "warn", "--mesh", "h=1",
           "--metrics", met]
    c_long, _ = run_cpu(cmd + ["--steps", str(a.steps + 5)], env)
    lines = [json.loads(l) for l in open(met)]
    c_short, _ = run_cpu(cmd + ["--steps", "5"], env)
    recs = sorted(r["samples_per_s"] for r in lines if "loss" in r)[5:]
    mem = next(r for r in lines if "peak_mem_mib" in r)
    step_cpu = (c_long - c_short) / a.steps
    return {"impl": "shardgrid", "variant": "f32", "step_cpu_s": step_cpu,
            "samples_per_cpu_s": a.batch / step_cpu, "samples_per_s": recs[len(recs) // 2],
            "peak_mem_mib": mem["peak_mem_mib"]}


def theirs(a, threads, variant):
    py = os.environ.get("SG_TORCH_PYTHON", "/opt/torchref/bin/python")
    cmd = [py, os.path.join(ROOT, "bench", "train", "vit_torch.py"), "--n", str(a.n), "--batch",
           str(a.batch), "--history", str(a.history), "--width", str(a.width), "--heads",
           str(a.heads), "--depth", str(a.depth), "--patch", str(a.patch), "--steps",
           str(a.steps), "--threads", str(threads), "--compile", str(int(variant == "compile")),
           "--autocast", str(int(variant == "autocast"))]
    _, out = run_cpu(cmd, dict(os.environ, OMP_NUM_THREADS=str(threads)))
    r = json.loads(out.strip().splitlines()[-1])
    return {"impl": "pytorch", "variant": variant, "torch": r["torch"],
            "step_cpu_s": r["step_cpu_s"], "samples_per_cpu_s": r["samples_per_cpu_s"],
            "samples_per_s": r["samples_per_s"]}


def main():
    ap = argparse.ArgumentParser()
    for k, v in [("n", 64), ("patch", 4), ("width", 64), ("heads", 4), ("depth", 4),
                 ("batch", 4), ("history", 10), ("steps", 20), ("rounds", 1)]:
        ap.add_argument(f"--{k}", type=int, default=v)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--variants", default="eager,compile,autocast")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="sg-vit-vs-torch.")
    data = os.path.join(work, "ns.nc")
    subprocess.run([os.path.join(BIN, "sg-ns2d"), "--out", data, "--n", str(a.n), "--samples",
                    "6", "--frames", str(a.history + 4), "--dt", "1e-2", "--frame-dt", "0.1",
                    "--mesh", "h=1", "--log-level", "warn"], check=True)
    print(json.dumps({"load_average": open("/proc/loadavg").read().split()[:3], "n": a.n,
                      "patch": a.patch, "width": a.width, "heads": a.heads, "depth": a.depth,
                      "batch": a.batch, "tokens": (a.n // a.patch) ** 2}), flush=True)
    rows = []
    for rnd in range(a.rounds):
        for threads in [int(t) for t in a.threads.split(",")]:
            res = [ours(a, data, threads, work)]
            for v in a.variants.split(","):
                res.append(theirs(a, threads, v))
            for r in res:
                r.update(threads=threads, round=rnd,
                         load=float(open("/proc/loadavg").read().split()[0]))
                print(json.dumps(r), flush=True)
            rows += res
    print("| threads | round | impl | samples / CPU-s | CPU s / step | ours / this | samples/s (wall) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        base = next(x for x in rows if x["impl"] == "shardgrid" and x["threads"] == r["threads"]
                    and x["round"] == r["round"])
        print(f"| {r['threads']} | {r['round']} | {r['impl']} {r['variant']} | "
              f"{r['samples_per_cpu_s']:.1f} | {r['step_cpu_s']:.4f} | "
              f"{base['samples_per_cpu_s'] / r['samples_per_cpu_s']:.2f} | {r['samples_per_s']:.1f} |")
    subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
