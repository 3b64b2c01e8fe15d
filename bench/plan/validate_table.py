#!/usr/bin/env python3
"""The tables of bench/plan/validate.sh from its runs.jsonl.

    bench/plan/validate_table.py RUNS.jsonl

Prints (markdown) every judged run: predicted and measured seconds per
step, their ratio and whether it is within 25%, with the predicted and the
measured split (compute / halo / collectives, and the predicted pipeline
bubble); per model the runs within 25% and the Kendall tau of the
predicted and the measured ranking of its 2-rank meshes (tau-a, and
tau-b with a pair tied on a side whose two times differ by no more than
the larger step-to-step spread of the two runs); the calibration's
shared / single-stream rates per model; then the
oversubscribed meshes (more ranks than cores), reported and not judged.
"""
import itertools
import json
import sys


def tau(a, b):
    """Kendall's tau-a of two equally long lists (ties count 0)."""
    s = n = 0
    for i, j in itertools.combinations(range(len(a)), 2):
        x = (a[i] - a[j]) * (b[i] - b[j])
        s += (x > 0) - (x < 0)
        n += 1
    return s / n if n else float("nan")


def tau_b(a, b, tie):
    """Kendall's tau-b of two equally long lists, where tie(i, j, x) says
    whether x[i] and x[j] are tied (a difference within the noise): pairs
    tied on either side count neither way, and the denominator leaves out
    the pairs tied on each side, sqrt((n0 - n1) (n0 - n2))."""
    s = n0 = n1 = n2 = 0
    for i, j in itertools.combinations(range(len(a)), 2):
        ta, tb = tie(i, j, a), tie(i, j, b)
        n0, n1, n2 = n0 + 1, n1 + ta, n2 + tb
        if not ta and not tb:
            x = (a[i] - a[j]) * (b[i] - b[j])
            s += (x > 0) - (x < 0)
    d = ((n0 - n1) * (n0 - n2)) ** 0.5
    return s / d if d else float("nan")


def split(v):
    return " / ".join(f"{x * 1e3:.1f}" for x in v)


def main():
    recs = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    head = next((r for r in recs if "cores" in r), {})
    end = next((r for r in recs if "load_average_end" in r), {})
    runs = [r for r in recs if "model" in r]
    timing = head.get("timing", "wall")
    print(f"{head.get('cores', '?')} cores; timing: {timing} "
          f"({'CPU s per step and rank, predicted total minus the bubble' if timing == 'cpu' else 'median wall s per step'}); "
          f"rates from {'each model' + chr(39) + 's own first steps' if head.get('calibrated_from') == 'model' else 'the micro-benchmarks'}; "
          f"load average {head.get('load_average_start', '?')} at the start, "
          f"{end.get('load_average_end', '?')} at the end")
    print()
    print("| model | mesh | ranks | predicted s | measured s | ratio | within 25% | "
          "predicted ms: compute / halo / coll. / bubble | measured ms: compute / halo / coll. |")
    print("|---|---|---|---|---|---|---|---|---|")
    judged = [r for r in runs if r.get("verdict") == "judged"]
    for r in judged:
        ratio = r["predicted_s"] / r["measured_s"]
        r["ok"] = abs(ratio - 1) <= 0.25
        print(f"| {r['model']} | {r['mesh']} | {r['ranks']} | {r['predicted_s']:.4f} | "
              f"{r['measured_s']:.4f} | {ratio:.2f} | {'yes' if r['ok'] else 'no'} | "
              f"{split(r['pred_split'])} | {split(r['meas_split'])} |")
    for r in runs:
        if r.get("skipped"):
            print(f"| {r['model']} | {r['mesh']} | | | | | not a mesh of this model (sg-plan's check) | | |")
    print()
    print("| model | runs within 25% | Kendall tau-a, 2-rank meshes | tau-b, ties within the spread | "
          "pairs tied: predicted / measured | meshes ranked |")
    print("|---|---|---|---|---|---|")
    total = ok = 0
    for model in dict.fromkeys(r["model"] for r in judged):
        rs = [r for r in judged if r["model"] == model]
        two = [r for r in rs if r["ranks"] == 2]
        p, m = [r["predicted_s"] for r in two], [r["measured_s"] for r in two]
        t = tau(p, m)

        def tie(i, j, x):
            return abs(x[i] - x[j]) <= max(two[i].get("spread", 0), two[j].get("spread", 0)) * max(x[i], x[j])

        tb = tau_b(p, m, tie)
        pairs = list(itertools.combinations(range(len(two)), 2))
        ties = f"{sum(tie(i, j, p) for i, j in pairs)} / {sum(tie(i, j, m) for i, j in pairs)} of {len(pairs)}"
        n_ok = sum(r["ok"] for r in rs)
        total, ok = total + len(rs), ok + n_ok
        print(f"| {model} | {n_ok} / {len(rs)} | {t:.2f} | {tb:.2f} | {ties} | {len(two)} |")
    print(f"| all | {ok} / {total} | | | | |")
    alone = [r for r in runs if r.get("verdict") == "alone"]
    if alone:
        print()
        print("One rank with half the batch, alone on the node (a dp=2 rank's work; not judged): "
              "if dp=2's measured compute per rank exceeds this one's, the two ranks slow each other")
        print()
        print("| model | mesh | predicted s | measured s | ratio | measured compute ms | "
              "dp=2 measured compute ms | dp=2 / alone |")
        print("|---|---|---|---|---|---|---|---|")
        for r in alone:
            dp = next((d for d in judged if d["model"] == r["model"] and d["mesh"] == "dp=2"), None)
            a, d = r["meas_split"][0], dp["meas_split"][0] if dp else float("nan")
            print(f"| {r['model']} | {r['mesh']} | {r['predicted_s']:.4f} | {r['measured_s']:.4f} | "
                  f"{r['predicted_s'] / r['measured_s']:.2f} | {a * 1e3:.1f} | {d * 1e3:.1f} | {d / a:.2f} |")
    cals = [r for r in recs if "calibration" in r]
    if cals:
        keys = list(dict.fromkeys(k for c in cals for k in c["rates"]))
        print()
        print("Calibration (per model, or one for all): shared / single-stream rate (every "
              f"rank at once against rank 0 alone, {cals[0].get('shared_ranks')} ranks; below 1: "
              "the ranks slow each other), and each rate's spread over the calibration's rounds "
              "(interquartile range / median), single-stream and shared")
        print()
        print("| calibration | " + " | ".join(keys) + " |")
        print("|---|" + "---|" * len(keys))
        for c in cals:
            cells = [f"{c['rates'][k][1] / c['rates'][k][0]:.2f}" if c["rates"].get(k, [0])[0] > 0
                     and c["rates"][k][1] > 0 else "-" for k in keys]
            print(f"| {c['calibration']}: shared / single | " + " | ".join(cells) + " |")
            for i, side in enumerate(("single", "shared")):
                if c.get("spread"):
                    cells = [f"{c['spread'][k][i]:.3f}" if k in c["spread"] else "-" for k in keys]
                    print(f"| {c['calibration']}: spread {side} | " + " | ".join(cells) + " |")
    over = [r for r in runs if r.get("verdict") == "oversubscribed"]
    if over:
        print()
        print("Oversubscribed (more ranks than cores): reported, not judged")
        print()
        print("| model | sg-plan's first mesh | ranks | predicted s | measured s |")
        print("|---|---|---|---|---|")
        for r in over:
            meas = f"{r['measured_s']:.4f}" if "measured_s" in r else "not run"
            print(f"| {r['model']} | {r['mesh']} | {r['ranks']} | {r['predicted_s']:.4f} | {meas} |")


if __name__ == "__main__":
    main()
