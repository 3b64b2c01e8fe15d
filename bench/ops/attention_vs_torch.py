#!/usr/bin/env python3
"""bench/ops: the fused attention (bench_attention, f32) beside PyTorch's
torch.nn.functional.scaled_dot_product_attention on the CPU, same shapes,
same thread counts, the same FLOP convention (FlashAttention-2's: forward
4 B H N^2 d, backward 2.5x that, causal half of each), side by side in one
run (each case: ours, then torch eager, then torch.compile if asked, so
they see the same machine load).

  SG_TORCH_PYTHON=/opt/torchref/bin/python bench/ops/attention_vs_torch.py \
      [--n 1024,4096] [--threads 1,2] [--causal 0,1] [--reps 3] [--compile 1]
      [--dtype f32|bf16]

--dtype bf16: bench_attention --bf16 (bf16 storage: the forward on AMX
tiles where the CPU has them; SG_ATTN_BF16=widen or =tiles in the
environment picks the widening path or the vdpbf16ps tiles) against SDPA
on bf16 tensors.

Runs itself under SG_TORCH_PYTHON (torch is not a project dependency).
OPENBLAS_CORETYPE is exported unless set: Cooperlake where the CPU has
AVX-512F, else Haswell (Zen on AMD) (Debian's OpenBLAS 0.3.21 picks its
SSE3 kernels on a CPU it does not know; Cooperlake's kernels fault with
SIGILL on a CPU without AVX-512; the f32 attention tiles do not use the
BLAS on AVX-512 or AVX2, so mostly bench_attention's SGEMM reference line
is affected).
SG_BENCH_CLOCK=cpu: both sides timed by process CPU time (with t threads
the times add: the rates are then per CPU-second, the fair number on a
shared machine); default wall time. --base-lib DIR: also bench_attention
on DIR's libshardgrid.so.0 (another build, e.g. main's), first in each
case (before/after in the same run). Prints one JSON line per case and
implementation (with the 1-minute load average after the case), then a
table with the ratio ours / each other implementation."""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def reexec_under_torch():
    py = os.environ.get("SG_TORCH_PYTHON", "/opt/torchref/bin/python")
    try:
        import torch  # noqa: F401
    except ImportError:
        if os.environ.get("SG_REEXEC"):
            sys.exit("attention_vs_torch: no torch in " + py)
        os.environ["SG_REEXEC"] = "1"
        os.execv(py, [py] + sys.argv)


def openblas_coretype():
    """Cooperlake on an AVX-512 CPU, else Zen (AMD) or Haswell."""
    try:
        info = open("/proc/cpuinfo").read()
    except OSError:
        return "Haswell"
    flags = next((l.split(":", 1)[1].split() for l in info.splitlines()
                  if l.startswith("flags")), [])
    if "avx512f" in flags:
        return "Cooperlake"
    return "Zen" if "AuthenticAMD" in info else "Haswell"


def clock():
    cpu = os.environ.get("SG_BENCH_CLOCK", "").startswith("c")
    return time.process_time if cpu else time.perf_counter


def ours(a, n, causal, threads, lib=None):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    if lib:  # another build of libshardgrid (--base-lib): before/after in one run
        env["LD_LIBRARY_PATH"] = lib + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    cmd = [a.bin, "--reps", str(a.reps), "--n", str(n), "--batch", str(a.batch), "--heads",
           str(a.heads), "--dim", str(a.dim), "--no-naive"] + (["--causal"] if causal else []) + \
        (["--bf16"] if a.dtype == "bf16" else [])
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return {"fwd_ms": r["fwd_ms"], "bwd_ms": r["bwd_ms"], "fwd_gflops": r["fwd_gflops"],
            "bwd_gflops": r["bwd_gflops"], "sgemm_gflops": r["sgemm_gflops"]}


def torch_case(a, n, causal, threads, compiled):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    shape = (a.batch, a.heads, n, a.dim)
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    q, k, v = ((torch.rand(shape) - 0.5).to(dt) for _ in range(3))
    q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True)
    g = (torch.rand(shape) - 0.5).to(dt)

    def attn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))

    fn = torch.compile(attn) if compiled else attn
    tick = clock()
    tf, tb = [], []
    t_start = time.perf_counter()
    for r in range(-1, a.reps):  # r = -1: warm-up (and compilation)
        t0 = tick()
        o = fn(q, k, v)
        t1 = tick()
        o.backward(g)
        t2 = tick()
        q.grad = k.grad = v.grad = None
        if r == -1:
            warm_s = time.perf_counter() - t_start
        else:
            tf.append(t1 - t0), tb.append(t2 - t1)
    med = lambda x: sorted(x)[len(x) // 2]
    ffwd = (0.5 if causal else 1.0) * 4.0 * a.batch * a.heads * n * n * a.dim
    f, b = med(tf), med(tb)
    return {"fwd_ms": 1e3 * f, "bwd_ms": 1e3 * b, "fwd_gflops": ffwd / f / 1e9,
            "bwd_gflops": 2.5 * ffwd / b / 1e9, "first_call_s": warm_s}


def main():
    reexec_under_torch()
    import torch
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", default="1024,4096")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--compile", type=int, default=0)
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/bin/bench/bench_attention"))
    ap.add_argument("--base-lib", default="",
                    help="a folder with another libshardgrid.so.0 (e.g. main's): run first per case")
    a = ap.parse_args()
    os.environ.setdefault("OPENBLAS_CORETYPE", openblas_coretype())
    ints = lambda s: [int(x) for x in s.split(",")]
    clk = "cpu" if os.environ.get("SG_BENCH_CLOCK", "").startswith("c") else "wall"
    print(json.dumps({"torch": torch.__version__, "clock": clk,
                      "openblas_coretype": os.environ["OPENBLAS_CORETYPE"],
                      "load_average": open("/proc/loadavg").read().split()[:3]}))
    rows = []
    for threads in ints(a.threads):
        for causal in ints(a.causal):
            for n in ints(a.n):
                case = {"batch": a.batch, "heads": a.heads, "tokens": n, "head_dim": a.dim,
                        "causal": causal, "threads": threads, "dtype": a.dtype, "clock": clk}
                if a.dtype == "bf16":  # which bf16 forward: default (AMX where present), widen, tiles
                    case["sg_attn_bf16"] = os.environ.get("SG_ATTN_BF16", "default")
                res = {}
                if a.base_lib:
                    res["shardgrid_base"] = ours(a, n, causal, threads, a.base_lib)
                res["shardgrid"] = ours(a, n, causal, threads)
                res["torch_eager"] = torch_case(a, n, causal, threads, False)
                if a.compile:
                    res["torch_compile"] = torch_case(a, n, causal, threads, True)
                load = os.getloadavg()[0]  # 1-minute load after the case
                for impl, r in res.items():
                    print(json.dumps(dict(case, impl=impl, load_after=load, **r)), flush=True)
                rows.append((case, res))
    impls = [k for k in rows[0][1] if k != "shardgrid"]
    head = "| N | causal | threads | ours fwd / bwd GF/s | " + " | ".join(
        f"{i} fwd / bwd GF/s | ours / {i} fwd, bwd" for i in impls) + " |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for case, res in rows:
        s = res["shardgrid"]
        cells = [f"{case['tokens']} | {case['causal']} | {case['threads']}",
                 f"{s['fwd_gflops']:.1f} / {s['bwd_gflops']:.1f}"]
        for i in impls:
            t = res[i]
            cells.append(f"{t['fwd_gflops']:.1f} / {t['bwd_gflops']:.1f}")
            cells.append(f"{s['fwd_gflops'] / t['fwd_gflops']:.2f}, "
                         f"{s['bwd_gflops'] / t['bwd_gflops']:.2f}")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
