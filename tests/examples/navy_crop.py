#!/usr/bin/python3
"""A latitude band of monthly_navy_winds.cdf as a NetCDF file of its own
(Debian's python3-netcdf4, hence /usr/bin/python3).

The grid is 73 x 144 (2.5 degrees, both poles included): 73 is prime, so no
ViT patch > 1 divides it (patches are not padded) and no Swin window does.
Dropping the north-pole row gives 72 x 144 (every variable, attribute and
coordinate copied as it is), which patches 2, 3, 4, 6, 8 divide.
  navy_crop.py IN OUT ROWS   (the first ROWS latitude rows, from the south)
"""
import sys

import netCDF4


def main():
    src, dst, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with netCDF4.Dataset(src) as i, netCDF4.Dataset(dst, "w", format=i.data_model) as o:
        o.setncatts({k: i.getncattr(k) for k in i.ncattrs()})
        for name, d in i.dimensions.items():
            n = rows if name == "FNOCY" else len(d)
            o.createDimension(name, None if d.isunlimited() else n)
        i.set_auto_maskandscale(False)  # the raw values, fill values included
        for name, v in i.variables.items():
            fill = v.getncattr("_FillValue") if "_FillValue" in v.ncattrs() else None
            w = o.createVariable(name, v.dtype, v.dimensions, fill_value=fill)
            w.setncatts({k: v.getncattr(k) for k in v.ncattrs() if k != "_FillValue"})
            sl = tuple(slice(0, rows) if d == "FNOCY" else slice(None) for d in v.dimensions)
            w[...] = v[sl]


if __name__ == "__main__":
    main()
