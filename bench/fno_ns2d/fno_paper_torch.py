#!/opt/torchref/bin/python
"""The PyTorch reference of bench/fno_ns2d/budget.sh: FNO-2D trained with
the FNO paper's recipe (Li et al. 2021, fourier_2d_time.py), stopped at a
budget, scored on the test rollout. For the benchmark only; the project
never uses it.

Model: bench/train/fno_torch.py's FNO-2D, the same architecture as
models/fno.c: lifting (1x1, history + 2 grid channels -> width; the grid
is (x, y) = (i/n, j/n) as sg-train's, the paper uses linspace(0, 1, n)),
`layers` spectral layers (rfft2, modes [:m] and [-m:] in y, [:m] in x,
plus a 1x1 linear skip; GELU between layers, none after the last), no
padding (periodic data), projection width -> 128 -> 1 with GELU.

Recipe (the paper's, each a flag): --rollout K autoregressive steps per
training example, each prediction fed back as the newest input frame,
backpropagation through all K; loss = sum over the K steps of the
per-sample relative L2 summed over the batch (the paper's LpLoss with
size_average=False; --loss-reduce mean takes the mean over steps and
samples, as sg-train does); Adam lr 1e-3 with L2 weight decay 1e-4 (the
paper's Adam; --optim adamw: decoupled, as sg-train); StepLR x0.5 every
--step-epochs 100 of --epochs 500; batch 20, shuffled each epoch, last
partial batch dropped.

Data: --data FILE.npy, float32 (samples, frames, ny, nx) (convert an
sg-ns2d NetCDF with budget.sh or: /usr/bin/python3 -c "import netCDF4,
numpy; numpy.save('ns.npy', netCDF4.Dataset('ns.nc')['vorticity'][:])").
The last --test samples are held out (as sg-train's test_samples). A
training example is frames t .. t + history + K - 1 of a training sample
(every t: as sg-train's sliding windows; with frames = history + K one
per sample, the paper's setup).

Budget: --budget-s S stops at the first step boundary after S seconds of
the training loop (--clock cpu: time.process_time, the CPU time of all
of the process's threads, the default; wall: time.perf_counter); setup
and the final evaluation are not counted. --epochs caps the run as well.

Evaluation: from frames 0 .. history-1 of each test sample, --rollout-eval
R frames (default: the training K) rolled out; prints one JSON line with
test_rel_l2_frames (per frame: the per-sample relative L2 at that frame,
mean over samples, as sg-train's rollout_rel_l2), test_rel_l2_mean (their
mean over frames), test_rel_l2_paper (the paper's: per-sample relative
L2 over all R frames at once, mean over samples), the steps and epochs
done, the last epoch's mean training loss, wall and CPU seconds, the
peak RSS, torch version and threads."""
import argparse
import json
import os
import resource
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
import fno_torch  # noqa: E402  (the shared FNO-2D module)


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    for k, v in [("test", 200), ("history", 10), ("rollout", 40), ("rollout-eval", 0),
                 ("width", 20), ("modes", 12), ("layers", 4), ("batch", 20),
                 ("epochs", 500), ("step-epochs", 100), ("seed", 0), ("threads", 2)]:
        ap.add_argument(f"--{k}", type=int, default=v)
    for k, v in [("lr", 1e-3), ("weight-decay", 1e-4), ("gamma", 0.5), ("budget-s", 0.0)]:
        ap.add_argument(f"--{k}", type=float, default=v)
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    ap.add_argument("--optim", choices=["adam", "adamw"], default="adam")
    ap.add_argument("--loss-reduce", choices=["sum", "mean"], default="sum")
    return ap.parse_args()


def rel_l2(p, y):
    """Per-sample relative L2 of (b, ...) tensors."""
    b = p.shape[0]
    return (p - y).reshape(b, -1).norm(dim=1) / y.reshape(b, -1).norm(dim=1)


def rollout(model, x, k):
    """k autoregressive steps from windows x (b, history, ny, nx): the
    predictions (b, k, ny, nx), each fed back as the newest frame."""
    preds = []
    for _ in range(k):
        p = model(x)
        preds.append(p)
        x = torch.cat([x[:, 1:], p], 1)
    return torch.cat(preds, 1)


def examples(train, h, k):
    """(sample, t0) of every training window of h + k frames."""
    s, t = train.shape[0], train.shape[1]
    return [(i, t0) for i in range(s) for t0 in range(t - h - k + 1)]


def evaluate(model, test, h, r):
    with torch.no_grad():
        x, y = test[:, :h], test[:, h:h + r]
        p = rollout(model, x, r)
        per_frame = torch.stack([rel_l2(p[:, j], y[:, j]) for j in range(r)], 1)  # (s, r)
        return per_frame.mean(0).tolist(), rel_l2(p, y).mean().item()


def main():
    a = parse()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    data = torch.from_numpy(np.load(a.data).astype(np.float32))
    h, k = a.history, a.rollout
    r = a.rollout_eval or k
    train, test = data[:-a.test], data[-a.test:]
    ex = examples(train, h, k)
    spe = len(ex) // a.batch
    if spe < 1 or h + r > data.shape[1]:
        sys.exit(f"fno_paper_torch: {len(ex)} training windows for batch {a.batch}, "
                 f"{data.shape[1]} frames for history {h} + rollout {r}")
    model = fno_torch.FNO(h, a.width, a.modes, a.layers)
    opt_cls = torch.optim.Adam if a.optim == "adam" else torch.optim.AdamW
    opt = opt_cls(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=a.step_epochs, gamma=a.gamma)
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    gen = torch.Generator().manual_seed(a.seed)
    w0, c0 = time.perf_counter(), time.process_time()
    b0 = clock()
    steps = epochs = 0
    last_loss, stopped = None, False
    for epoch in range(a.epochs):
        perm = torch.randperm(len(ex), generator=gen).tolist()
        tot = 0.0
        for s in range(spe):
            idx = [ex[i] for i in perm[s * a.batch:(s + 1) * a.batch]]
            win = torch.stack([train[i, t0:t0 + h + k] for i, t0 in idx])
            p = rollout(model, win[:, :h], k)
            y = win[:, h:]
            loss = torch.stack([rel_l2(p[:, j], y[:, j]) for j in range(k)], 1)  # (b, k)
            loss = loss.sum() if a.loss_reduce == "sum" else loss.mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
            # the per-step mean relative L2, comparable with sg-train's loss
            tot += loss.item() / (a.batch * k if a.loss_reduce == "sum" else 1)
            if a.budget_s > 0 and clock() - b0 >= a.budget_s:
                stopped = True
                break
        last_loss = tot / (s + 1)
        epochs += 1
        sched.step()
        if stopped:
            break
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    frames, paper = evaluate(model, test, h, r)
    print(json.dumps({
        "impl": "pytorch", "seed": a.seed, "budget_s": a.budget_s, "clock": a.clock,
        "stopped_by_budget": stopped, "steps": steps, "epochs": round(steps / spe, 3), "steps_per_epoch": spe,
        "train_windows": len(ex), "test_samples": int(test.shape[0]), "n": int(data.shape[-1]),
        "history": h, "rollout_train": k, "rollout_eval": r, "width": a.width, "modes": a.modes,
        "layers": a.layers, "batch": a.batch, "optim": a.optim, "loss_reduce": a.loss_reduce,
        "lr_last": opt.param_groups[0]["lr"], "train_loss": last_loss,
        "test_rel_l2_mean": sum(frames) / len(frames), "test_rel_l2_paper": paper,
        "test_rel_l2_last": frames[-1], "test_rel_l2_frames": frames,
        "train_wall_s": wall, "train_cpu_s": cpu,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "torch": torch.__version__,
        "threads": a.threads}))


if __name__ == "__main__":
    main()
