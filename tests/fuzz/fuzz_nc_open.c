/* libFuzzer target: a NetCDF file as the dataset loader reads it — opened
 * with sg_nc_open on MPI_COMM_SELF (the classic-header length check of
 * io/nc_check.c, then PnetCDF or netCDF-C), the variables a dataset
 * usually has looked up, their packing/fill attributes read, and a small
 * corner of each read as f32 with masking, unpacking, lat flipping and a
 * periodic lon halo (as sg-train's loader does). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_tmpfile.h"
#include "sg_nc.h"

static const char *const names[] = {"vorticity", "sample", "time",  "y",   "x",
                                    "lat",       "lon",    "level", "t2m", "u",
                                    "SST",       "AIRT",   "label"};
static const char *const atts[] = {"_FillValue", "missing_value",
                                   "scale_factor", "add_offset", "valid_min"};

static void read_corner(sg_nc_t f, const sg_nc_var_info *info, int halo) {
  sg_nc_shard sh;
  sg_nc_read_opts ro;
  memset(&sh, 0, sizeof sh);
  memset(&ro, 0, sizeof ro);
  sh.ndims = info->ndims;
  sh.dtype = SG_DTYPE_F32;
  int64_t n = 1;
  for (int d = 0; d < info->ndims; ++d) {
    sh.global_shape[d] = info->shape[d];
    sh.count[d] = info->shape[d] < 3 ? info->shape[d] : 3;
    if (halo && d >= info->ndims - 2) ro.halo_lo[d] = ro.halo_hi[d] = 1;
    n *= sh.count[d] + ro.halo_lo[d] + ro.halo_hi[d];
  }
  ro.periodic_lon = halo;
  ro.flip_lat = halo;
  ro.mask_nonfinite = 1;
  ro.masked_value = -1;
  float *buf = malloc((size_t)(n ? n : 1) * sizeof *buf);
  uint8_t *mask = malloc((size_t)(n ? n : 1));
  if (buf && mask) {
    sg_status st = sg_nc_read(f, info->varid, &sh, &ro, buf, mask);
    if (getenv("SG_FUZZ_VERBOSE"))
      fprintf(stderr, "  read %d (halo %d): %s %s\n", info->varid, halo,
              sg_status_name(st), st == SG_OK ? "" : sg_last_error());
  }
  free(buf);
  free(mask);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1 << 20) return 0;
  const char *path = sg_fuzz_write(data, size);
  if (!path) return 0;
  sg_nc_open_opts oo = sg_nc_open_opts_default();
  oo.dim_map = "COADSX=lon,COADSY=lat,TIME=time"; /* as for the ferret files */
  sg_nc_t f = NULL;
  sg_status st = sg_nc_open(MPI_COMM_SELF, path, &oo, &f);
  if (getenv("SG_FUZZ_VERBOSE"))
    fprintf(stderr, "sg_nc_open: %s %s\n", sg_status_name(st),
            st == SG_OK ? "" : sg_last_error());
  if (st != SG_OK) return 0;
  char text[64];
  double v[4];
  int64_t len = 0;
  (void)sg_nc_get_att_text(f, SG_NC_GLOBAL, "Conventions", text, sizeof text);
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
    sg_nc_var_info info;
    (void)sg_nc_inq_dim(f, names[i], &len);
    if (sg_nc_inq_var(f, names[i], &info) != SG_OK) continue;
    for (size_t a = 0; a < sizeof atts / sizeof atts[0]; ++a)
      (void)sg_nc_get_att_f64(f, info.varid, atts[a], v, 4, &len);
    (void)sg_nc_get_att_text(f, info.varid, "units", text, sizeof text);
    if (info.ndims < 1) continue;
    read_corner(f, &info, 0);
    if (info.ndims >= 2) read_corner(f, &info, 1);
  }
  (void)sg_nc_close(&f);
  return 0;
}
