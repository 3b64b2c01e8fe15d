#!/usr/bin/env python3
"""Check sg-train's baselines against a direct computation from the file.

usage: check_baselines.py METRICS DATA VARS HISTORY LEAD TEST ROLLOUT RTOL

DATA holds var(sample, time, y, x) (TEST: the last TEST samples are held
out) or var(time, y, x) (TEST: the last TEST frames hold the test
targets). Persistence forecasts the last input frame, climatology the
mean of the training targets (the one-step targets of the training
examples) per grid point over the valid values. The relative L2 of each
example, sqrt(sum m (f - t)^2 / sum m t^2) over every variable and point
(m: the target's validity), is averaged over the test examples (one step
ahead) and, with ROLLOUT > 0, over the test samples' rollouts from frame
0 (lead k: the target frame history - 1 + k * lead). A point masked in an
input frame or never valid in training holds the variable's training mean
(the driver's normalised 0). METRICS' eval_*_rel_l2 and
rollout_*_rel_l2 must agree within RTOL relative.

A time series whose y dim has a latitude coordinate is also scored with
the WeatherBench 2 latitude-weighted metrics, per variable, one step
ahead: w = cos(lat) / mean(cos(lat)), RMSE = sqrt(mean over the test
examples of sum w m (f - t)^2 / sum w m), ACC = mean of
sum w m f'o' / sqrt(sum w m f'^2 sum w m o'^2) with f' = f - clim,
o' = t - clim (the climatology's own ACC is 0: it has no anomaly):
METRICS' rmse_VAR_persistence, acc_VAR_persistence, rmse_VAR_climatology
must agree within RTOL (ACC: RTOL absolute); with ROLLOUT > 0 also
rmse_VAR_persistence_leads etc. at leads 1 .. ROLLOUT from every test
init whose target lies in the data."""
import json
import sys

import netCDF4
import numpy as np


def load(path, names):
    """(series, time, var, y, x) values and validity; climate: 1 series."""
    with netCDF4.Dataset(path) as f:
        vals, valid = [], []
        for n in names:
            a = f.variables[n][...]
            m = ~np.ma.getmaskarray(a)
            d = np.ma.getdata(a).astype(np.float64)
            m &= np.isfinite(d)
            vals.append(np.where(m, d, 0.0))
            valid.append(m)
    v, m = np.stack(vals, axis=-3), np.stack(valid, axis=-3)
    climate = v.ndim == 4  # (time, var, y, x)
    if climate:
        v, m = v[None], m[None]
    return v, m, climate


def latitudes(path, name):
    """The latitudes of var name's y dim (its coordinate variable), or None."""
    with netCDF4.Dataset(path) as f:
        dim = f.variables[name].dimensions[-2]
        if dim not in f.variables:
            return None
        return np.asarray(f.variables[dim][...], dtype=np.float64)


def wb2(fc, tests, v, m, clim, w, step):
    """Per variable: latitude-weighted RMSE and ACC of forecast fc over the
    test examples (WeatherBench 2)."""
    mse, acc = [], []
    for s, t0 in tests:
        f, o, mk = fc(s, t0), v[s, t0 + step], m[s, t0 + step]
        W = w[None, :, None] * mk
        fa, oa = np.where(mk, f - clim, 0.0), np.where(mk, o - clim, 0.0)
        d = np.where(mk, f - o, 0.0)
        mse.append((W * d * d).sum(axis=(1, 2)) / W.sum(axis=(1, 2)))
        den = np.sqrt((W * fa * fa).sum(axis=(1, 2)) * (W * oa * oa).sum(axis=(1, 2)))
        acc.append(np.where(den > 0, (W * fa * oa).sum(axis=(1, 2)) / np.where(den > 0, den, 1), 0))
    return np.sqrt(np.mean(mse, axis=0)), np.mean(acc, axis=0)


def rel_l2(f, t, m):
    d = np.where(m, f - t, 0.0)
    return np.sqrt((d * d).sum() / np.where(m, t * t, 0.0).sum())


def main():
    (mpath, dpath, vars_, h, lead, test, nroll, rtol) = sys.argv[1:9]
    h, lead, test, nroll, rtol = int(h), int(lead), int(test), int(nroll), float(rtol)
    v, m, climate = load(dpath, vars_.split(","))
    S, T = v.shape[0], v.shape[1]
    s_train = 1 if climate else S - test
    t_train = T - test if climate else T
    # the training mean per variable: what a masked input point holds
    tv, tm = v[:s_train, :t_train], m[:s_train, :t_train]
    mean = (tv * tm).sum(axis=(0, 1, 3, 4)) / tm.sum(axis=(0, 1, 3, 4))
    filled = np.where(m, v, mean[None, None, :, None, None])
    # climatology: the training targets, frames h - 1 + lead ..
    cv, cm = v[:s_train, h - 1 + lead:t_train], m[:s_train, h - 1 + lead:t_train]
    cnt = cm.sum(axis=(0, 1))
    clim = np.where(cnt > 0, (cv * cm).sum(axis=(0, 1)) / np.maximum(cnt, 1),
                    mean[:, None, None])
    span = h + lead
    tests = [(s, t0) for s in range(S) for t0 in range(T - span + 1)
             if (t0 + span - 1 >= T - test if climate else s >= S - test)]
    want = {}
    for key, fc in (("persistence", lambda s, t0: filled[s, t0 + h - 1]),
                    ("climatology", lambda s, t0: clim)):
        errs = [rel_l2(fc(s, t0), v[s, t0 + h - 1 + lead], m[s, t0 + h - 1 + lead])
                for s, t0 in tests]
        want[f"eval_{key}_rel_l2"] = float(np.mean(errs))
        if nroll > 0 and not climate:
            want[f"rollout_{key}_rel_l2"] = [
                float(np.mean([rel_l2(fc(s, 0), v[s, h - 1 + k * lead], m[s, h - 1 + k * lead])
                               for s in range(S - test, S)]))
                for k in range(1, nroll + 1)]
    lat = latitudes(dpath, vars_.split(",")[0]) if climate else None
    absolute = set()
    if lat is not None:
        w = np.where(np.abs(lat) == 90, 0.0, np.cos(np.deg2rad(lat)))
        w = w / w.mean()
        for key, fc in (("persistence", lambda s, t0: filled[s, t0 + h - 1]),
                        ("climatology", lambda s, t0: clim)):
            rmse, acc = wb2(fc, tests, v, m, clim, w, h - 1 + lead)
            # ROLLOUT > 0: per lead k, over the inits whose target is in the data
            leads = [wb2(fc, [(s, t0) for s, t0 in tests if t0 + h - 1 + k * lead < T],
                         v, m, clim, w, h - 1 + k * lead) for k in range(1, nroll + 1)]
            for i, name in enumerate(vars_.split(",")):
                want[f"rmse_{name}_{key}"] = float(rmse[i])
                want[f"acc_{name}_{key}"] = float(acc[i])
                absolute.add(f"acc_{name}_{key}")
                if nroll > 0:
                    want[f"rmse_{name}_{key}_leads"] = [float(r[0][i]) for r in leads]
                    want[f"acc_{name}_{key}_leads"] = [float(r[1][i]) for r in leads]
                    absolute.add(f"acc_{name}_{key}_leads")
    got = {}
    with open(mpath) as f:
        for line in f:
            got.update({k: val for k, val in json.loads(line).items() if k in want})
    bad = 0
    for k, w in want.items():
        g = got.get(k)
        ws, gs = np.atleast_1d(w), np.atleast_1d(g if g is not None else np.nan)
        scale = 1.0 if k in absolute else np.abs(ws)
        err = np.max(np.abs(gs - ws) / scale) if gs.shape == ws.shape else np.inf
        ok = err <= rtol
        bad += not ok
        print(f"{k}: sg-train {g} direct {w} (relative {err:.3g}){'' if ok else '  MISMATCH'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
