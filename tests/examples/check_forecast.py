#!/usr/bin/python3
"""Check sg-forecast's output files (forecast.sh).

usage: check_forecast.py INIT F1 F2 F3 [N1 N3 NAVY]

F1, F2, F3: the same forecast (NS vorticity, 2 members, 6 steps) on three
meshes: every variable the same bits, the same attributes but history.
N1, N3: the navy winds forecast (4 steps from frame 129 of NAVY) on two
meshes, the same bits; its time coordinate continues the file's. Every
file: CF-1.8, dims time [member] lat/y lon/x, coordinates with units and
axes, the variables with the init file's units and long_name and a
_FillValue, provenance (model config, checkpoint and step, source,
history); it opens with xarray when that is installed."""
import sys

import netCDF4
import numpy as np

bad = 0


def check(ok, what):
    global bad
    if not ok:
        bad += 1
        print("MISMATCH:", what)


def same_files(paths):
    ref = netCDF4.Dataset(paths[0])
    for p in paths[1:]:
        with netCDF4.Dataset(p) as f:
            check(set(f.variables) == set(ref.variables), f"{p}: variables")
            for v in ref.variables:
                a, b = ref[v][...], f[v][...]
                check(a.dtype == b.dtype and np.array_equal(np.ma.getdata(a), np.ma.getdata(b)),
                      f"{p}: {v} differs from {paths[0]}")
            for k in ref.ncattrs():
                if k != "history":
                    check(str(f.getncattr(k)) == str(ref.getncattr(k)), f"{p}: attribute {k}")
    ref.close()
    print("identical:", " ".join(paths))


def cf(path, init, var, dims, geo):
    with netCDF4.Dataset(path) as f, netCDF4.Dataset(init) as src:
        check(f.getncattr("Conventions") == "CF-1.8", f"{path}: Conventions")
        for k in ("model_config", "checkpoint", "checkpoint_step", "source", "history",
                  "initial_conditions"):
            check(k in f.ncattrs(), f"{path}: global attribute {k}")
        check("model = " in f.getncattr("model_config"), f"{path}: model_config")
        d = f[var]
        check(d.dimensions == dims, f"{path}: {var} dims {d.dimensions}, expected {dims}")
        s = src[var]
        for a in ("units", "long_name"):
            if a in s.ncattrs():
                check(d.getncattr(a) == s.getncattr(a), f"{path}: {var}.{a}")
        check("_FillValue" in d.ncattrs(), f"{path}: {var}._FillValue")
        t = f["time"]
        check(t.getncattr("axis") == "T" and "units" in t.ncattrs(), f"{path}: time")
        if geo:
            check(f["lat"].units == "degrees_north" and f["lon"].units == "degrees_east",
                  f"{path}: lat/lon units")
        vals = np.ma.getdata(d[...])
        check(np.isfinite(vals).all(), f"{path}: non-finite values")
    try:
        import xarray
    except ImportError:
        return
    with xarray.open_dataset(path) as ds:
        check(var in ds and ds[var].dims == dims, f"{path}: xarray view")
    print("xarray opens", path)


def main():
    init, f1, f2, f3 = sys.argv[1:5]
    same_files([f1, f2, f3])
    cf(f1, init, "vorticity", ("time", "member", "y", "x"), False)
    with netCDF4.Dataset(f1) as f, netCDF4.Dataset(init) as src:
        v = np.ma.getdata(f["vorticity"][...])
        check(v.shape[:2] == (6, 2), f"{f1}: shape {v.shape}")
        check(not np.array_equal(v[:, 0], v[:, 1]), f"{f1}: the perturbed member equals the control")
        # the window's newest frame is 2 of the file's 4: steps 1.. go past its end
        st = src["time"][...]
        want = st[2] + (st[1] - st[0]) * np.arange(1, 7)
        check(np.allclose(f["time"][...], want, rtol=1e-12, atol=0), f"{f1}: times {f['time'][...]}")
    if len(sys.argv) > 5:
        n1, n3, navy = sys.argv[5:8]
        same_files([n1, n3])
        cf(n1, navy, "UWND", ("time", "lat", "lon"), True)
        with netCDF4.Dataset(n1) as f, netCDF4.Dataset(navy) as src:
            t, st = f["time"][...], src["TIME"][...]
            want = st[129] + (st[1] - st[0]) * np.arange(1, 5)
            check(np.allclose(t, want, rtol=0, atol=1e-9), f"{n1}: times {t}, expected {want}")
            check(f["time"].units == src["TIME"].units, f"{n1}: time units")
            check(np.array_equal(f["lat"][...], src["FNOCY"][...]), f"{n1}: latitudes")
    print("FAIL" if bad else "PASS")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
