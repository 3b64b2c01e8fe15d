#!/usr/bin/env python3
"""Predicted vs measured step times of bench/plan/run.sh's runs.

    bench/plan/compare.py RUNS.jsonl HARDWARE [--sim build/bin/bench/sg-plan-sim]

Re-predicts every run of RUNS.jsonl (the measured CPU and wall time per
step and rank) with one hardware file, and prints a markdown table, the
runs within 25%, and per model the Kendall tau of the predicted and the
measured ranking of the 2-rank meshes.
"""
import argparse
import json
import subprocess

from validate_table import tau  # bench/plan/validate_table.py

SIZES = {  # bench/plan/run.sh's models
    "fno": "--width 32 --modes 12 --layers 4 --proj-width 128",
    "cnn": "--width 32 --blocks 4 --kernel 3 --groups 4 --proj-width 128",
    "unet": "--width 16 --levels 3 --groups 4",
    "vit": "--width 64 --heads 4 --depth 4 --patch 4",
}


def predict(sim, hw, model, spec, n=64, batch=8, history=4):
    mesh, _, extra = spec.partition(":")
    args = [sim, "predict", "--hardware", hw, "--ny", str(n), "--nx", str(n), "--vars", "1",
            "--model", model, "--history", str(history), "--batch", str(batch), "--meshes", mesh]
    args += SIZES[model].split() + ([extra] if extra else [])
    return json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs")
    ap.add_argument("hardware")
    ap.add_argument("--sim", default="build/bin/bench/sg-plan-sim")
    a = ap.parse_args()
    runs = [json.loads(l) for l in open(a.runs) if l.startswith('{"model"')]
    runs = [r for r in runs if "mesh" in r]
    print("| model | mesh | measured CPU s/step/rank | predicted (busy) s | ratio | measured wall s | "
          "predicted total s | wall ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for r in runs:
        p = predict(a.sim, a.hardware, r["model"], r["mesh"])
        r["pred_busy"] = p["total_s"] - p["bubble_s"]
        r["pred_total"] = p["total_s"]
        print(f"| {r['model']} | {r['mesh']} | {r['measured_cpu_s']:.4f} | {r['pred_busy']:.4f} | "
              f"{r['pred_busy'] / r['measured_cpu_s']:.2f} | {r['measured_wall_s']:.3f} | "
              f"{r['pred_total']:.4f} | {r['pred_total'] / r['measured_wall_s']:.2f} |")
    print()
    for model in dict.fromkeys(r["model"] for r in runs):
        rs = [r for r in runs if r["model"] == model]
        two = [r for r in rs if not r["mesh"].startswith("h=1")]
        within = sum(abs(r["pred_busy"] / r["measured_cpu_s"] - 1) <= 0.25 for r in rs)
        print(json.dumps({
            "model": model, "runs": len(rs), "within_25pct_cpu": within,
            "kendall_tau_2rank_cpu": round(tau([r["measured_cpu_s"] for r in two],
                                               [r["pred_busy"] for r in two]), 3),
            "kendall_tau_2rank_wall": round(tau([r["measured_wall_s"] for r in two],
                                                [r["pred_total"] for r in two]), 3)}))


if __name__ == "__main__":
    main()
