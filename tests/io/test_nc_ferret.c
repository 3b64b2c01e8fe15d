/* Real data written by others (Debian's ferret-datasets, CDF-1 files with
 * non-CF dim names): slab reads on every (lat, lon) process grid, halos
 * with periodic longitude included, with every backend built, equal a
 * whole-file serial read; _FillValue/missing_value are masked. */
#include "io_test_util.h"
#include "sg_nc.h"
#include "sg_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DATA_DIR "/usr/share/ferret-vis/data"

typedef struct dset {
  const char *file;
  const char *map;
  const char *vars[2];
  int check_masked; /* the first variable has masked points (land) */
} dset;

static const dset sets[] = {
    {"coads_climatology.cdf",
     "COADSX=lon,COADSY=lat,TIME=time",
     {"SST", "UWND"},
     1},
    {"levitus_climatology.cdf",
     "XAXLEVITR=lon,YAXLEVITR=lat,ZAXLEVITR=level",
     {"TEMP", NULL},
     1},
    {"monthly_navy_winds.cdf",
     "FNOCX=lon,FNOCY=lat,TIME=time",
     {"VWND", NULL},
     0},
};

/* The whole variable, raw, read by this rank alone (serial backend). */
static float *whole_read(const char *path, const char *map, const char *var,
                         sg_nc_var_info *info, double *fills, int *nfill) {
  sg_nc_t f = NULL;
  float *all = NULL;
  sg_nc_open_opts oo = sg_nc_open_opts_default();
  oo.backend = SG_NC_BACKEND_SERIAL;
  oo.dim_map = map;
  SG_REQUIRE_OK(sg_nc_open(MPI_COMM_SELF, path, &oo, &f));
  SG_REQUIRE_OK(sg_nc_inq_var(f, var, info));
  int64_t n = 1;
  for (int d = 0; d < info->ndims; ++d) n *= info->shape[d];
  all = malloc((size_t)n * sizeof(float));
  sg_nc_shard s;
  sg_nc_shard_split(info->ndims, info->shape, SG_DTYPE_F32, 0, 1, 0, &s);
  sg_nc_read_opts ro = sg_nc_read_opts_default();
  ro.no_mask = 1;
  SG_CHECK_OK(sg_nc_read(f, info->varid, &s, &ro, all, NULL));
  *nfill = 0;
  int64_t k = 0;
  if (sg_nc_has_att(f, info->varid, "_FillValue") &&
      sg_nc_get_att_f64(f, info->varid, "_FillValue", fills, 1, &k) == SG_OK)
    *nfill += 1;
  if (sg_nc_has_att(f, info->varid, "missing_value") &&
      sg_nc_get_att_f64(f, info->varid, "missing_value", fills + *nfill, 1,
                        &k) == SG_OK)
    *nfill += 1;
done:
  sg_nc_close(&f);
  return all;
}

static void check_var(const dset *ds, const char *var) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", DATA_DIR, ds->file);
  sg_nc_var_info ref;
  double fills[2];
  int nfill = 0;
  float *all = whole_read(path, ds->map, var, &ref, fills, &nfill);
  if (!all) return;
  SG_CHECK(ref.ndims == 3 && strcmp(ref.dim_names[1], "lat") == 0 &&
               strcmp(ref.dim_names[2], "lon") == 0,
           "%s: dims %s %s %s after mapping", var, ref.dim_names[0],
           ref.dim_names[1], ref.dim_names[2]);
  SG_CHECK(nfill > 0, "%s: no fill attributes", var);
  const int64_t *gs = ref.shape;
  int which[3] = {0, 1, 1};
  iot_decomp dcs[IOT_MAX_DECOMP];
  int ndc = iot_all_decomps(3, sg_test_size, which, dcs);
  sg_nc_backend readers[3] = {SG_NC_BACKEND_PNETCDF, SG_NC_BACKEND_NETCDF4,
                              SG_NC_BACKEND_SERIAL};
  const int64_t hy = 2, hx = 3;
  for (int r = 0; r < 3; ++r) {
    if (!sg_nc_backend_available(readers[r], 0)) continue;
    sg_nc_t f = NULL;
    sg_nc_open_opts oo = sg_nc_open_opts_default();
    oo.backend = readers[r];
    oo.dim_map = ds->map;
    SG_CHECK_OK(sg_nc_open(MPI_COMM_WORLD, path, &oo, &f));
    if (!f) continue;
    sg_nc_var_info vi;
    SG_CHECK_OK(sg_nc_inq_var(f, var, &vi));
    for (int k = 0; k < ndc; ++k) {
      sg_nc_shard s;
      iot_shard(&dcs[k], sg_test_rank, gs, SG_DTYPE_F32, &s);
      sg_nc_read_opts ro = sg_nc_read_opts_default();
      ro.halo_lo[1] = ro.halo_hi[1] = hy;
      ro.halo_lo[2] = ro.halo_hi[2] = hx;
      ro.periodic_lon = 1;
      ro.masked_value = -999.0;
      ro.outside_value = 0.0;
      int64_t oz = s.count[0], oy = s.count[1] + 2 * hy,
              ox = s.count[2] + 2 * hx;
      int64_t on = oz * oy * ox;
      float *got = malloc((size_t)(on ? on : 1) * sizeof(float));
      uint8_t *mk = malloc((size_t)(on ? on : 1));
      SG_CHECK_OK(sg_nc_read(f, vi.varid, &s, &ro, got, mk));
      int64_t bad = 0, masked = 0, first = -1;
      for (int64_t z = 0; z < oz; ++z)
        for (int64_t j = 0; j < oy; ++j)
          for (int64_t i = 0; i < ox; ++i) {
            int64_t y = s.start[1] - hy + j;
            int64_t x = ((s.start[2] - hx + i) % gs[2] + gs[2]) % gs[2];
            float want = 0.0f;
            uint8_t wm = 0;
            if (y >= 0 && y < gs[1]) {
              float raw = all[((s.start[0] + z) * gs[1] + y) * gs[2] + x];
              int m = 0;
              for (int q = 0; q < nfill; ++q) m |= (double)raw == fills[q];
              want = m ? -999.0f : raw;
              wm = (uint8_t)!m;
              masked += m;
            }
            int64_t o = (z * oy + j) * ox + i;
            if (memcmp(&got[o], &want, sizeof want) != 0 || mk[o] != wm) {
              if (first < 0) first = o;
              ++bad;
            }
          }
      char sd[32];
      SG_CHECK(bad == 0,
               "%s %s by %s on %s: %lld of %lld differ (first at %lld)",
               ds->file, var, sg_nc_backend_name(readers[r]),
               iot_decomp_str(&dcs[k], sd, sizeof sd), (long long)bad,
               (long long)on, (long long)first);
      if (ds->check_masked && var == ds->vars[0]) {
        int64_t tot = 0;
        MPI_Allreduce(&masked, &tot, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        SG_CHECK(tot > 0, "%s %s: no masked points", ds->file, var);
      }
      free(got);
      free(mk);
    }
    /* one frame of a record variable, through read_frame */
    if (ref.unlimited0 && r == 0) {
      sg_nc_shard s2;
      int64_t gs2[2] = {gs[1], gs[2]};
      sg_nc_shard_split(2, gs2, SG_DTYPE_F64, 1, sg_test_size, sg_test_rank,
                        &s2);
      int64_t n2 = s2.count[0] * s2.count[1], bad = 0;
      double *fr = malloc((size_t)(n2 ? n2 : 1) * sizeof(double));
      sg_nc_read_opts ro = sg_nc_read_opts_default();
      int64_t t = gs[0] / 2;
      SG_CHECK_OK(sg_nc_read_frame(f, vi.varid, t, &s2, &ro, fr, NULL));
      for (int64_t j = 0; j < s2.count[0]; ++j)
        for (int64_t i = 0; i < s2.count[1]; ++i) {
          float raw = all[(t * gs[1] + j) * gs[2] + s2.start[1] + i];
          int m = 0;
          for (int q = 0; q < nfill; ++q) m |= (double)raw == fills[q];
          double g = fr[j * s2.count[1] + i];
          if (m ? !isnan(g) : g != (double)raw) ++bad;
        }
      SG_CHECK(bad == 0, "%s %s frame %lld: %lld differ", ds->file, var,
               (long long)t, (long long)bad);
      free(fr);
    }
    SG_CHECK_OK(sg_nc_close(&f));
  }
  free(all);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  if (access(DATA_DIR "/coads_climatology.cdf", R_OK) != 0) {
    sg_test_skip("ferret-datasets not installed (" DATA_DIR " missing); "
                 "apt-get install ferret-datasets");
    return sg_test_finish();
  }
  if (!sg_nc_backend_available(SG_NC_BACKEND_SERIAL, 0)) {
    sg_test_skip("netCDF-C not built: no whole-file reference read");
    return sg_test_finish();
  }
  for (size_t i = 0; i < sizeof sets / sizeof sets[0]; ++i)
    for (int v = 0; v < 2; ++v)
      if (sets[i].vars[v]) check_var(&sets[i], sets[i].vars[v]);
  return sg_test_finish();
}
