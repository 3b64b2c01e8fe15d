/* sg-train — evaluation: the test relative L2 (with predictions written
 * on request) and the autoregressive rollout, on one process, any mesh, or
 * forward through a pipeline's stages (sg_pipe_forward: the first stage
 * feeds the inputs, the last scores the outputs). */
#include "train.h"

#include "sg_nc.h"

#include <stdlib.h>
#include <string.h>

/* Predict a batch (no tape kept): pred gets the model's output in physical
 * units, masked; yb is turned into physical units too. */
static sg_status predict_batch(run_t *r, const float *x, float *pred) {
  sg_status st = SG_OK;
  const int64_t V = r->ds.nvars, plane = r->ds.ny * r->ds.nx;
  int64_t xs[4] = {r->lbatch, r->cin, r->ds.ny, r->ds.nx};
  sg_var xv, *y = NULL;
  memset(&xv, 0, sizeof xv);
  int prev = sg_tape_set_grad_enabled(r->tape, 0);
  SG_TRY(sg_var_init(&xv, "x", SG_DTYPE_F32, 4, xs, (void *)x, 0));
  SG_TRY(sg_model_forward(r->model, r->tape, &xv, &y));
  memcpy(pred, y->value.data, (size_t)(r->lbatch * V * plane) * sizeof *pred);
fail:
  sg_tape_clear(r->tape);
  sg_tape_set_grad_enabled(r->tape, prev);
  sg_var_release(&xv);
  return st;
}

/* normalised -> physical units, masked */
static void to_physical(run_t *r, float *a, const float *mask) {
  const int64_t V = r->ds.nvars, plane = r->ds.ny * r->ds.nx;
  for (int64_t j = 0; j < r->lbatch; ++j)
    for (int64_t v = 0; v < V; ++v) {
      float *p = a + (j * V + v) * plane;
      const float *mk = mask + (j * V + v) * plane;
      for (int64_t i = 0; i < plane; ++i)
        p[i] = (float)(p[i] * r->ds.std[v] + r->ds.mean[v]) * mk[i];
    }
}

/* An evaluation in progress: the predictions file (NULL: none), the sums
 * of the relative L2 and the count of valid examples, scratch. */
typedef struct eval_state {
  run_t *r;
  sg_nc_t f;
  int vp, vt;
  double sum, cnt;
  double *rel;
  sg_example *ex;
  float *pred;
  int64_t pass; /* under pp: the forward-only run (m evaluation batches) */
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
  SG_TRY(sg_nc_def_dim(E->f, "channel", r->ds.nvars, &id));
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

/* Score the predictions of one batch (normalised; y, mask from eval_fill):
 * relative L2 in physical units over the domain, the valid examples
 * summed, predictions and targets written. Collective over the stage. */
static sg_status eval_score(eval_state *E, int64_t first, int64_t valid,
                            float *pred, float *y, const float *mask) {
  sg_status st = SG_OK;
  run_t *r = E->r;
  const int64_t V = r->ds.nvars, plane = r->ds.ny * r->ds.nx;
  const sg_dist_loss_ctx lc = {r->domain, r->data, r->ebatch};
  to_physical(r, pred, mask);
  to_physical(r, y, mask);
  SG_TRY(sg_dist_rel_l2_ctx(SG_DTYPE_F32, r->lbatch, V * plane, pred, y, NULL,
                            &lc, E->rel));
  for (int64_t j = 0; j < valid; ++j) E->sum += E->rel[j];
  E->cnt += (double)valid;
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

/* Under pp (sg_pipe_forward_fn): micro-batch mb of a forward-only run is
 * evaluation batch pass * m + mb; the first stage reads its inputs, the
 * last scores the model's output. */
static sg_status eval_pp_forward(sg_tape_t tape, void *ctx, int mb, int chunk,
                                 sg_var *in, sg_var **out) {
  sg_status st = SG_OK;
  eval_state *E = ctx;
  run_t *r = E->r;
  const int64_t plane = r->ds.ny * r->ds.nx, n = r->lbatch;
  float *x = r->xb + mb * n * r->cin * plane,
        *y = r->yb + mb * n * r->cout * plane,
        *m = r->mb + mb * n * r->cout * plane;
  int first, count;
  sg_pipe_blocks(r->pipe, chunk, &first, &count);
  const int last = first + count == sg_model_nblocks(r->model);
  int64_t valid = 0, ex0 = 0;
  if (!in || last)
    valid = eval_fill(r, E->pass * r->micro + mb, E->ex, x, y, m, &ex0);
  if (!in) {
    const int64_t xs[4] = {n, r->cin, r->ds.ny, r->ds.nx};
    SG_TRY(sg_var_init(&r->pps.vx[mb], "x", SG_DTYPE_F32, 4, xs, x, 0));
    in = &r->pps.vx[mb];
  }
  SG_TRY(sg_model_forward_blocks(r->model, tape, first, count, in, out));
  if (last) {
    memcpy(E->pred, (*out)->value.data,
           (size_t)(n * r->cout * plane) * sizeof *E->pred);
    SG_TRY(eval_score(E, ex0, valid, E->pred, y, m));
  }
fail:
  return st;
}

/* The evaluation batches through the pipeline: forward-only runs of m
 * batches each, scored on the last stage. Collective. */
static sg_status eval_pp(eval_state *E, int64_t nb) {
  sg_status st = SG_OK;
  run_t *r = E->r;
  for (E->pass = 0; E->pass * r->micro < nb; ++E->pass) {
    st = sg_pipe_forward(r->pipe, eval_pp_forward, E);
    for (int64_t k = 0; k < r->micro; ++k) sg_var_release(&r->pps.vx[k]);
    SG_TRY(st);
  }
fail:
  return st;
}

/* Mean relative L2 over the test examples (one step ahead), in physical
 * units, every data rank taking its share; with `out` the predictions and
 * targets are written to a NetCDF file (example, channel, y, x). Under pp
 * the batches run forward through the stages and the last stage scores
 * them (and writes the file); every rank gets the result. */
sg_status sg_train_evaluate(run_t *r, const char *out, double *rel_out) {
  sg_status st = SG_OK;
  const int64_t V = r->ds.nvars, plane = r->ds.ny * r->ds.nx;
  eval_state E = {.r = r, .vp = -1, .vt = -1};
  E.rel = malloc((size_t)r->lbatch * sizeof *E.rel);
  E.ex = malloc((size_t)r->lbatch * sizeof *E.ex);
  E.pred = malloc((size_t)(r->lbatch * V * plane + 1) * sizeof *E.pred);
  const int scorer = !r->pipe ||
                     sg_pipe_stage(r->pipe) == sg_pipe_nstages(r->pipe) - 1;
  if (!E.rel || !E.ex || !E.pred)
    st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
  else if (out && *out && scorer) /* under pp the last stage writes */
    st = eval_open(&E, r->pipe ? sg_mesh_comm(r->smesh) : MPI_COMM_WORLD, out);
  SG_TRY(sg_agree(MPI_COMM_WORLD, st));
  const int64_t nb = (r->ntest + r->ebatch - 1) / r->ebatch;
  if (r->pipe) SG_TRY(eval_pp(&E, nb));
  for (int64_t b = 0; b < nb && !r->pipe; ++b) {
    int64_t first;
    const int64_t valid = eval_fill(r, b, E.ex, r->xb, r->yb, r->mb, &first);
    SG_TRY(predict_batch(r, r->xb, E.pred));
    SG_TRY(eval_score(&E, first, valid, E.pred, r->yb, r->mb));
  }
  double sc[2] = {E.sum, E.cnt};
  if (r->data && sg_group_size(r->data) > 1)
    SG_TRY(sg_allreduce_det(r->data, sc, sc, 2, SG_DTYPE_F64, SG_REDUCE_SUM));
  if (r->pipe) SG_TRY(sg_pipe_bcast_last(r->pipe, sc, 2, SG_DTYPE_F64));
  *rel_out = sc[1] > 0 ? sc[0] / sc[1] : 0.0;
  st = E.f ? sg_nc_close(&E.f) : SG_OK;
  if (r->pipe) st = sg_agree(MPI_COMM_WORLD, st);
fail:
  if (E.f) sg_nc_discard(&E.f);
  free(E.rel);
  free(E.ex);
  free(E.pred);
  return st;
}

/* A rollout in progress: per micro-batch (several under pp) its window of
 * input frames and its latest prediction; the sums per frame. */
typedef struct roll_state {
  run_t *r;
  int64_t steps, k, pass; /* frames; the one predicted now; under pp the run */
  double *acc, cnt, *rel;
  float *x, *pred;            /* windows, predictions: nmb of each */
  float *phys, *truth, *mask; /* one batch */
  sg_example ex[64];
} roll_state;

/* This data rank's test series of rollout batch b (padded with the last),
 * their inputs starting at frame k; returns how many are real. */
static int64_t roll_examples(run_t *r, int64_t b, int64_t k, sg_example *ex) {
  const int64_t nser = r->dopt.test_samples, s0 = r->ds.nseries - nser;
  int64_t valid = 0;
  for (int64_t j = 0; j < r->lbatch; ++j) {
    const int64_t g = b * r->ebatch + r->cdp * r->lbatch + j;
    ex[j].series = s0 + (g < nser ? g : nser - 1);
    ex[j].t0 = k;
    valid += g < nser;
  }
  return valid;
}

/* The first window of batch b into x (frames 0 .. history - 1). */
static void roll_start(roll_state *R, int64_t b, float *x) {
  run_t *r = R->r;
  roll_examples(r, b, 0, R->ex);
  sg_dataset_fill(&r->ds, &r->dopt, R->ex, r->lbatch, x, R->truth, R->mask);
}

/* Score batch b's prediction of frame history + k: acc[k] += the relative
 * L2 (physical units) of its real series. Collective over the stage. */
static sg_status roll_score(roll_state *R, int64_t b, const float *pred) {
  sg_status st = SG_OK;
  run_t *r = R->r;
  const int64_t n = r->lbatch * r->ds.nvars * r->ds.ny * r->ds.nx;
  const sg_dist_loss_ctx lc = {r->domain, r->data, r->ebatch};
  const int64_t valid = roll_examples(r, b, R->k, R->ex);
  sg_dataset_fill(&r->ds, &r->dopt, R->ex, r->lbatch, r->xb, R->truth, R->mask);
  memcpy(R->phys, pred, (size_t)n * sizeof *R->phys);
  to_physical(r, R->phys, R->mask);
  to_physical(r, R->truth, R->mask);
  SG_TRY(sg_dist_rel_l2_ctx(SG_DTYPE_F32, r->lbatch, n / r->lbatch, R->phys,
                            R->truth, NULL, &lc, R->rel));
  for (int64_t j = 0; j < valid; ++j) R->acc[R->k] += R->rel[j];
  if (R->k == 0) R->cnt += (double)valid;
fail:
  return st;
}

/* Shift the window and append the (normalised) prediction. */
static void roll_shift(run_t *r, float *x, const float *pred) {
  const int64_t F = r->ds.nvars * r->ds.ny * r->ds.nx, H = r->dopt.history;
  for (int64_t j = 0; j < r->lbatch; ++j) {
    float *xj = x + j * H * F;
    memmove(xj, xj + F, (size_t)((H - 1) * F) * sizeof *xj);
    memcpy(xj + (H - 1) * F, pred + j * F, (size_t)F * sizeof *xj);
  }
}

/* Under pp (sg_pipe_forward_fn): micro-batch mb is rollout batch
 * pass * m + mb; the first stage feeds its window, the last stage keeps
 * and scores the prediction. */
static sg_status roll_pp_forward(sg_tape_t tape, void *ctx, int mb, int chunk,
                                 sg_var *in, sg_var **out) {
  sg_status st = SG_OK;
  roll_state *R = ctx;
  run_t *r = R->r;
  const int64_t F = r->ds.nvars * r->ds.ny * r->ds.nx, n = r->lbatch;
  int first, count;
  sg_pipe_blocks(r->pipe, chunk, &first, &count);
  if (!in) {
    const int64_t xs[4] = {n, r->cin, r->ds.ny, r->ds.nx};
    SG_TRY(sg_var_init(&r->pps.vx[mb], "x", SG_DTYPE_F32, 4, xs,
                       R->x + mb * n * r->cin * r->ds.ny * r->ds.nx, 0));
    in = &r->pps.vx[mb];
  }
  SG_TRY(sg_model_forward_blocks(r->model, tape, first, count, in, out));
  if (first + count == sg_model_nblocks(r->model)) {
    float *pred = R->pred + mb * n * F;
    memcpy(pred, (*out)->value.data, (size_t)(n * F) * sizeof *pred);
    SG_TRY(roll_score(R, R->pass * r->micro + mb, pred));
  }
fail:
  return st;
}

/* The rollout batches through the pipeline, m at a time: one forward-only
 * run per frame, the predictions sent from the last stage to the others
 * (the first feeds them back). Collective. */
static sg_status roll_pp(roll_state *R, int64_t nb) {
  sg_status st = SG_OK;
  run_t *r = R->r;
  const int64_t F = r->ds.nvars * r->ds.ny * r->ds.nx, n = r->lbatch;
  for (R->pass = 0; R->pass * r->micro < nb; ++R->pass) {
    for (int64_t mb = 0; mb < r->micro; ++mb)
      roll_start(R, R->pass * r->micro + mb,
                 R->x + mb * n * r->cin * r->ds.ny * r->ds.nx);
    for (R->k = 0; R->k < R->steps; ++R->k) {
      st = sg_pipe_forward(r->pipe, roll_pp_forward, R);
      for (int64_t k = 0; k < r->micro; ++k) sg_var_release(&r->pps.vx[k]);
      SG_TRY(st);
      SG_TRY(
          sg_pipe_bcast_last(r->pipe, R->pred, r->micro * n * F, SG_DTYPE_F32));
      for (int64_t mb = 0; mb < r->micro; ++mb)
        roll_shift(r, R->x + mb * n * r->cin * r->ds.ny * r->ds.nx,
                   R->pred + mb * n * F);
    }
  }
fail:
  return st;
}

/* Autoregressive rollout on the test series (sample datasets): from the
 * first `history` frames, predict the next frame, feed it back, `steps`
 * times; rel[k] is the mean relative L2 of frame history + k. Under pp the
 * frames run forward through the stages, the last stage scores them. */
sg_status sg_train_rollout(run_t *r, int64_t steps, double *rel_out) {
  sg_status st = SG_OK;
  const int64_t F = r->ds.nvars * r->ds.ny * r->ds.nx, H = r->dopt.history,
                T = r->ds.nframes, nmb = r->pipe ? r->micro : 1;
  roll_state R = {.r = r, .steps = steps};
  R.rel = malloc((size_t)r->lbatch * sizeof *R.rel);
  R.acc = calloc((size_t)steps + 1, sizeof *R.acc);
  R.x = malloc((size_t)(nmb * r->lbatch * H * F + 1) * sizeof *R.x);
  R.pred = malloc((size_t)(nmb * r->lbatch * F + 1) * sizeof *R.pred);
  R.phys = malloc((size_t)(r->lbatch * F + 1) * sizeof *R.phys);
  R.truth = malloc((size_t)(r->lbatch * F + 1) * sizeof *R.truth);
  R.mask = malloc((size_t)(r->lbatch * F + 1) * sizeof *R.mask);
  if (!R.rel || !R.acc || !R.x || !R.pred || !R.phys || !R.truth || !R.mask)
    SG_RAISE(SG_ERR_ALLOC, "out of memory");
  if (r->ds.climate)
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "rollout needs a sample dataset (sample, time, y, x)");
  if (H + steps > T)
    SG_RAISE(
        SG_ERR_CONFIG,
        "rollout of %lld frames after %lld history frames exceeds the %lld frames",
        (long long)steps, (long long)H, (long long)T);
  if (r->lbatch > 64)
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "rollout supports a local batch of at most 64");
  const int64_t nb = (r->dopt.test_samples + r->ebatch - 1) / r->ebatch;
  if (r->pipe) SG_TRY(roll_pp(&R, nb));
  for (int64_t b = 0; b < nb && !r->pipe; ++b) {
    roll_start(&R, b, R.x);
    for (R.k = 0; R.k < steps; ++R.k) {
      SG_TRY(predict_batch(r, R.x, R.pred));
      SG_TRY(roll_score(&R, b, R.pred));
      roll_shift(r, R.x, R.pred);
    }
  }
  R.acc[steps] = R.cnt;
  if (r->data && sg_group_size(r->data) > 1)
    SG_TRY(sg_allreduce_det(r->data, R.acc, R.acc, steps + 1, SG_DTYPE_F64,
                            SG_REDUCE_SUM));
  if (r->pipe)
    SG_TRY(sg_pipe_bcast_last(r->pipe, R.acc, steps + 1, SG_DTYPE_F64));
  for (int64_t k = 0; k < steps; ++k)
    rel_out[k] = R.acc[steps] > 0 ? R.acc[k] / R.acc[steps] : 0.0;
fail:
  free(R.rel);
  free(R.acc);
  free(R.x);
  free(R.pred);
  free(R.phys);
  free(R.truth);
  free(R.mask);
  return st;
}
