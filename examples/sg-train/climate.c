/* sg-train — climate data on the sphere: the latitudes of a dataset, the
 * latitude-weighted loss (loss_weighting = latitude) and the
 * latitude-weighted RMSE and ACC (sg_metrics.h, WeatherBench 2) of every
 * evaluation, of the model and of the persistence and climatology
 * baselines. */
#include "train.h"

#include "sg_comm.h"
#include "sg_log.h"
#include "sg_metrics.h"
#include "sg_nc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The file's name of the dim mapped to "lat" by dim_map ("FROM=lat"), or
 * "lat". */
static void lat_file_name(const char *dim_map, char *buf, size_t size) {
  snprintf(buf, size, "lat");
  for (const char *p = dim_map; p && *p;) {
    const char *e = strchr(p, ','), *eq = strchr(p, '=');
    const size_t n = e ? (size_t)(e - p) : strlen(p);
    if (eq && eq < p + n && (size_t)(p + n - eq - 1) == 3 &&
        strncasecmp(eq + 1, "lat", 3) == 0 && (size_t)(eq - p) < size) {
      memcpy(buf, p, (size_t)(eq - p));
      buf[eq - p] = '\0';
    }
    p = e ? e + 1 : NULL;
  }
}

/* ds->lat: the latitudes of the rows when the y dim is named "lat" (after
 * dim_map) and has a coordinate variable, and ds->wrow the weights of this
 * rank's rows; else both NULL. Collective. */
sg_status sg_dataset_latitudes(sg_nc_t f, const sg_data_opts *o,
                               sg_dataset *ds) {
  sg_status st = SG_OK;
  sg_nc_var_info vi, ci;
  char name[SG_NC_NAME_MAX];
  double *w = NULL;
  SG_TRY(sg_nc_inq_var(f, ds->vars[0], &vi));
  lat_file_name(o->dim_map, name, sizeof name);
  if (strcasecmp(vi.dim_names[vi.ndims - 2], "lat") != 0 ||
      sg_nc_inq_var(f, name, &ci) != SG_OK || ci.ndims != 1 ||
      ci.shape[0] != ds->ny_g) {
    return SG_OK; /* no latitudes: the same verdict on every rank */
  }
  ds->lat = malloc((size_t)ds->ny_g * sizeof *ds->lat);
  ds->wrow = malloc((size_t)(ds->ny + 1) * sizeof *ds->wrow);
  w = malloc((size_t)ds->ny_g * sizeof *w);
  if (!ds->lat || !ds->wrow || !w)
    st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
  SG_TRY(sg_agree(MPI_COMM_WORLD, st));
  sg_nc_shard sh = {1, {ds->ny_g}, {0}, {ds->ny_g}, SG_DTYPE_F64};
  sg_nc_read_opts ro = sg_nc_read_opts_default();
  ro.no_mask = 1;
  SG_TRY(sg_nc_read(f, ci.varid, &sh, &ro, ds->lat, NULL));
  SG_TRY(sg_agree(MPI_COMM_WORLD, sg_lat_weights(ds->ny_g, ds->lat, w)));
  memcpy(ds->wrow, w + ds->y0, (size_t)ds->ny * sizeof *w);
fail:
  free(w);
  if (st != SG_OK) {
    free(ds->lat);
    free(ds->wrow);
    ds->lat = ds->wrow = NULL;
  }
  return st;
}

sg_status sg_train_loss_weights(run_t *r) {
  sg_status st = SG_OK;
  const char *lw = sg_kv_str(r->kv, "loss_weighting");
  const int64_t V = r->cout, ny = r->ds.ny, nx = r->ds.nx;
  if (strcmp(lw, "none") == 0) return SG_OK;
  if (strcmp(lw, "latitude") != 0)
    SG_RAISE(SG_ERR_CONFIG, "loss_weighting must be none or latitude, not '%s'",
             lw);
  if (!r->ds.lat)
    SG_RAISE(
        SG_ERR_CONFIG,
        "loss_weighting = latitude: dataset '%s' has no latitude coordinate (a y dim named lat, "
        "after dim_map, with a coordinate variable)",
        r->dopt.path);
  if (r->pipe)
    SG_RAISE(
        SG_ERR_NOT_SUPPORTED,
        "loss_weighting = latitude is not supported with a pp mesh dim yet");
  const int64_t shape[4] = {r->lbatch, V, ny, nx};
  SG_TRY(sg_var_init(&r->lw, "lat_weight", SG_DTYPE_F32, 4, shape, NULL, 0));
  float *w = r->lw.value.data;
  for (int64_t p = 0; p < r->lbatch * V; ++p)
    for (int64_t j = 0; j < ny; ++j)
      for (int64_t i = 0; i < nx; ++i)
        w[(p * ny + j) * nx + i] = (float)r->ds.wrow[j];
  r->has_lw = 1;
fail:
  return st;
}

/* The accumulators of an evaluation: per EV_* and variable, the sums over
 * the forecasts of MSE and ACC and their count (wm[(k * V + v) * 3 ..]). */
double *sg_train_wm_alloc(const run_t *r) {
  if (!r->ds.wrow) return NULL;
  return calloc((size_t)(3 * EV_N * r->ds.nvars), sizeof(double));
}

sg_status sg_train_wm_add(run_t *r, int kind, const float *f,
                          const float *truth, const float *mask, int64_t valid,
                          double *wm) {
  sg_status st = SG_OK;
  const int64_t V = r->ds.nvars, plane = r->ds.ny * r->ds.nx;
  double *mse = malloc((size_t)(2 * r->lbatch * V + 1) * sizeof *mse),
         *acc = mse + r->lbatch * V, *wsum = NULL;
  float *clim = malloc((size_t)(V * plane + 1) * sizeof *clim);
  wsum = malloc((size_t)(r->lbatch * V + 1) * sizeof *wsum);
  if (!mse || !clim || !wsum) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  for (int64_t v = 0; v < V; ++v) /* the climatology in physical units */
    for (int64_t i = 0; i < plane; ++i)
      clim[v * plane + i] = (float)(r->clim[v * plane + i] * r->ds.std[v] +
                                    r->ds.mean[v]);
  const sg_metric_block b = {SG_DTYPE_F32, r->lbatch, V,     r->ds.ny, r->ds.nx,
                             r->ds.wrow,   f,         truth, clim,     mask};
  SG_TRY(sg_dist_metrics(&b, r->domain, mse, acc, wsum));
  for (int64_t j = 0; j < valid; ++j)
    for (int64_t v = 0; v < V; ++v) {
      if (!(wsum[j * V + v] > 0)) continue; /* nothing valid */
      double *a = wm + (kind * V + v) * 3;
      a[0] += mse[j * V + v];
      a[1] += acc[j * V + v];
      a[2] += 1.0;
    }
fail:
  free(mse);
  free(wsum);
  free(clim);
  return st;
}

sg_status sg_train_wm_finish(run_t *r, double *wm) {
  sg_status st = SG_OK;
  const int64_t n = 3 * EV_N * r->ds.nvars;
  if (!wm) return SG_OK;
  if (r->data && sg_group_size(r->data) > 1)
    SG_TRY(sg_allreduce_det(r->data, wm, wm, n, SG_DTYPE_F64, SG_REDUCE_SUM));
  if (r->pipe) SG_TRY(sg_pipe_bcast_last(r->pipe, wm, n, SG_DTYPE_F64));
  free(r->wmetrics);
  r->wmetrics = malloc((size_t)(2 * EV_N * r->ds.nvars) * sizeof *r->wmetrics);
  if (!r->wmetrics) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  for (int64_t k = 0; k < EV_N * r->ds.nvars; ++k) {
    const double *a = wm + 3 * k;
    r->wmetrics[2 * k] = a[2] > 0 ? sqrt(a[0] / a[2]) : NAN;
    r->wmetrics[2 * k + 1] = a[2] > 0 ? a[1] / a[2] : NAN;
  }
fail:
  return st;
}

static void json_num(FILE *f, double x) {
  if (isfinite(x))
    fprintf(f, "%.17g", x);
  else
    fputs("null", f);
}

void sg_train_wm_report(const run_t *r, int64_t step) {
  static const char *const base[EV_N] = {"", "_persistence", "_climatology"};
  const int64_t V = r->ds.nvars;
  if (!r->wmetrics) return;
  for (int64_t v = 0; v < V && r->rank == 0; ++v) {
    const double *m = r->wmetrics;
    sg_log_info(
        "%s at lead %lld: latitude-weighted RMSE %.4g (persistence %.4g, climatology %.4g), "
        "ACC %.4f (persistence %.4f, climatology %.4f)",
        r->ds.vars[v], (long long)r->dopt.lead, m[2 * v], m[2 * (V + v)],
        m[2 * (2 * V + v)], m[2 * v + 1], m[2 * (V + v) + 1],
        m[2 * (2 * V + v) + 1]);
  }
  if (!r->metrics) return;
  fprintf(r->metrics, "{\"step\": %lld, \"lead\": %lld", (long long)step,
          (long long)r->dopt.lead);
  for (int what = 0; what < 2; ++what)
    for (int k = 0; k < EV_N; ++k)
      for (int64_t v = 0; v < V; ++v) {
        fprintf(r->metrics, ", \"%s_%s%s\": ", what ? "acc" : "rmse",
                r->ds.vars[v], base[k]);
        json_num(r->metrics, r->wmetrics[2 * (k * V + v) + what]);
      }
  fputs("}\n", r->metrics);
  fflush(r->metrics);
}
