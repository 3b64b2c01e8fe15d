/* sg-forecast — the initial conditions: the history window read sharded
 * from the init file, normalised as in training, perturbed per member. */
#include "forecast.h"

#include "sg_comm.h"
#include "sg_rng.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

void fc_dim_file_name(const char *dim_map, const char *name, char *buf,
                      size_t size) {
  snprintf(buf, size, "%s", name);
  for (const char *p = dim_map; p && *p;) {
    const char *e = strchr(p, ','), *eq = strchr(p, '=');
    const size_t n = e ? (size_t)(e - p) : strlen(p);
    if (eq && eq < p + n && (size_t)(p + n - eq - 1) == strlen(name) &&
        strncasecmp(eq + 1, name, strlen(name)) == 0 &&
        (size_t)(eq - p) < size) {
      memcpy(buf, p, (size_t)(eq - p));
      buf[eq - p] = '\0';
    }
    p = e ? e + 1 : NULL;
  }
}

sg_status fc_open_init(const forecast *f, sg_nc_t *nc) {
  sg_status st = SG_OK;
  sg_nc_open_opts oo = sg_nc_open_opts_default();
  SG_TRY(sg_nc_backend_parse(sg_kv_str(f->kv, "backend"), &oo.backend));
  oo.dim_map = f->dim_map;
  SG_TRY(sg_nc_open(MPI_COMM_WORLD, sg_kv_str(f->kv, "init"), &oo, nc));
fail:
  return st;
}

/* Variable v of the init file: present, (time, y, x) or (sample, time, y,
 * x) on the checkpoint's grid, holding the window. Not collective. */
static sg_status check_var(const forecast *f, sg_nc_t nc, int v,
                           sg_nc_var_info *vi) {
  sg_status st = SG_OK;
  const char *path = sg_kv_str(f->kv, "init");
  if (sg_nc_inq_var(nc, f->vars[v], vi) != SG_OK)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "init file %s has no variable '%s' (the checkpoint's model reads "
             "%d variable(s) from vars = %s)",
             path, f->vars[v], f->nvars, sg_kv_str(f->cfg, "vars"));
  if (vi->ndims != 3 && vi->ndims != 4)
    SG_RAISE(SG_ERR_SHAPE,
             "variable '%s' in %s has %d dims; expected (time, y, x) or "
             "(sample, time, y, x)",
             f->vars[v], path, vi->ndims);
  const int d = vi->ndims - 3;
  const int64_t T = vi->shape[d], i0 = sg_kv_int(f->kv, "init_index");
  if (vi->shape[d + 1] != f->ny_g || vi->shape[d + 2] != f->nx_g)
    SG_RAISE(SG_ERR_SHAPE,
             "variable '%s' in %s is on a %lldx%lld grid; the checkpoint's "
             "model was trained on %lldx%lld",
             f->vars[v], path, (long long)vi->shape[d + 1],
             (long long)vi->shape[d + 2], (long long)f->ny_g,
             (long long)f->nx_g);
  if (i0 + f->history > T)
    SG_RAISE(SG_ERR_CONFIG,
             "--init-index %lld: the window of %lld frame(s) ends past the "
             "%lld frames of '%s' in %s",
             (long long)i0, (long long)f->history, (long long)T, f->vars[v],
             path);
  if (d && sg_kv_int(f->kv, "init_sample") >= vi->shape[0])
    SG_RAISE(SG_ERR_CONFIG, "--init-sample %lld: %s has %lld samples",
             (long long)sg_kv_int(f->kv, "init_sample"), path,
             (long long)vi->shape[0]);
fail:
  return st;
}

/* This rank's box of the window of variable v: (history, ny, nx) values
 * and validity. Collective. */
static sg_status read_window(const forecast *f, sg_nc_t nc,
                             const sg_nc_var_info *vi, float *buf,
                             uint8_t *valid) {
  const int d = vi->ndims - 3;
  sg_nc_shard sh;
  memset(&sh, 0, sizeof sh);
  sh.ndims = vi->ndims;
  sh.dtype = SG_DTYPE_F32;
  for (int k = 0; k < vi->ndims; ++k) sh.global_shape[k] = vi->shape[k];
  if (d) sh.start[0] = sg_kv_int(f->kv, "init_sample"), sh.count[0] = 1;
  sh.start[d] = sg_kv_int(f->kv, "init_index");
  sh.count[d] = f->history;
  sh.start[d + 1] = f->y0, sh.count[d + 1] = f->ny;
  sh.start[d + 2] = f->x0, sh.count[d + 2] = f->nx;
  sg_nc_read_opts ro = sg_nc_read_opts_default();
  ro.masked_value = 0.0;
  ro.mask_nonfinite = 1; /* NaN: missing, as in training */
  return sg_nc_read(nc, vi->varid, &sh, &ro, buf, valid);
}

/* Members 1.. get sigma * N(0, 1) at their valid points, the value at
 * (member, frame, variable, global y, global x) of the counter-based RNG:
 * the same on every mesh. wmask: validity of member 0's window. */
static sg_status perturb(forecast *f, const float *wmask) {
  sg_status st = SG_OK;
  const double sigma = sg_kv_float(f->kv, "perturb");
  const int64_t M = f->members, W = f->history * f->nvars * f->ny * f->nx;
  if (M < 2 || sigma == 0.0) return SG_OK;
  float *noise = malloc((size_t)(M * W) * sizeof *noise);
  if (!noise) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  const int64_t g[5] = {M, f->history, f->nvars, f->ny_g, f->nx_g},
                o[5] = {0, 0, 0, f->y0, f->x0},
                e[5] = {M, f->history, f->nvars, f->ny, f->nx};
  SG_TRY(sg_rng_fill_box(SG_RNG_NORMAL, 0.0, sigma,
                         (uint64_t)sg_kv_int(f->kv, "seed"), 0x466f7265ull, 5,
                         g, o, e, SG_DTYPE_F32, noise));
  for (int64_t m = 1; m < M; ++m)
    for (int64_t i = 0; i < W; ++i)
      f->x[m * W + i] += wmask[i] * noise[m * W + i];
fail:
  free(noise);
  return st;
}

sg_status fc_read_init(forecast *f) {
  sg_status st = SG_OK;
  sg_nc_t nc = NULL;
  const int64_t V = f->nvars, H = f->history, plane = f->ny * f->nx,
                W = H * V * plane, M = f->members;
  float *buf = malloc((size_t)(H * plane + 1) * sizeof *buf),
        *wmask = malloc((size_t)(W + 1) * sizeof *wmask);
  uint8_t *valid = malloc((size_t)(H * plane + 1));
  if (!buf || !wmask || !valid)
    st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
  SG_TRY(sg_agree(MPI_COMM_WORLD, st));
  SG_TRY(fc_open_init(f, &nc));
  for (int v = 0; v < V; ++v) {
    sg_nc_var_info vi;
    SG_TRY(sg_agree(MPI_COMM_WORLD, check_var(f, nc, v, &vi)));
    SG_TRY(read_window(f, nc, &vi, buf, valid));
    const float mu = (float)f->mean[v], inv = (float)(1.0 / f->std[v]);
    for (int64_t h = 0; h < H; ++h) /* the training's normalisation */
      for (int64_t i = 0; i < plane; ++i) {
        const int64_t k = (h * V + v) * plane + i;
        const uint8_t ok = valid[h * plane + i];
        f->x[k] = ok ? (buf[h * plane + i] - mu) * inv : 0.0f;
        wmask[k] = ok;
      }
  }
  for (int64_t m = 0; m < M; ++m) { /* the newest frame's validity */
    memcpy(f->mask + m * V * plane, wmask + (H - 1) * V * plane,
           (size_t)(V * plane) * sizeof *f->mask);
    if (m) memcpy(f->x + m * W, f->x, (size_t)W * sizeof *f->x);
  }
  SG_TRY(sg_agree(MPI_COMM_WORLD, perturb(f, wmask)));
fail:
  sg_nc_close(&nc);
  free(buf);
  free(wmask);
  free(valid);
  return st;
}
