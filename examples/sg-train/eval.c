/* sg-train — evaluation: the test relative L2 (with predictions written
 * on request) and the autoregressive rollout, on one process, any mesh, or
 * forward through a pipeline's stages (sg_pipe_forward: the first stage
 * feeds the inputs, the last scores the outputs). */
#include "train.h"

#include "sg_nc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* normalised -> physical units, masked; the cout channels of an example
 * are out_frames frames of the variables (frame-major) */
static void to_physical(run_t *r, float *a, const float *mask) {
  const int64_t V = r->ds.nvars, C = r->cout, plane = r->ds.ny * r->ds.nx;
  for (int64_t j = 0; j < r->lbatch; ++j)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t v = c % V;
      float *p = a + (j * C + c) * plane;
      const float *mk = mask + (j * C + c) * plane;
      for (int64_t i = 0; i < plane; ++i)
        p[i] = (float)(p[i] * r->ds.std[v] + r->ds.mean[v]) * mk[i];
    }
}

/* The baselines' forecasts (normalised) of lbatch examples: persistence,
 * the last input frame of each example of x; climatology (r->clim); the
 * same for each of the out_frames output frames. */
static void baseline(run_t *r, int kind, const float *x, float *f) {
  const int64_t fr = r->ds.nvars * r->ds.ny * r->ds.nx, H = r->dopt.history,
                K = r->cout / r->ds.nvars;
  for (int64_t j = 0; j < r->lbatch; ++j)
    for (int64_t k = 0; k < K; ++k)
      memcpy(f + (j * K + k) * fr,
             kind == EV_PERSISTENCE ? x + (j * H + H - 1) * fr : r->clim,
             (size_t)fr * sizeof *f);
}

/* Add the relative L2 errors of the first `valid` examples of forecast f
 * (normalised; turned into physical units, masked) against truth
 * (physical, masked) to *sum. Collective over the stage. */
static sg_status score(run_t *r, float *f, const float *truth,
                       const float *mask, int64_t valid, double *sum, int kind,
                       sg_scores *wm) {
  sg_status st = SG_OK;
  const sg_dist_loss_ctx lc = {r->domain, r->data, r->ebatch};
  double *rel = malloc((size_t)r->lbatch * sizeof *rel);
  if (!rel) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  to_physical(r, f, mask);
  SG_TRY(sg_dist_rel_l2_ctx(SG_DTYPE_F32, r->lbatch,
                            r->cout * r->ds.ny * r->ds.nx, f, truth, NULL, &lc,
                            rel));
  for (int64_t j = 0; j < valid; ++j) *sum += rel[j];
  if (wm) SG_TRY(sg_train_wm_add(r, kind, f, truth, mask, valid, wm));
fail:
  free(rel);
  return st;
}

/* The baselines' scores of a batch whose inputs are x (normalised) beside
 * the model's: sum[EV_PERSISTENCE], sum[EV_CLIMATOLOGY]; buf: scratch of
 * one batch's forecasts. Collective over the stage. */
static sg_status score_baselines(run_t *r, const float *x, float *buf,
                                 const float *truth, const float *mask,
                                 int64_t valid, double *sum, sg_scores *wm) {
  sg_status st = SG_OK;
  for (int kind = EV_PERSISTENCE; kind <= EV_CLIMATOLOGY; ++kind) {
    baseline(r, kind, x, buf);
    SG_TRY(score(r, buf, truth, mask, valid, &sum[kind], kind, wm));
  }
fail:
  return st;
}

/* An evaluation in progress: the predictions file (NULL: none), the sums
 * of the relative L2 of the model and the baselines and the count of
 * valid examples (sc[EV_N]), scratch. */
typedef struct eval_state {
  run_t *r;
  sg_nc_t f;
  int vp, vt;
  double sc[EV_N + 1];
  sg_scores *wm; /* latitude-weighted metrics (climate.c), NULL: none */
  sg_example *ex;
  float *pred, *base;
  int64_t pass; /* under pp: the forward-only run (m evaluation batches) */
  /* under pp: the micro-batch's examples and buffers, from fill to output */
  int64_t first, valid;
  float *x, *y, *m;
} eval_state;

/* The predictions file: prediction and target (example, channel, y, x),
 * written as out.partial and renamed only when complete. Collective over
 * comm (the ranks that write). */
static sg_status eval_open(eval_state *E, MPI_Comm comm, const char *out) {
  sg_status st = SG_OK;
  run_t *r = E->r;
  sg_nc_create_opts co = sg_nc_create_opts_default();
  co.overwrite = 1;
  co.atomic = 1;
  SG_TRY(sg_nc_create(comm, out, &co, &E->f));
  int id;
  SG_TRY(sg_nc_def_dim(E->f, "example", r->ntest, &id));
  SG_TRY(sg_nc_def_dim(E->f, "channel", r->cout, &id));
  SG_TRY(sg_nc_def_dim(E->f, "y", r->ds.ny_g, &id));
  SG_TRY(sg_nc_def_dim(E->f, "x", r->ds.nx_g, &id));
  const char *dims[4] = {"example", "channel", "y", "x"};
  SG_TRY(
      sg_nc_def_var(E->f, "prediction", SG_DTYPE_F32, 4, dims, NULL, &E->vp));
  SG_TRY(sg_nc_def_var(E->f, "target", SG_DTYPE_F32, 4, dims, NULL, &E->vt));
  sg_nc_cf cp = {NULL, "model prediction", NULL, 0, 0},
           ct = {NULL, "true value", NULL, 0, 0};
  SG_TRY(sg_nc_put_cf(E->f, E->vp, &cp));
  SG_TRY(sg_nc_put_cf(E->f, E->vt, &ct));
  SG_TRY(sg_nc_put_att_text(E->f, SG_NC_GLOBAL, "variables", r->dopt.vars));
  SG_TRY(sg_nc_put_global_cf(E->f, "sg-train test predictions",
                             "sg-train --predict", NULL));
  SG_TRY(sg_nc_enddef(E->f));
fail:
  return st;
}

/* This data rank's examples of evaluation batch b into ex (padded with the
 * last test example) and x, y, mask; returns how many are real, *first the
 * index of the first. Not collective. */
static int64_t eval_fill(run_t *r, int64_t b, sg_example *ex, float *x,
                         float *y, float *mask, int64_t *first) {
  int64_t valid = 0;
  *first = b * r->ebatch + r->cdp * r->lbatch;
  for (int64_t j = 0; j < r->lbatch; ++j) {
    const int64_t g = *first + j;
    ex[j] = r->test[g < r->ntest ? g : r->ntest - 1];
    valid += g < r->ntest;
  }
  sg_dataset_fill(&r->ds, &r->dopt, ex, r->lbatch, x, y, mask);
  return valid;
}

/* Score the predictions of one batch (normalised; x, y, mask from
 * eval_fill) and the baselines': relative L2 in physical units over the
 * domain, the valid examples summed, predictions and targets written.
 * Collective over the stage. */
static sg_status eval_score(eval_state *E, int64_t first, int64_t valid,
                            const float *x, float *pred, float *y,
                            const float *mask) {
  sg_status st = SG_OK;
  run_t *r = E->r;
  const int64_t V = r->cout; /* out_frames x the variables */
  to_physical(r, y, mask);
  SG_TRY(score(r, pred, y, mask, valid, &E->sc[EV_MODEL], EV_MODEL, E->wm));
  SG_TRY(score_baselines(r, x, E->base, y, mask, valid, E->sc, E->wm));
  E->sc[EV_N] += (double)valid;
  if (E->f) {
    sg_nc_shard sh = {4,
                      {r->ntest, V, r->ds.ny_g, r->ds.nx_g},
                      {valid ? first : 0, 0, r->ds.y0, r->ds.x0},
                      {valid, V, r->ds.ny, r->ds.nx},
                      SG_DTYPE_F32};
    SG_TRY(sg_nc_write(E->f, E->vp, &sh, pred));
    SG_TRY(sg_nc_write(E->f, E->vt, &sh, y));
  }
fail:
  return st;
}

/* Under pp (sg_pipe_model_io): micro-batch mb of a forward-only run is
 * evaluation batch pass * m + mb; the first stage reads its inputs, the
 * last scores the model's output (fill and output run in one forward, so
 * the batch's first example and valid count wait in E). */
static float *eval_pp_buf(run_t *r, float *buf, int64_t ch, int mb) {
  return buf + mb * r->lbatch * ch * r->ds.ny * r->ds.nx;
}

static sg_status eval_pp_fill(void *ctx, int mb) {
  eval_state *E = ctx;
  run_t *r = E->r;
  E->x = eval_pp_buf(r, r->xb, r->cin, mb);
  E->y = eval_pp_buf(r, r->yb, r->cout, mb);
  E->m = eval_pp_buf(r, r->mb, r->cout, mb);
  E->valid = eval_fill(r, E->pass * r->micro + mb, E->ex, E->x, E->y, E->m,
                       &E->first);
  return SG_OK;
}

/* The first stage's input of micro-batch mb: from buffer x of micro-batch
 * windows (evaluation: r->xb; rollout: the windows being fed). */
static sg_status pp_input_of(run_t *r, float *x, int mb, sg_var *v) {
  const int64_t xs[4] = {r->lbatch, r->cin, r->ds.ny, r->ds.nx};
  return sg_var_init(v, "x", SG_DTYPE_F32, 4, xs, eval_pp_buf(r, x, r->cin, mb),
                     0);
}

static sg_status eval_pp_input(void *ctx, int mb, sg_var *x) {
  eval_state *E = ctx;
  return pp_input_of(E->r, E->r->xb, mb, x);
}

static sg_status eval_pp_output(void *ctx, sg_tape_t tape, int mb, sg_var *y,
                                sg_var **loss) {
  eval_state *E = ctx;
  run_t *r = E->r;
  (void)tape;
  (void)loss;
  (void)mb; /* fill just ran for it */
  memcpy(E->pred, y->value.data,
         (size_t)(r->lbatch * r->cout * r->ds.ny * r->ds.nx) * sizeof *E->pred);
  return eval_score(E, E->first, E->valid, E->x, E->pred, E->y, E->m);
}

/* The evaluation batches through the pipeline: forward-only runs of m
 * batches each, scored on the last stage. Collective. */
static sg_status eval_pp(eval_state *E, int64_t nb) {
  sg_status st = SG_OK;
  run_t *r = E->r;
  const sg_pipe_model_io io = {r->model, eval_pp_fill, eval_pp_input,
                               eval_pp_output, E};
  for (E->pass = 0; E->pass * r->micro < nb; ++E->pass)
    SG_TRY(sg_pipe_model_forward(r->pipe, &io));
fail:
  return st;
}

/* Mean relative L2 over the test examples (one step ahead), in physical
 * units, every data rank taking its share, of the model and of the
 * baselines (rel_out[EV_*]); with `out` the predictions and
 * targets are written to a NetCDF file (example, channel, y, x). Under pp
 * the batches run forward through the stages and the last stage scores
 * them (and writes the file); every rank gets the result. */
sg_status sg_train_evaluate(run_t *r, const char *out, double *rel_out) {
  sg_status st = SG_OK;
  const int64_t V = r->cout, plane = r->ds.ny * r->ds.nx;
  eval_state E = {.r = r, .vp = -1, .vt = -1};
  E.ex = malloc((size_t)r->lbatch * sizeof *E.ex);
  E.pred = malloc((size_t)(r->lbatch * V * plane + 1) * sizeof *E.pred);
  E.base = malloc((size_t)(r->lbatch * V * plane + 1) * sizeof *E.base);
  E.wm = sg_train_wm_alloc(r);
  const int scorer = !r->pipe ||
                     sg_pipe_stage(r->pipe) == sg_pipe_nstages(r->pipe) - 1;
  if (!E.ex || !E.pred || !E.base || (r->ds.wrow && !E.wm))
    st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
  else if (out && *out && scorer) /* under pp the last stage writes */
    st = eval_open(&E, r->pipe ? sg_mesh_comm(r->smesh) : MPI_COMM_WORLD, out);
  SG_TRY(sg_agree(MPI_COMM_WORLD, st));
  const int64_t nb = (r->ntest + r->ebatch - 1) / r->ebatch;
  if (r->pipe) SG_TRY(eval_pp(&E, nb));
  for (int64_t b = 0; b < nb && !r->pipe; ++b) {
    int64_t first;
    const int64_t valid = eval_fill(r, b, E.ex, r->xb, r->yb, r->mb, &first);
    SG_TRY(sg_train_predict(r, r->xb, E.pred));
    SG_TRY(eval_score(&E, first, valid, r->xb, E.pred, r->yb, r->mb));
  }
  double *sc = E.sc;
  if (r->data && sg_group_size(r->data) > 1)
    SG_TRY(sg_allreduce_det(r->data, sc, sc, EV_N + 1, SG_DTYPE_F64,
                            SG_REDUCE_SUM));
  if (r->pipe) SG_TRY(sg_pipe_bcast_last(r->pipe, sc, EV_N + 1, SG_DTYPE_F64));
  for (int i = 0; i < EV_N; ++i)
    rel_out[i] = sc[EV_N] > 0 ? sc[i] / sc[EV_N] : 0.0;
  SG_TRY(sg_train_wm_finish(r, E.wm));
  st = E.f ? sg_nc_close(&E.f) : SG_OK;
  if (r->pipe) st = sg_agree(MPI_COMM_WORLD, st);
fail:
  if (E.f) sg_nc_discard(&E.f);
  free(E.ex);
  free(E.pred);
  free(E.base);
  sg_scores_free(E.wm);
  return st;
}

/* A rollout in progress: per micro-batch (several under pp) its window of
 * input frames, its first window (the persistence forecast) and its latest
 * prediction; the sums per lead time of the model and the baselines
 * (acc[i * steps + k], the count at acc[EV_N * steps]). */
typedef struct roll_state {
  run_t *r;
  int64_t steps, k, pass; /* frames; the one predicted now; under pp the run */
  double *acc;
  double *seq; /* per rollout batch and example: the sums over the frames of
                * m (p - t)^2 and m t^2 (the paper's metric, roll_seq) */
  float *x, *x0, *pred; /* windows, first windows, predictions: nmb each */
  float *phys, *truth, *mask; /* one batch */
  sg_example *ex;
} roll_state;

/* This data rank's test series of rollout batch b (padded with the last),
 * their inputs starting at frame k * lead (the target: lead k + 1);
 * returns how many are real. */
static int64_t roll_examples(run_t *r, int64_t b, int64_t k, sg_example *ex) {
  const int64_t nser = r->dopt.test_samples, s0 = r->ds.nseries - nser;
  int64_t valid = 0;
  for (int64_t j = 0; j < r->lbatch; ++j) {
    const int64_t g = b * r->ebatch + r->cdp * r->lbatch + j;
    ex[j].series = s0 + (g < nser ? g : nser - 1);
    ex[j].t0 = k * r->dopt.lead; /* lead 1 or history 1 (check_rollout) */
    valid += g < nser;
  }
  return valid;
}

/* Batch b's truth and mask at lead k + 1 into R->truth, R->mask. */
static int64_t roll_truth(roll_state *R, int64_t b, int64_t k) {
  run_t *r = R->r;
  const int64_t valid = roll_examples(r, b, k, R->ex);
  sg_dataset_fill(&r->ds, &r->dopt, R->ex, r->lbatch, r->xb, R->truth, R->mask);
  return valid;
}

/* The first window of batch b into x and x0 (frames 0 .. history - 1). */
static void roll_start(roll_state *R, int64_t b, float *x, float *x0) {
  run_t *r = R->r;
  const int64_t n = r->lbatch * r->dopt.history * r->ds.nvars * r->ds.ny *
                    r->ds.nx;
  roll_examples(r, b, 0, R->ex);
  sg_dataset_fill(&r->ds, &r->dopt, R->ex, r->lbatch, x, R->truth, R->mask);
  memcpy(x0, x, (size_t)n * sizeof *x0);
}

/* Add batch b's squared errors and squared truths of this lead (physical,
 * masked) per example, summed over the domain, to R->seq. Collective over
 * the domain. */
static sg_status roll_seq_add(roll_state *R, int64_t b) {
  run_t *r = R->r;
  const sg_metric_block blk = {.dtype = SG_DTYPE_F32,
                               .n = r->lbatch,
                               .nvars = r->ds.nvars,
                               .ny = r->ds.ny,
                               .nx = r->ds.nx,
                               .f = R->phys,
                               .o = R->truth,
                               .mask = R->mask};
  return sg_rel_l2_sums_add(&blk, r->domain, R->seq + b * 2 * r->lbatch);
}

/* The paper's rollout metric (Li et al. 2021): per example the relative L2
 * over all the rollout's frames at once, summed over batch b's `valid`
 * real examples into acc[EV_N * steps + 1]. */
static void roll_seq(roll_state *R, int64_t b, int64_t valid) {
  const double *s = R->seq + b * 2 * R->r->lbatch;
  for (int64_t j = 0; j < valid; ++j)
    R->acc[EV_N * R->steps + 1] += s[2 * j + 1] > 0.0
                                       ? sqrt(s[2 * j] / s[2 * j + 1])
                                       : 0.0;
}

/* Score batch b's prediction at lead k + 1 and the baselines' (from the
 * first window x0): acc[i * steps + k] += the relative L2 (physical units)
 * of its real series. Collective over the stage. */
static sg_status roll_score(roll_state *R, int64_t b, const float *pred,
                            const float *x0) {
  sg_status st = SG_OK;
  run_t *r = R->r;
  const int64_t n = r->lbatch * r->ds.nvars * r->ds.ny * r->ds.nx;
  const int64_t valid = roll_truth(R, b, R->k);
  double sc[EV_N] = {0};
  memcpy(R->phys, pred, (size_t)n * sizeof *R->phys);
  to_physical(r, R->truth, R->mask);
  SG_TRY(score(r, R->phys, R->truth, R->mask, valid, &sc[EV_MODEL], EV_MODEL,
               NULL));
  SG_TRY(roll_seq_add(R, b));
  if (R->k == R->steps - 1) roll_seq(R, b, valid);
  SG_TRY(score_baselines(r, x0, R->phys, R->truth, R->mask, valid, sc, NULL));
  for (int i = 0; i < EV_N; ++i) R->acc[i * R->steps + R->k] += sc[i];
  if (R->k == 0) R->acc[EV_N * R->steps] += (double)valid;
fail:
  return st;
}

/* Feed batch b's (normalised) prediction back into its window, masked
 * like the truth at this lead (sg_train_feed_back, as multi-step training
 * does). */
static void roll_feed(roll_state *R, int64_t b, float *x, const float *pred) {
  run_t *r = R->r;
  if (r->ds.has_mask) roll_truth(R, b, R->k);
  sg_train_feed_back(x, pred, r->ds.has_mask ? R->mask : NULL, r->lbatch,
                     r->dopt.history, r->ds.nvars * r->ds.ny * r->ds.nx);
}

/* Under pp (sg_pipe_model_io): micro-batch mb is rollout batch
 * pass * m + mb; the first stage feeds its window, the last stage scores
 * the prediction (kept in R->pred by sg_pipe_model_roll). */
static sg_status roll_pp_input(void *ctx, int mb, sg_var *x) {
  roll_state *R = ctx;
  return pp_input_of(R->r, R->x, mb, x);
}

static sg_status roll_pp_output(void *ctx, sg_tape_t tape, int mb, sg_var *y,
                                sg_var **loss) {
  roll_state *R = ctx;
  run_t *r = R->r;
  const int64_t F = r->ds.nvars * r->ds.ny * r->ds.nx, n = r->lbatch,
                W = n * r->dopt.history * F;
  (void)tape;
  (void)y;
  (void)loss;
  return roll_score(R, R->pass * r->micro + mb, R->pred + mb * n * F,
                    R->x0 + mb * W);
}

/* After frame k's run: every micro-batch's prediction (R->pred, on every
 * stage) fed back into its window. */
static sg_status roll_pp_next(void *ctx, int64_t k) {
  roll_state *R = ctx;
  run_t *r = R->r;
  const int64_t F = r->ds.nvars * r->ds.ny * r->ds.nx, n = r->lbatch,
                W = n * r->dopt.history * F;
  for (int64_t mb = 0; mb < r->micro; ++mb)
    roll_feed(R, R->pass * r->micro + mb, R->x + mb * W, R->pred + mb * n * F);
  R->k = k + 1;
  return SG_OK;
}

/* The rollout batches through the pipeline, m at a time: one forward-only
 * run per frame (sg_pipe_model_roll: the predictions sent from the last
 * stage to the others; the first feeds them back). Collective. */
static sg_status roll_pp(roll_state *R, int64_t nb) {
  sg_status st = SG_OK;
  run_t *r = R->r;
  const int64_t F = r->ds.nvars * r->ds.ny * r->ds.nx, n = r->lbatch,
                W = n * r->dopt.history * F;
  const sg_pipe_model_io io = {r->model, NULL, roll_pp_input, roll_pp_output,
                               R};
  for (R->pass = 0; R->pass * r->micro < nb; ++R->pass) {
    for (int64_t mb = 0; mb < r->micro; ++mb)
      roll_start(R, R->pass * r->micro + mb, R->x + mb * W, R->x0 + mb * W);
    R->k = 0;
    SG_TRY(sg_pipe_model_roll(r->pipe, &io, R->steps, SG_DTYPE_F32, n * F,
                              R->pred, roll_pp_next, R));
  }
fail:
  return st;
}

/* Autoregressive rollout on the test series (sample datasets): from the
 * first `history` frames, predict the next frame, feed it back
 * (sg_train_feed_back, as multi-step training does), `steps` times;
 * rel_out[i * steps + k] is the mean relative L2 at lead k + 1 (frame
 * history - 1 + (k + 1) * lead) of the model (i = EV_MODEL) and of the
 * baselines: persistence (the last input frame) and climatology;
 * rel_out[EV_N * steps] the model's relative L2 over all `steps` frames at
 * once per example, mean over the examples (the FNO paper's metric). Under
 * pp the frames run forward through the stages, the last stage scores
 * them. */
sg_status sg_train_rollout(run_t *r, int64_t steps, double *rel_out) {
  sg_status st = SG_OK;
  const int64_t F = r->ds.nvars * r->ds.ny * r->ds.nx, H = r->dopt.history,
                T = r->ds.nframes, L = r->dopt.lead,
                nmb = r->pipe ? r->micro : 1, na = EV_N * steps + 2;
  const int64_t nb = (r->dopt.test_samples + r->ebatch - 1) / r->ebatch;
  roll_state R = {.r = r, .steps = steps};
  R.acc = calloc((size_t)na, sizeof *R.acc);
  /* under pp the last pass may run up to nmb - 1 batches past nb */
  R.seq = calloc((size_t)((nb + nmb) * 2 * r->lbatch), sizeof *R.seq);
  R.x = malloc((size_t)(nmb * r->lbatch * H * F + 1) * sizeof *R.x);
  R.x0 = malloc((size_t)(nmb * r->lbatch * H * F + 1) * sizeof *R.x0);
  R.pred = malloc((size_t)(nmb * r->lbatch * F + 1) * sizeof *R.pred);
  R.phys = malloc((size_t)(r->lbatch * F + 1) * sizeof *R.phys);
  R.truth = malloc((size_t)(r->lbatch * F + 1) * sizeof *R.truth);
  R.mask = malloc((size_t)(r->lbatch * F + 1) * sizeof *R.mask);
  R.ex = malloc((size_t)r->lbatch * sizeof *R.ex);
  if (!R.acc || !R.seq || !R.x || !R.x0 || !R.pred || !R.phys || !R.truth ||
      !R.mask || !R.ex)
    SG_RAISE(SG_ERR_ALLOC, "out of memory");
  if (r->ds.climate)
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "rollout needs a sample dataset (sample, time, y, x)");
  if (H - 1 + steps * L >= T)
    SG_RAISE(
        SG_ERR_CONFIG,
        "rollout of %lld frames (lead %lld) after %lld history frames exceeds the %lld frames",
        (long long)steps, (long long)L, (long long)H, (long long)T);
  if (r->pipe) SG_TRY(roll_pp(&R, nb));
  for (int64_t b = 0; b < nb && !r->pipe; ++b) {
    roll_start(&R, b, R.x, R.x0);
    for (R.k = 0; R.k < steps; ++R.k) {
      SG_TRY(sg_train_predict(r, R.x, R.pred));
      SG_TRY(roll_score(&R, b, R.pred, R.x0));
      roll_feed(&R, b, R.x, R.pred);
    }
  }
  if (r->data && sg_group_size(r->data) > 1)
    SG_TRY(sg_allreduce_det(r->data, R.acc, R.acc, na, SG_DTYPE_F64,
                            SG_REDUCE_SUM));
  if (r->pipe) SG_TRY(sg_pipe_bcast_last(r->pipe, R.acc, na, SG_DTYPE_F64));
  const double cnt = R.acc[EV_N * steps];
  for (int64_t i = 0; i < EV_N * steps; ++i)
    rel_out[i] = cnt > 0 ? R.acc[i] / cnt : 0.0;
  rel_out[EV_N * steps] = cnt > 0 ? R.acc[EV_N * steps + 1] / cnt : 0.0;
fail:
  free(R.acc);
  free(R.seq);
  free(R.x);
  free(R.x0);
  free(R.pred);
  free(R.phys);
  free(R.truth);
  free(R.mask);
  free(R.ex);
  return st;
}
