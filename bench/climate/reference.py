#!/usr/bin/python3
"""Two stronger references than sg-train's baselines for the climate run
(examples/configs/navy_winds_climate.cfg), from the file with numpy, on
the same held-out targets (the last 24 months; lead k: from month
108 + k - 1 on) and the same latitude-weighted RMSE:

- a seasonal climatology: the training years' (frames 0-107) mean per
  calendar month and point (sg-train's climatology is the mean over all
  training targets, with no seasonal cycle);
- lead 1 only: a least-squares fit over the training targets of
  x(t+1) = a x(t) + b mean(x(t-11..t)), the same (a, b) everywhere: what a
  1x1 convolution on the 12-month window could learn.

  /usr/bin/python3 bench/climate/reference.py"""
import netCDF4
import numpy as np

FILE = "/usr/share/ferret-vis/data/monthly_navy_winds.cdf"
TRAIN, T, H = 108, 132, 12


def main():
    d = netCDF4.Dataset(FILE)
    w = np.cos(np.deg2rad(d["FNOCY"][:].astype(float)))
    w = w / w.mean()

    def mse(f, o):
        e = (f - o) ** 2 * w[:, None]
        ok = np.isfinite(e)
        return np.nansum(e) / np.broadcast_to(w[:, None], e.shape)[ok].sum()

    for v in ("UWND", "VWND"):
        x = d[v][:].filled(np.nan).astype(float)
        seas = np.stack([np.nanmean(x[m:TRAIN:12], 0) for m in range(12)])
        leads = [np.sqrt(np.mean([mse(seas[t % 12], x[t]) for t in range(TRAIN + k - 1, T)]))
                 for k in (1, 2, 3)]
        win = lambda t: x[t - H:t].mean(0)  # noqa: E731
        a = np.concatenate([np.stack([x[t - 1].ravel(), win(t).ravel()], 1) for t in range(H, TRAIN)])
        b = np.concatenate([x[t].ravel() for t in range(H, TRAIN)])
        ok = np.isfinite(a).all(1) & np.isfinite(b)
        coef = np.linalg.lstsq(a[ok], b[ok], rcond=None)[0]
        lin = np.sqrt(np.mean([mse(coef[0] * x[t - 1] + coef[1] * win(t), x[t]) for t in range(TRAIN, T)]))
        print(f"{v}: seasonal climatology RMSE at leads 1-3 " + ", ".join(f"{r:.3f}" for r in leads)
              + f"; linear fit {coef[0]:.3f} x(t) + {coef[1]:.3f} window mean, lead-1 RMSE {lin:.3f}")


if __name__ == "__main__":
    main()
