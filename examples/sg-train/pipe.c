/* sg-train — pipeline parallelism (a "pp" mesh dim; docs/pipeline.md).
 *
 * The model is cut into the pieces of its table (sg_model_nblocks); each
 * stage builds the whole model on its stage mesh (the mesh without pp) but
 * its plan holds only its pieces' parameters, and strategies/pipeline.c
 * runs the schedule. This file turns the config keys into the runtime's
 * settings and supplies the stage's forward (data in on the first stage,
 * the loss on the last). */
#include "train.h"

#include "sg_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sg_train_pp_on(sg_mesh_t mesh) { return sg_mesh_find_dim(mesh, "pp") >= 0; }

/* Keys that only a pipeline reads, and what the pipeline does not combine
 * with yet; the same verdict on every rank (config only). Not collective. */
sg_status sg_train_pp_check(sg_kv_t kv, sg_mesh_t mesh) {
  sg_status st = SG_OK;
  sg_pp_kind kind;
  SG_TRY(sg_pp_kind_parse(sg_kv_str(kv, "pp_schedule"), &kind));
  if (sg_kv_int(kv, "microbatches") < 1)
    SG_RAISE(SG_ERR_CONFIG, "microbatches must be >= 1, not %lld",
             (long long)sg_kv_int(kv, "microbatches"));
  if (sg_kv_int(kv, "pp_virtual") < 0)
    SG_RAISE(SG_ERR_CONFIG,
             "pp_virtual must be >= 1 (0: the schedule's default), not %lld",
             (long long)sg_kv_int(kv, "pp_virtual"));
  if (!sg_train_pp_on(mesh)) {
    if (sg_kv_int(kv, "microbatches") > 1)
      SG_RAISE(
          SG_ERR_CONFIG,
          "microbatches = %lld needs a 'pp' mesh dim (without a pipeline use grad_accum)",
          (long long)sg_kv_int(kv, "microbatches"));
    return SG_OK;
  }
  if (sg_kv_int(kv, "grad_accum") != 1)
    SG_RAISE(
        SG_ERR_CONFIG,
        "grad_accum = %lld with pp: the pipeline's micro-batches are set by microbatches",
        (long long)sg_kv_int(kv, "grad_accum"));
fail:
  return st;
}

/* pp_split: "auto" (*use = 2: by measured cost), "even" (0: split = NULL,
 * balanced by count) or n increasing block indices (1). */
static sg_status parse_split(const char *s, int n, int *split, int *use) {
  sg_status st = SG_OK;
  *use = !strcmp(s, "auto") ? 2 : strcmp(s, "even") != 0;
  if (*use != 1) return SG_OK;
  int k = 0;
  const char *p = s;
  while (*p) {
    char *end = NULL;
    long v = strtol(p, &end, 10);
    if (end == p || (*end && *end != ',') || v < 0 || v > 1000000)
      SG_RAISE(
          SG_ERR_CONFIG,
          "pp_split must be auto, even or a list of block indices i,j,..., not '%s'",
          s);
    if (k < n) split[k] = (int)v;
    ++k;
    p = *end ? end + 1 : end;
    if (*end && !*p)
      SG_RAISE(SG_ERR_CONFIG, "pp_split '%s' ends with a comma", s);
  }
  if (k != n)
    SG_RAISE(
        SG_ERR_CONFIG,
        "pp_split '%s' lists %d split point(s); %d pieces (pp x pp_virtual) need %d",
        s, k, n + 1, n);
fail:
  return st;
}

/* pp_split = auto: the pieces' measured costs and the split that balances
 * them over the nv virtual stages (the same on every rank). Collective. */
static sg_status split_by_cost(sg_mesh_t mesh, sg_model_t model, int64_t batch,
                               int64_t cin, int nv, int *split) {
  sg_status st = SG_OK;
  const int n = sg_model_nblocks(model);
  double *cost = calloc((size_t)n, sizeof *cost);
  char buf[512];
  int len = 0;
  st = cost ? SG_OK
            : sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
  SG_TRY(sg_agree(sg_mesh_comm(mesh), st));
  SG_TRY(sg_pipe_model_piece_costs(mesh, model, batch, cin, 3, cost));
  SG_TRY(sg_pp_split_by_cost(n, cost, nv, split));
  for (int k = 0; k < nv - 1 && len < (int)sizeof buf - 16; ++k)
    len += snprintf(buf + len, sizeof buf - (size_t)len, "%s%d", k ? "," : "",
                    split[k]);
  buf[len] = '\0';
  sg_log_info("pipeline: pp_split auto = %s (piece forward times measured, "
              "%d pieces, %d virtual stages)",
              nv > 1 ? buf : "-", n, nv);
fail:
  free(cost);
  return st;
}

sg_status sg_train_pp_create(sg_kv_t kv, sg_mesh_t mesh, sg_mesh_t stage_mesh,
                             sg_model_t model, const char *model_name,
                             int64_t batch, int64_t cin, sg_pipe_t *pipe) {
  sg_status st = SG_OK;
  int *split = NULL, use = 0;
  sg_pipe_config cfg = {.m = (int)sg_kv_int(kv, "microbatches"),
                        .v = (int)sg_kv_int(kv, "pp_virtual"),
                        .nblocks = sg_model_nblocks(model),
                        .stage_mesh = stage_mesh};
  /* every check before the create reads the config only: the same verdict
   * on every rank, so either all ranks reach the (collective) create or
   * none does */
  if (cfg.nblocks <= 0)
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "model %s has no pipeline pieces yet (every model of the zoo "
             "has them; a registered model needs nblocks, block_params and "
             "forward_blocks)",
             model_name);
  SG_TRY(sg_pp_kind_parse(sg_kv_str(kv, "pp_schedule"), &cfg.kind));
  const int p = sg_mesh_dim_size(mesh, sg_mesh_find_dim(mesh, "pp"));
  const int nv = p * (cfg.v > 0                       ? cfg.v
                      : cfg.kind == SG_PP_INTERLEAVED ? 2
                                                      : 1);
  split = calloc((size_t)nv, sizeof *split);
  if (!split) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  SG_TRY(parse_split(sg_kv_str(kv, "pp_split"), nv - 1, split, &use));
  /* more virtual stages than pieces: sg_pipe_create says so */
  if (use == 2 && nv <= cfg.nblocks)
    SG_TRY(split_by_cost(mesh, model, batch, cin, nv, split));
  cfg.split = use == 1 || (use == 2 && nv <= cfg.nblocks) ? split : NULL;
  SG_TRY(sg_pipe_create(mesh, &cfg, pipe));
fail:
  free(split);
  return st;
}

/* Micro-batch mb's targets (K of them under multi-step training) and
 * their masks: step k's at y_of(S, mb) + k * lbatch * cout * plane. */
static int64_t y_of(const sg_train_pp_step *S, int mb) {
  const int64_t K = S->steps > 1 ? S->steps : 1;
  return mb * K * S->lbatch * S->cout * S->ds->ny * S->ds->nx;
}

/* Micro-batch mb's data (every buffer; each stage uses what it needs). */
static sg_status pp_fill(void *ctx, int mb) {
  sg_status st = SG_OK;
  sg_train_pp_step *S = ctx;
  const int64_t plane = S->ds->ny * S->ds->nx, n = S->lbatch;
  sg_example ex[256];
  if (n > 256)
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "pp supports a micro-batch of at most 256 samples per rank");
  for (int64_t j = 0; j < n; ++j) ex[j] = S->train[S->perm[mb * n + j]];
  float *x = S->x + mb * n * S->cin * plane;
  if (S->steps > 1)
    sg_dataset_fill_steps(S->ds, S->dopt, ex, n, S->steps, x,
                          S->y + y_of(S, mb), S->mask + y_of(S, mb));
  else
    sg_dataset_fill(S->ds, S->dopt, ex, n, x, S->y + y_of(S, mb),
                    S->mask + y_of(S, mb));
fail:
  return st;
}

/* The first stage's input of micro-batch mb. */
static sg_status pp_input(void *ctx, int mb, sg_var *x) {
  sg_train_pp_step *S = ctx;
  const int64_t n = S->lbatch, xs[4] = {n, S->cin, S->ds->ny, S->ds->nx};
  return sg_var_init(x, "x", SG_DTYPE_F32, 4, xs,
                     S->x + mb * n * S->cin * S->ds->ny * S->ds->nx, 0);
}

/* The last stage's loss of micro-batch mb, as micro_step in main.c
 * computes it. */
static sg_status pp_loss(void *ctx, sg_tape_t tape, int mb, sg_var *y,
                         sg_var **loss) {
  sg_status st = SG_OK;
  sg_train_pp_step *S = ctx;
  const int64_t n = S->lbatch, plane = S->ds->ny * S->ds->nx,
                ys[4] = {n, S->cout, S->ds->ny, S->ds->nx};
  /* the last step's targets (one-step training: the only ones) */
  const int64_t yo = y_of(S, mb) +
                     (S->steps > 1 ? S->steps - 1 : 0) * n * S->cout * plane;
  SG_TRY(sg_var_init(&S->vy[mb], "y", SG_DTYPE_F32, 4, ys, S->y + yo, 0));
  SG_TRY(sg_var_init(&S->vm[mb], "mask", SG_DTYPE_F32, 4, ys, S->mask + yo, 0));
  SG_TRY(sg_model_mark(S->model, &S->vy[mb]));
  if (S->has_mask) SG_TRY(sg_model_mark(S->model, &S->vm[mb]));
  /* the loss weights: the mask times the latitude weights (either alone) */
  sg_var *w = S->has_mask ? &S->vm[mb] : NULL;
  if (S->weight) {
    SG_TRY(sg_model_mark(S->model, S->weight));
    if (w)
      SG_TRY(sg_ag_binary(tape, SG_BINARY_MUL, w, S->weight, &w));
    else
      w = S->weight;
  }
  const sg_dist_loss_ctx lc = {S->domain, S->data, S->gbatch};
  SG_TRY(sg_ag_dist_loss(tape, S->loss, y, &S->vy[mb], w, &lc, loss));
  if (S->loss == SG_LOSS_MSE && S->micro > 1)
    SG_TRY(sg_ag_scale(tape, 1.0 / (double)S->micro, *loss, loss));
fail:
  return st;
}

/* Pushforward's feedback after forward-only step k: every micro-batch's
 * prediction (S->pred, on every stage) into its window, times the mask of
 * step k's target (the data hold 0 at masked points; sg_train_feed_back). */
static sg_status pp_feed(void *ctx, int64_t k) {
  sg_train_pp_step *S = ctx;
  const int64_t plane = S->ds->ny * S->ds->nx, n = S->lbatch,
                F = S->nvars * plane;
  for (int mb = 0; mb < S->micro; ++mb)
    sg_train_feed_back(S->x + mb * n * S->cin * plane, S->pred + mb * n * F,
                       S->has_mask ? S->mask + y_of(S, mb) + k * n * F : NULL,
                       n, S->history, F);
  return SG_OK;
}

/* Pushforward (K > 1): every micro-batch's data, then steps 1 .. K-1
 * without a tape through the stages (sg_pipe_model_roll). Collective. */
static sg_status pp_pushforward(sg_train_pp_step *S) {
  sg_status st = SG_OK;
  const sg_pipe_model_io io = {S->model, NULL, pp_input, NULL, S};
  for (int mb = 0; mb < S->micro; ++mb) SG_TRY(pp_fill(S, mb));
  SG_TRY(sg_pipe_model_roll(S->pipe, &io, S->steps - 1, SG_DTYPE_F32,
                            S->lbatch * S->nvars * S->ds->ny * S->ds->nx,
                            S->pred, pp_feed, S));
fail:
  return st;
}

sg_status sg_train_pp_run(sg_train_pp_step *S, double *loss) {
  sg_status st = SG_OK;
  sg_pipe_model_io io = {S->model, pp_fill, pp_input, pp_loss, S};
  if (S->steps > 1) {
    SG_TRY(pp_pushforward(S));
    io.fill = NULL; /* filled and rolled forward above */
  }
  st = sg_pipe_model_run(S->pipe, &io, loss);
fail:
  for (int k = 0; k < S->micro; ++k) {
    sg_var_release(&S->vy[k]);
    sg_var_release(&S->vm[k]);
  }
  return st;
}
