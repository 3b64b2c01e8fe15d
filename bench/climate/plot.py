#!/usr/bin/python3
"""The climate run's learning curve and its per-lead scores against the
baselines, from an sg-train metrics file (--metrics) of a run with
`rollout = K` on a latitude-longitude time series.

  bench/climate/plot.py out/climate.jsonl --out out/   # climate_loss.png, climate_leads.png
  bench/climate/plot.py out/climate.jsonl --table      # markdown tables only

The per-lead values are those of the last evaluation that has them (the
final one). Uses Debian's python3-matplotlib (only when plotting)."""
import argparse
import json
import os
import sys

SOURCES = (("model", ""), ("persistence", "_persistence"), ("climatology", "_climatology"))


def read(path):
    losses, evals, leads = [], [], None
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if "loss" in rec:
                losses.append((rec["step"], rec["loss"]))
            if "eval_rel_l2" in rec:
                evals.append((rec["step"], rec["eval_rel_l2"]))
            if "leads" in rec:
                leads = rec
    if leads is None:
        sys.exit(f"{path}: no per-lead metrics (run with rollout = K on a lat-lon time series)")
    return losses, evals, leads


def variables(leads):
    return sorted(k[5:-6] for k in leads if k.startswith("rmse_") and k.endswith("_leads")
                  and "_persistence" not in k and "_climatology" not in k)


def table(leads):
    ks = leads["leads"]
    print(f"step {leads['step']}")
    print("| variable | score | " + " | ".join(f"lead {k}" for k in ks) + " |")
    print("|---|---|" + "---|" * len(ks))
    for v in variables(leads):
        for metric in ("rmse", "acc"):
            for name, suffix in SOURCES:
                vals = leads[f"{metric}_{v}{suffix}_leads"]
                print(f"| {v} | {metric.upper()} {name} | " + " | ".join(f"{x:.3f}" for x in vals) + " |")


def curve(losses, every):
    print("| step | training loss (mean of the last %d steps) |" % every)
    print("|---|---|")
    for i in range(every, len(losses) + 1, every):
        chunk = losses[i - every:i]
        print(f"| {chunk[-1][0]} | {sum(l for _, l in chunk) / every:.4f} |")


def plot(losses, evals, leads, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
    ax.semilogy([s for s, _ in losses], [l for _, l in losses], label="training loss (normalised units)")
    if evals:
        ax.semilogy([s for s, _ in evals], [e for _, e in evals], "o-", label="test relative L2")
    ax.set_xlabel("step")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "climate_loss.png"))
    vs = variables(leads)
    fig, axes = plt.subplots(2, len(vs), figsize=(4.5 * len(vs), 7), dpi=110, squeeze=False)
    for j, v in enumerate(vs):
        for i, metric in enumerate(("rmse", "acc")):
            ax = axes[i][j]
            for name, suffix in SOURCES:
                ax.plot(leads["leads"], leads[f"{metric}_{v}{suffix}_leads"], "o-", label=name)
            ax.set_title(f"{v}: latitude-weighted {metric.upper()}")
            ax.set_xlabel("lead (frames)")
            ax.set_xticks(leads["leads"])
            ax.grid(True, alpha=0.3)
            ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "climate_leads.png"))
    print(f"wrote {out}/climate_loss.png, {out}/climate_leads.png")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("metrics")
    ap.add_argument("--out", default=".")
    ap.add_argument("--table", action="store_true", help="print markdown tables, no plots")
    ap.add_argument("--every", type=int, default=25, help="learning curve: one row per this many steps")
    a = ap.parse_args()
    losses, evals, leads = read(a.metrics)
    if a.table:
        table(leads)
        print()
        curve(losses, a.every)
        return
    plot(losses, evals, leads, a.out)


if __name__ == "__main__":
    main()
