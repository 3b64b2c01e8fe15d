#!/usr/bin/python3
"""The climate run's tables for bench/RESULTS.md from an sg-train metrics
file (--metrics) of a run with `rollout = K` on a lat-lon time series: the
latitude-weighted RMSE and ACC per lead of the model, persistence and
climatology (the final evaluation), and the learning curve (the training
loss averaged over every N steps). The plots: tools/plot --metrics FILE.

  bench/climate/table.py out/climate.jsonl [--every 25]"""
import argparse
import json
import sys

SOURCES = (("model", ""), ("persistence", "_persistence"), ("climatology", "_climatology"))


def read(path):
    losses, leads = [], None
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if "loss" in rec:
                losses.append((rec["step"], rec["loss"]))
            if "leads" in rec:
                leads = rec
    if leads is None:
        sys.exit(f"{path}: no per-lead metrics (run with rollout = K on a lat-lon time series)")
    return losses, leads


def lead_table(leads):
    names = sorted(k[5:-6] for k in leads if k.startswith("rmse_") and k.endswith("_leads")
                   and not k.endswith(("_persistence_leads", "_climatology_leads")))
    ks = leads["leads"]
    print(f"step {leads['step']}")
    print("| variable | score | " + " | ".join(f"lead {k}" for k in ks) + " |")
    print("|---|---|" + "---|" * len(ks))
    for v in names:
        for metric in ("rmse", "acc"):
            for name, suffix in SOURCES:
                vals = leads[f"{metric}_{v}{suffix}_leads"]
                print(f"| {v} | {metric.upper()} {name} | " + " | ".join(f"{x:.3f}" for x in vals) + " |")


def curve(losses, every):
    print(f"| step | training loss (mean of the last {every} steps) |")
    print("|---|---|")
    for i in range(every, len(losses) + 1, every):
        chunk = losses[i - every:i]
        print(f"| {chunk[-1][0]} | {sum(l for _, l in chunk) / every:.4f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("metrics")
    ap.add_argument("--every", type=int, default=25, help="learning curve: one row per this many steps")
    a = ap.parse_args()
    losses, leads = read(a.metrics)
    lead_table(leads)
    print()
    curve(losses, a.every)


if __name__ == "__main__":
    main()
