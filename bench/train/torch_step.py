"""The timed training step both PyTorch references of bench/train share:
AdamW (lr 1e-3, weight decay 1e-4) on the relative-L2 loss of random
inputs and targets, median over the steps after warm-up."""
import argparse
import json
import time

import torch


def parse(sizes):
    """Command line: the common keys plus the model's size keys (name, default)."""
    ap = argparse.ArgumentParser()
    for k, v in [("n", 64), ("batch", 8), ("history", 10), ("width", 32)] + sizes + \
                [("steps", 30), ("threads", 1), ("warmup", 5), ("autocast", 0)]:
        ap.add_argument(f"--{k}", type=int, default=v)
    if "compile" not in dict(sizes):  # --compile 1: torch.compile (inductor) the model
        ap.add_argument("--compile", type=int, default=0)
    # --device cuda: model, data and step on the GPU (cuda:0), timed with
    # torch.cuda.synchronize at each step's end
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    return a


def time_steps(model, a, record):
    """Time a.warmup + a.steps steps; print record plus the timings as JSON."""
    dev = torch.device(getattr(a, "device", "cpu"))
    model = model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    x = torch.randn(a.batch, a.history, a.n, a.n).to(dev)
    y = torch.randn(a.batch, 1, a.n, a.n).to(dev)
    if getattr(a, "compile", 0):
        model = torch.compile(model)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    times, cpu = [], []
    for i in range(a.warmup + a.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        # --autocast 1: autocast to bf16 on the device (matmuls/convs in bf16,
        # f32 weights)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bool(a.autocast)):
            p = model(x)
            d = (p.float() - y).reshape(a.batch, -1)
            loss = (d.norm(dim=1) / y.reshape(a.batch, -1).norm(dim=1)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sync()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    times.sort(), cpu.sort()
    med, cmed = times[len(times) // 2], cpu[len(cpu) // 2]
    out = {"impl": "pytorch", "torch": torch.__version__, "device": str(dev),
           "compile": int(getattr(a, "compile", 0)), "threads": a.threads, "n": a.n,
           "batch": a.batch, "width": a.width, "autocast": "bf16" if a.autocast else "off"}
    out.update(record)
    # per CPU-second: the process's CPU time (all threads), the fair rate on a
    # loaded machine
    out.update({"step_s": med, "samples_per_s": a.batch / med, "step_cpu_s": cmed,
                "samples_per_cpu_s": a.batch / cmed})
    print(json.dumps(out))
