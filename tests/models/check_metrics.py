#!/usr/bin/python3
"""The latitude-weighted RMSE and ACC of sg_dist_metrics against numpy (the
WeatherBench 2 definitions, written here from the paper, not from the C):

  w = cos(lat) / mean(cos(lat))
  RMSE_v = sqrt(mean_t(sum_{lat,lon} w m (f-o)^2 / sum w m))
  ACC_v  = mean_t(sum w m f'o' / sqrt(sum w m f'^2 * sum w m o'^2)),
           f' = f - c, o' = o - c

m masks fill values (left out of every sum). Usage:
check_metrics.py MPIEXEC NPROC TEST_BINARY"""
import os
import subprocess
import sys
import tempfile

import numpy as np

mpiexec, nproc, binary = sys.argv[1:4]
rng = np.random.default_rng(5)
n, nv, ny, nx = 4, 2, 9, 12
lat = np.linspace(-80.0, 80.0, ny)
c = rng.normal(size=(nv, ny, nx))
o = c + rng.normal(size=(n, nv, ny, nx))
f = o + 0.5 * rng.normal(size=(n, nv, ny, nx))
m = (rng.random(size=(n, nv, ny, nx)) > 0.15).astype(np.float64)
f = np.where(m > 0, f, 1e20)  # fill values must not count
o = np.where(m > 0, o, 1e20)

w = np.cos(np.deg2rad(lat))
w = w / w.mean()
W = w[None, None, :, None] * m
fm, om = np.where(m > 0, f, 0.0), np.where(m > 0, o, 0.0)
mse = (W * (fm - om) ** 2).sum(axis=(2, 3)) / W.sum(axis=(2, 3))
fa, oa = (fm - c) * (m > 0), (om - c) * (m > 0)
acc = (W * fa * oa).sum(axis=(2, 3)) / np.sqrt(
    (W * fa**2).sum(axis=(2, 3)) * (W * oa**2).sum(axis=(2, 3)))
rmse_ref, acc_ref = np.sqrt(mse.mean(axis=0)), acc.mean(axis=0)

with tempfile.TemporaryDirectory() as d:
    with open(os.path.join(d, "in.bin"), "wb") as fp:
        np.array([n, nv, ny, nx], dtype=np.int64).tofile(fp)
        for a in (lat, f, o, c, m):
            np.ascontiguousarray(a, dtype=np.float64).tofile(fp)
    subprocess.run([mpiexec, "-n", nproc, binary, "--ref", d], check=True)
    got = np.loadtxt(os.path.join(d, "out.txt")).reshape(nv, 2)

ok = np.allclose(got[:, 0], rmse_ref, rtol=1e-12, atol=0) and np.allclose(
    got[:, 1], acc_ref, rtol=1e-12, atol=1e-14)
print("RMSE", got[:, 0], "numpy", rmse_ref)
print("ACC ", got[:, 1], "numpy", acc_ref)
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
