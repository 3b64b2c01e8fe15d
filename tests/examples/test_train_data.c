/* The sg-train dataset loader (examples/sg-train/data.c) on a file whose
 * missing points are NaN while its _FillValue is 1e20 (as real climate
 * files have them), plus one fill value and one Inf: at 1-4 ranks, split
 * over h, over w and both, through PnetCDF and the serial backend, every
 * NaN/Inf/fill cell gets mask 0 and value 0, every other cell mask 1 and a
 * finite value, and the statistics equal the one-process ones over the
 * valid cells. With reject_nonfinite the load fails on every rank with an
 * error naming the file. */
#include "sg_comm.h"
#include "sg_mesh.h"
#include "sg_nc.h"
#include "sg_test.h"
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { NT = 5, NY = 6, NX = 8 };

static int is_nan_cell(int64_t y, int64_t x) { return (y * NX + x) % 7 == 3; }
static int is_fill_cell(int64_t t, int64_t y, int64_t x) {
  return t == 1 && y == 2 && x == 5;
}
static int is_inf_cell(int64_t t, int64_t y, int64_t x) {
  return t == 3 && y == 4 && x == 1;
}
static int missing(int64_t t, int64_t y, int64_t x) {
  return is_nan_cell(y, x) || is_fill_cell(t, y, x) || is_inf_cell(t, y, x);
}
static float value(int64_t t, int64_t y, int64_t x) {
  if (is_nan_cell(y, x)) return NAN;
  if (is_fill_cell(t, y, x)) return 1e20f;
  if (is_inf_cell(t, y, x)) return INFINITY;
  return 280.0f + (float)t + 0.5f * (float)y + 0.25f * (float)x;
}

static void write_file(const char *path) {
  sg_nc_t f = NULL;
  sg_nc_create_opts co = sg_nc_create_opts_default();
  co.overwrite = 1;
  int v = -1;
  float *buf = malloc(sizeof(float) * NT * NY * NX);
  SG_REQUIRE_OK(sg_nc_create(MPI_COMM_WORLD, path, &co, &f));
  SG_REQUIRE_OK(sg_nc_def_dim(f, "time", NT, NULL));
  SG_REQUIRE_OK(sg_nc_def_dim(f, "lat", NY, NULL));
  SG_REQUIRE_OK(sg_nc_def_dim(f, "lon", NX, NULL));
  const char *d[3] = {"time", "lat", "lon"};
  SG_REQUIRE_OK(sg_nc_def_var(f, "tas", SG_DTYPE_F32, 3, d, NULL, &v));
  sg_nc_cf cf = {"K", "near-surface air temperature", NULL, 1, 1e20};
  SG_REQUIRE_OK(sg_nc_put_cf(f, v, &cf));
  SG_REQUIRE_OK(sg_nc_enddef(f));
  int64_t g[3] = {NT, NY, NX};
  sg_nc_shard s;
  SG_REQUIRE_OK(sg_nc_shard_split(3, g, SG_DTYPE_F32, 0, 1, 0, &s));
  for (int64_t t = 0; t < NT; ++t)
    for (int64_t y = 0; y < NY; ++y)
      for (int64_t x = 0; x < NX; ++x)
        buf[(t * NY + y) * NX + x] = value(t, y, x);
  if (sg_test_rank != 0) s.count[0] = 0;
  SG_CHECK_OK(sg_nc_write(f, v, &s, buf));
done:
  SG_CHECK_OK(sg_nc_close(&f));
  free(buf);
}

static void balanced(int64_t n, int parts, int i, int64_t *a, int64_t *c) {
  int64_t q = n / parts, r = n % parts;
  *a = i * q + (i < r ? i : r);
  *c = q + (i < r ? 1 : 0);
}

static void check_layout(const char *path, int ph, int pw, const char *backend,
                         double ref_mean, double ref_std) {
  char spec[64];
  snprintf(spec, sizeof spec, "h=%d,w=%d", ph, pw);
  sg_mesh_t mesh = NULL;
  sg_group_t dom = NULL;
  sg_dataset ds;
  memset(&ds, 0, sizeof ds);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(sg_mesh_group_named(mesh, "h,w", &dom));
  int64_t y0, ny, x0, nx;
  balanced(NY, ph, sg_mesh_coord(mesh, sg_mesh_find_dim(mesh, "h")), &y0, &ny);
  balanced(NX, pw, sg_mesh_coord(mesh, sg_mesh_find_dim(mesh, "w")), &x0, &nx);
  sg_data_opts o;
  memset(&o, 0, sizeof o);
  o.path = path;
  o.vars = "tas";
  o.backend = backend;
  o.history = 1;
  o.lead = 1;
  o.test_frames = 1;
  o.split_h = o.split_w = -1;
  sg_status st = sg_dataset_load(&o, y0, ny, x0, nx, dom, &ds);
  SG_CHECK(st == SG_OK, "%s, %s: load: %s", spec, backend, sg_last_error());
  if (st == SG_OK) {
    int64_t bad_mask = 0, bad_val = 0;
    for (int64_t t = 0; t < NT; ++t)
      for (int64_t y = 0; y < ny; ++y)
        for (int64_t x = 0; x < nx; ++x) {
          int64_t i = (t * ny + y) * nx +
                      x; /* (series 1, frame, var 1, y, x) */
          int miss = missing(t, y0 + y, x0 + x);
          bad_mask += ds.mask[i] != (miss ? 0.0f : 1.0f);
          bad_val += !isfinite(ds.data[i]) || (miss && ds.data[i] != 0.0f);
        }
    SG_CHECK(bad_mask == 0 && bad_val == 0,
             "%s, %s: %lld wrong masks, %lld bad values", spec, backend,
             (long long)bad_mask, (long long)bad_val);
    SG_CHECK(ds.has_mask, "%s, %s: has_mask is 0", spec, backend);
    SG_CHECK(fabs(ds.mean[0] - ref_mean) <= 1e-9 * fabs(ref_mean) &&
                 fabs(ds.std[0] - ref_std) <= 1e-9 * ref_std,
             "%s, %s: mean %.17g std %.17g, one process: %.17g %.17g", spec,
             backend, ds.mean[0], ds.std[0], ref_mean, ref_std);
  }
  sg_dataset_free(&ds);
  /* rejecting them instead: an error naming the file, on every rank */
  o.reject_nonfinite = 1;
  st = sg_dataset_load(&o, y0, ny, x0, nx, dom, &ds);
  SG_CHECK(st == SG_ERR_CORRUPT && strstr(sg_last_error(), path) &&
               strstr(sg_last_error(), "NaN"),
           "%s, %s, reject_nonfinite: %s: %s", spec, backend,
           sg_status_name(st), sg_last_error());
  sg_dataset_free(&ds);
done:
  sg_mesh_destroy(&mesh);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  char path[64];
  snprintf(path, sizeof path, "train_nan_np%d.nc", sg_test_size);
  write_file(path);
  /* one-process statistics over the valid cells of the training frames */
  double s = 0, n = 0, m2 = 0;
  for (int64_t t = 0; t < NT - 1; ++t)
    for (int64_t y = 0; y < NY; ++y)
      for (int64_t x = 0; x < NX; ++x)
        if (!missing(t, y, x)) s += value(t, y, x), n += 1;
  double mean = s / n;
  for (int64_t t = 0; t < NT - 1; ++t)
    for (int64_t y = 0; y < NY; ++y)
      for (int64_t x = 0; x < NX; ++x)
        if (!missing(t, y, x))
          m2 += (value(t, y, x) - mean) * (value(t, y, x) - mean);
  double sd = sqrt(m2 / n);
  const char *backends[2] = {"auto", "serial"};
  for (int b = 0; b < 2; ++b)
    for (int ph = 1; ph <= sg_test_size; ++ph) {
      if (sg_test_size % ph) continue;
      check_layout(path, ph, sg_test_size / ph, backends[b], mean, sd);
    }
  return sg_test_finish();
}
