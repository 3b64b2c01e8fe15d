/* sg-train — climate data on the sphere: the latitudes of a dataset, the
 * latitude-weighted loss (loss_weighting = latitude) and the
 * latitude-weighted RMSE and ACC (sg_metrics.h, WeatherBench 2) of every
 * evaluation, of the model and of the persistence and climatology
 * baselines. */
#include "train.h"

#include "sg_comm.h"
#include "sg_device.h"
#include "sg_log.h"
#include "sg_metrics.h"
#include "sg_nc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ds->lat: the latitudes of the rows when the y dim is named "lat" (after
 * dim_map) and has a coordinate variable (sg_nc_read_lat), and ds->wrow the
 * weights of this rank's rows; else both NULL. Collective. */
sg_status sg_dataset_latitudes(sg_nc_t f, sg_dataset *ds) {
  sg_status st = SG_OK;
  sg_nc_var_info vi;
  double *w = NULL;
  int found = 0;
  SG_TRY(sg_nc_inq_var(f, ds->vars[0], &vi));
  if (strcasecmp(vi.dim_names[vi.ndims - 2], "lat") != 0)
    return SG_OK; /* no latitudes: the same verdict on every rank */
  ds->lat = malloc((size_t)ds->ny_g * sizeof *ds->lat);
  ds->wrow = malloc((size_t)(ds->ny + 1) * sizeof *ds->wrow);
  w = malloc((size_t)ds->ny_g * sizeof *w);
  if (!ds->lat || !ds->wrow || !w)
    st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
  SG_TRY(sg_agree(MPI_COMM_WORLD, st));
  SG_TRY(sg_nc_read_lat(f, ds->ny_g, ds->lat, &found));
  if (found) {
    SG_TRY(sg_agree(MPI_COMM_WORLD, sg_lat_weights(ds->ny_g, ds->lat, w)));
    memcpy(ds->wrow, w + ds->y0, (size_t)ds->ny * sizeof *w);
  }
fail:
  free(w);
  if (st != SG_OK || !found) {
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
  const int64_t shape[4] = {r->lbatch, V, ny, nx};
  SG_TRY(sg_var_init(&r->lw, "lat_weight", SG_DTYPE_F32, 4, shape, NULL, 0));
  float *w = r->lw.value.data;
  for (int64_t p = 0; p < r->lbatch * V; ++p)
    for (int64_t j = 0; j < ny; ++j)
      for (int64_t i = 0; i < nx; ++i)
        w[(p * ny + j) * nx + i] = (float)r->ds.wrow[j];
  r->has_lw = 1;
  if (r->pipe) r->pps.weight = &r->lw; /* the last stage's loss (pipe.c) */
fail:
  return st;
}

/* The accumulators of an evaluation: a slot per EV_* (NULL without
 * latitudes). */
sg_scores *sg_train_wm_alloc(const run_t *r) {
  return r->ds.wrow ? sg_scores_new(EV_N, r->ds.nvars) : NULL;
}

sg_status sg_train_wm_add(run_t *r, int64_t slot, const float *f,
                          const float *truth, const float *mask, int64_t valid,
                          sg_scores *wm) {
  sg_status st = SG_OK;
  const int64_t V = r->ds.nvars, plane = r->ds.ny * r->ds.nx;
  float *clim = malloc((size_t)(V * plane + 1) * sizeof *clim);
  if (!clim) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  for (int64_t v = 0; v < V; ++v) /* the climatology in physical units */
    for (int64_t i = 0; i < plane; ++i)
      clim[v * plane + i] = (float)(r->clim[v * plane + i] * r->ds.std[v] +
                                    r->ds.mean[v]);
  const sg_metric_block b = {SG_DTYPE_F32, r->lbatch, V,     r->ds.ny, r->ds.nx,
                             r->ds.wrow,   f,         truth, clim,     mask};
  SG_TRY(sg_scores_add(wm, slot, &b, valid, r->domain));
fail:
  free(clim);
  return st;
}

/* RMSE and ACC (out[2k], out[2k+1]) of every slot and variable. */
static void wm_final(const sg_scores *wm, double *out) {
  for (int64_t k = 0; k < wm->nslots; ++k)
    for (int64_t v = 0; v < wm->nvars; ++v) {
      out[2 * (k * wm->nvars + v)] = sg_scores_rmse(wm, k, v);
      out[2 * (k * wm->nvars + v) + 1] = sg_scores_acc(wm, k, v);
    }
}

sg_status sg_train_wm_finish(run_t *r, sg_scores *wm) {
  sg_status st = SG_OK;
  if (!wm) return SG_OK;
  SG_TRY(sg_scores_allreduce(wm, r->data));
  if (r->pipe)
    SG_TRY(sg_pipe_bcast_last(r->pipe, wm->sum, 4 * wm->nslots * wm->nvars,
                              SG_DTYPE_F64));
  free(r->wmetrics);
  r->wmetrics = malloc((size_t)(2 * EV_N * r->ds.nvars) * sizeof *r->wmetrics);
  if (!r->wmetrics) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  wm_final(wm, r->wmetrics);
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

/* ---- the latitude-weighted metrics at leads 1 .. K of a time series ---- */

/* A lead evaluation in progress: per data rank lbatch test inits, their
 * first windows (persistence), the windows fed back, the scratch; under
 * pp all of it per micro-batch (nmb of them, m batches a pass). */
typedef struct lead_state {
  run_t *r;
  int64_t K, nmb, k;  /* leads, batches at once; the lead now */
  int scorer;         /* scores (the last stage under pp) */
  sg_scores *wm;      /* slots (lead - 1) * EV_N + kind */
  float *x, *x0, *xs; /* windows, first windows (nmb * lbatch * H * F each);
                       * scratch (lbatch * H * F) */
  float *pred;        /* predictions (nmb * lbatch * F) */
  float *f, *truth, *mask; /* one frame of a batch each */
  sg_example *ex, *exk;    /* inits (nmb * lbatch); scratch (lbatch) */
  int64_t *valid;          /* real inits per micro-batch (nmb) */
} lead_state;

sg_status sg_train_predict(run_t *r, const float *x, float *pred) {
  sg_status st = SG_OK;
  const int64_t plane = r->ds.ny * r->ds.nx;
  int64_t xs[4] = {r->lbatch, r->cin, r->ds.ny, r->ds.nx};
  sg_var xv, *y = NULL;
  memset(&xv, 0, sizeof xv);
  int prev = sg_tape_set_grad_enabled(r->tape, 0);
  const int dev = r->dev.kind != SG_DEVICE_HOST;
  if (dev) /* device = cuda: the batch there, the prediction back */
    SG_TRY(sg_memcpy(r->dev, r->dxb, sg_device_host(), x,
                     (size_t)(r->lbatch * r->cin * plane) * sizeof *x));
  SG_TRY(
      sg_var_init(&xv, "x", SG_DTYPE_F32, 4, xs, dev ? r->dxb : (void *)x, 0));
  if (dev) SG_TRY(sg_var_set_device(&xv, r->dev));
  SG_TRY(sg_model_forward(r->model, r->tape, &xv, &y));
  SG_TRY(sg_memcpy(sg_device_host(), pred, y->value.device, y->value.data,
                   (size_t)(r->lbatch * r->cout * plane) * sizeof *pred));
fail:
  sg_tape_clear(r->tape);
  sg_tape_set_grad_enabled(r->tape, prev);
  sg_var_release(&xv);
  return st;
}

/* normalised -> physical units, times the mask (lbatch frames) */
static void lead_physical(const run_t *r, float *a, const float *mask) {
  const int64_t V = r->ds.nvars, plane = r->ds.ny * r->ds.nx;
  for (int64_t j = 0; j < r->lbatch * V; ++j)
    for (int64_t i = 0; i < plane; ++i)
      a[j * plane + i] = (float)(a[j * plane + i] * r->ds.std[j % V] +
                                 r->ds.mean[j % V]) *
                         mask[j * plane + i];
}

/* Batch b's truth at lead k (1-based) into L->truth, L->mask (physical,
 * masked; an init whose target lies past the data: mask 0, so it is left
 * out of the lead's means). ex: the batch's inits. */
static void lead_truth(lead_state *L, const sg_example *ex, int64_t k) {
  run_t *r = L->r;
  const int64_t F = r->ds.nvars * r->ds.ny * r->ds.nx;
  for (int64_t j = 0; j < r->lbatch; ++j) {
    L->exk[j] = ex[j];
    if (sg_dataset_target_frame(&r->dopt, ex[j].t0, k - 1) < r->ds.nframes)
      L->exk[j].t0 += (k - 1) * r->dopt.lead;
  }
  sg_dataset_fill(&r->ds, &r->dopt, L->exk, r->lbatch, L->xs, L->truth,
                  L->mask);
  for (int64_t j = 0; j < r->lbatch; ++j)
    if (sg_dataset_target_frame(&r->dopt, ex[j].t0, k - 1) >= r->ds.nframes)
      memset(L->mask + j * F, 0, (size_t)F * sizeof *L->mask);
  lead_physical(r, L->truth, L->mask);
}

/* Score lead k of a batch: the model's prediction pred (normalised) and
 * the baselines (persistence from the first windows x0), into the
 * accumulators of lead k. Collective over the domain. */
static sg_status lead_score(lead_state *L, int64_t k, const float *pred,
                            const float *x0, int64_t valid) {
  sg_status st = SG_OK;
  run_t *r = L->r;
  const int64_t F = r->ds.nvars * r->ds.ny * r->ds.nx, H = r->dopt.history;
  for (int kind = 0; kind < EV_N; ++kind) {
    for (int64_t j = 0; j < r->lbatch; ++j)
      memcpy(L->f + j * F,
             kind == EV_MODEL         ? pred + j * F
             : kind == EV_PERSISTENCE ? x0 + (j * H + H - 1) * F
                                      : r->clim,
             (size_t)F * sizeof *L->f);
    lead_physical(r, L->f, L->mask);
    SG_TRY(sg_train_wm_add(r, (k - 1) * EV_N + kind, L->f, L->truth, L->mask,
                           valid, L->wm));
  }
fail:
  return st;
}

/* Micro-batch mb (batch b): its inits (padded with the last) and first
 * windows; L->valid[mb] how many are real. */
static void lead_start(lead_state *L, int64_t mb, int64_t b) {
  run_t *r = L->r;
  const int64_t F = r->ds.nvars * r->ds.ny * r->ds.nx, H = r->dopt.history,
                W = r->lbatch * H * F;
  sg_example *ex = L->ex + mb * r->lbatch;
  L->valid[mb] = 0;
  for (int64_t j = 0; j < r->lbatch; ++j) {
    const int64_t g = b * r->ebatch + r->cdp * r->lbatch + j;
    ex[j] = r->test[g < r->ntest ? g : r->ntest - 1];
    L->valid[mb] += g < r->ntest;
  }
  sg_dataset_fill(&r->ds, &r->dopt, ex, r->lbatch, L->x + mb * W, L->truth,
                  L->mask);
  memcpy(L->x0 + mb * W, L->x + mb * W, (size_t)W * sizeof *L->x0);
}

/* Lead L->k of micro-batch mb, predicted (L->pred): its truth, its scores
 * (when score: the last stage under pp), and the prediction fed back into
 * its window, masked like the data (0 at masked points). */
static sg_status lead_step(lead_state *L, int64_t mb, int score) {
  sg_status st = SG_OK;
  run_t *r = L->r;
  const int64_t F = r->ds.nvars * r->ds.ny * r->ds.nx, H = r->dopt.history,
                W = r->lbatch * H * F;
  float *pred = L->pred + mb * r->lbatch * F;
  lead_truth(L, L->ex + mb * r->lbatch, L->k);
  if (score) SG_TRY(lead_score(L, L->k, pred, L->x0 + mb * W, L->valid[mb]));
  for (int64_t i = 0; i < r->lbatch * F; ++i)
    L->f[i] = L->mask[i] != 0.0f ? 1.0f : 0.0f;
  sg_train_feed_back(L->x + mb * W, pred, r->ds.has_mask ? L->f : NULL,
                     r->lbatch, H, F);
fail:
  return st;
}

/* Under pp (sg_pipe_model_io): the first stage feeds micro-batch mb's
 * window. */
static sg_status lead_pp_input(void *ctx, int mb, sg_var *x) {
  lead_state *L = ctx;
  run_t *r = L->r;
  const int64_t xs[4] = {r->lbatch, r->cin, r->ds.ny, r->ds.nx};
  return sg_var_init(x, "x", SG_DTYPE_F32, 4, xs,
                     L->x + mb * r->lbatch * r->cin * r->ds.ny * r->ds.nx, 0);
}

/* After the prediction of lead k + 1 (in L->pred on every rank): score
 * and feed back every micro-batch. */
static sg_status lead_next(void *ctx, int64_t k) {
  sg_status st = SG_OK;
  lead_state *L = ctx;
  L->k = k + 1;
  for (int64_t mb = 0; mb < L->nmb; ++mb) SG_TRY(lead_step(L, mb, L->scorer));
fail:
  return st;
}

/* Batches b0 .. b0 + nmb - 1 over the K leads: one process, or the
 * forward-only runs through the stages (sg_pipe_model_roll: the last
 * stage's predictions on every stage; every stage feeds back, the last
 * one scores). Collective. */
static sg_status lead_pass(lead_state *L, int64_t b0) {
  sg_status st = SG_OK;
  run_t *r = L->r;
  const sg_pipe_model_io io = {r->model, NULL, lead_pp_input, NULL, L};
  for (int64_t mb = 0; mb < L->nmb; ++mb) lead_start(L, mb, b0 + mb);
  if (r->pipe)
    return sg_pipe_model_roll(r->pipe, &io, L->K, SG_DTYPE_F32,
                              r->lbatch * r->ds.nvars * r->ds.ny * r->ds.nx,
                              L->pred, lead_next, L);
  for (int64_t k = 0; k < L->K; ++k) {
    SG_TRY(sg_train_predict(r, L->x, L->pred));
    SG_TRY(lead_next(L, k));
  }
fail:
  return st;
}

/* The leads' metrics on rank 0's log and as one metrics line of arrays
 * (per lead) per metric, variable and forecast. res: (K, EV_N, V, 2). */
static void lead_report(const run_t *r, int64_t K, int64_t step,
                        const double *res) {
  static const char *const base[EV_N] = {"", "_persistence", "_climatology"};
  const int64_t V = r->ds.nvars;
  for (int64_t k = 0; k < K && r->rank == 0; ++k)
    for (int64_t v = 0; v < V; ++v) {
      const double *m = res + k * EV_N * V * 2;
      sg_log_info("%s at lead %lld: latitude-weighted RMSE %.4g (persistence "
                  "%.4g, climatology %.4g), ACC %.4f (persistence %.4f)",
                  r->ds.vars[v], (long long)((k + 1) * r->dopt.lead), m[2 * v],
                  m[2 * (V + v)], m[2 * (2 * V + v)], m[2 * v + 1],
                  m[2 * (V + v) + 1]);
    }
  if (!r->metrics) return;
  fprintf(r->metrics, "{\"step\": %lld, \"leads\": [", (long long)step);
  for (int64_t k = 0; k < K; ++k)
    fprintf(r->metrics, "%s%lld", k ? ", " : "",
            (long long)((k + 1) * r->dopt.lead));
  fputs("]", r->metrics);
  for (int what = 0; what < 2; ++what)
    for (int i = 0; i < EV_N; ++i)
      for (int64_t v = 0; v < V; ++v) {
        fprintf(r->metrics, ", \"%s_%s%s_leads\": [", what ? "acc" : "rmse",
                r->ds.vars[v], base[i]);
        for (int64_t k = 0; k < K; ++k) {
          fputs(k ? ", " : "", r->metrics);
          json_num(r->metrics, res[((k * EV_N + i) * V + v) * 2 + what]);
        }
        fputs("]", r->metrics);
      }
  fputs("}\n", r->metrics);
  fflush(r->metrics);
}

sg_status sg_train_climate_leads(run_t *r, int64_t K, int64_t step) {
  sg_status st = SG_OK;
  const int64_t F = r->ds.nvars * r->ds.ny * r->ds.nx, H = r->dopt.history,
                nmb = r->pipe ? r->micro : 1, n = r->lbatch;
  lead_state L = {.r = r,
                  .K = K,
                  .nmb = nmb,
                  .scorer = !r->pipe || sg_pipe_stage(r->pipe) ==
                                            sg_pipe_nstages(r->pipe) - 1};
  double *res = NULL;
  if (!r->ds.wrow)
    SG_RAISE(SG_ERR_CONFIG,
             "rollout on a time series scores the latitude-weighted metrics "
             "per lead: dataset '%s' has no latitude coordinate (a y dim "
             "named lat, after dim_map, with a coordinate variable)",
             r->dopt.path);
  L.wm = sg_scores_new(K * EV_N, r->ds.nvars);
  res = malloc((size_t)(2 * EV_N * r->ds.nvars * K) * sizeof *res);
  L.x = malloc((size_t)((2 * nmb + 1) * n * H * F + 1) * sizeof *L.x);
  L.pred = malloc((size_t)((nmb + 3) * n * F + 1) * sizeof *L.pred);
  L.ex = malloc((size_t)((nmb + 1) * n) * sizeof *L.ex);
  L.valid = malloc((size_t)nmb * sizeof *L.valid);
  if (!L.wm || !res || !L.x || !L.pred || !L.ex || !L.valid)
    SG_RAISE(SG_ERR_ALLOC, "out of memory");
  L.x0 = L.x + nmb * n * H * F, L.xs = L.x0 + nmb * n * H * F;
  L.f = L.pred + nmb * n * F, L.truth = L.f + n * F, L.mask = L.truth + n * F;
  L.exk = L.ex + nmb * n;
  for (int64_t b = 0; b * r->ebatch < r->ntest; b += nmb)
    SG_TRY(lead_pass(&L, b));
  SG_TRY(sg_scores_allreduce(L.wm, r->data));
  if (r->pipe)
    SG_TRY(sg_pipe_bcast_last(r->pipe, L.wm->sum,
                              4 * L.wm->nslots * L.wm->nvars, SG_DTYPE_F64));
  wm_final(L.wm, res);
  lead_report(r, K, step, res);
fail:
  sg_scores_free(L.wm);
  free(res);
  free(L.x);
  free(L.pred);
  free(L.ex);
  free(L.valid);
  return st;
}
