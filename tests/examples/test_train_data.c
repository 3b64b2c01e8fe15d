/* The sg-train dataset loader (examples/sg-train/data.c) on a file whose
 * missing points are NaN while its _FillValue is 1e20 (as real climate
 * files have them), plus one fill value and one Inf: at 1-4 ranks, split
 * over h, over w and both, through PnetCDF and the serial backend, every
 * NaN/Inf/fill cell gets mask 0 and value 0, every other cell mask 1 and a
 * finite value, and the statistics equal the one-process ones over the
 * valid cells. With reject_nonfinite the load fails on every rank with an
 * error naming the file. Space-time examples (out_frames, FNO-3D): the
 * windows of a sample dataset in memory and the frames filled into the
 * inputs and the out_frames target channels. */
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

/* A sample dataset in memory (3 series x 7 frames of 2x2, value 100 s + t
 * at every point): out_frames targets at lead, 2 lead, ... after the
 * history, example-major channels; the windows that fit. Not collective. */
static void check_out_frames(int64_t lead, int64_t nout, int64_t want_per) {
  enum { S = 3, T = 7, P = 4 };
  float data[S * T * P], mask[S * T * P];
  for (int i = 0; i < S * T * P; ++i)
    data[i] = (float)(100 * (i / (T * P)) + i / P % T), mask[i] = 1.0f;
  sg_dataset ds;
  memset(&ds, 0, sizeof ds);
  ds.nvars = 1, ds.nseries = S, ds.nframes = T, ds.ny_g = ds.ny = 2,
  ds.nx_g = ds.nx = 2, ds.data = data, ds.mask = mask;
  sg_data_opts o;
  memset(&o, 0, sizeof o);
  o.history = 2, o.lead = lead, o.out_frames = nout, o.test_samples = 1;
  sg_example *tr = NULL, *te = NULL;
  int64_t ntr = 0, nte = 0;
  SG_CHECK_OK(sg_dataset_examples(&ds, &o, &tr, &ntr, &te, &nte));
  SG_CHECK(ntr == 2 * want_per && nte == want_per,
           "lead %lld out_frames %lld: %lld train / %lld test windows, want "
           "%lld / %lld",
           (long long)lead, (long long)nout, (long long)ntr, (long long)nte,
           (long long)(2 * want_per), (long long)want_per);
  float x[2 * 2 * P], y[2 * 8 * P], m[2 * 8 * P];
  int bad = 0;
  if (ntr >= 2) {
    sg_dataset_fill(&ds, &o, tr + ntr - 2, 2, x, y, m);
    for (int b = 0; b < 2; ++b) {
      const sg_example *e = &tr[ntr - 2 + b];
      const float base = (float)(100 * e->series + e->t0);
      for (int i = 0; i < P; ++i) {
        for (int h = 0; h < 2; ++h) bad += x[(b * 2 + h) * P + i] != base + h;
        for (int k = 0; k < nout; ++k)
          bad += y[(b * nout + k) * P + i] !=
                 base + (float)(o.history - 1 + (k + 1) * lead);
      }
    }
  }
  SG_CHECK(bad == 0, "lead %lld out_frames %lld: %d values filled wrong",
           (long long)lead, (long long)nout, bad);
  free(tr);
  free(te);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  check_out_frames(1, 1, 5); /* one frame: t0 = 0 .. 4 */
  check_out_frames(1, 3, 3); /* frames t0+2 .. t0+4: t0 = 0 .. 2 */
  check_out_frames(1, 5, 1); /* the whole series: one window per sample */
  check_out_frames(2, 2, 2); /* t0+3, t0+5: t0 = 0, 1 */
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
