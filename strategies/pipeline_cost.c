/* shardgrid — pipeline split points balanced by cost (docs/pipeline.md,
 * "Blocks per stage"): the pieces' measured costs and the contiguous
 * partition that minimises the most expensive virtual stage. */
#include "sg_pipeline.h"

#include "sg_comm.h"
#include "sg_rng.h"
#include "sg_trace.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

sg_status sg_pp_split_by_cost(int nblocks, const double *cost, int parts,
                              int *split) {
  sg_status st = SG_OK;
  double *best = NULL; /* best[k * (n + 1) + i]: blocks 0..i-1 in k parts */
  int *cut = NULL;
  const int n = nblocks;
  if (!cost || (parts > 1 && !split) || parts < 1 || n < parts)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_pp_split_by_cost: %d blocks into %d parts (each needs one)", n,
             parts);
  for (int i = 0; i < n; ++i)
    if (!(cost[i] >= 0.0))
      SG_RAISE(SG_ERR_INVALID_ARG,
               "sg_pp_split_by_cost: block %d has cost %g (>= 0 needed)", i,
               cost[i]);
  best = malloc((size_t)(parts + 1) * (size_t)(n + 1) * sizeof *best);
  cut = malloc((size_t)(parts + 1) * (size_t)(n + 1) * sizeof *cut);
  if (!best || !cut) SG_RAISE(SG_ERR_ALLOC, "out of memory");
#define B(k, i) best[(size_t)(k) * (size_t)(n + 1) + (size_t)(i)]
#define C(k, i) cut[(size_t)(k) * (size_t)(n + 1) + (size_t)(i)]
  for (int i = 0; i <= n; ++i) {
    double sum = 0.0;
    for (int j = 0; j < i; ++j) sum += cost[j];
    B(1, i) = i > 0 ? sum : DBL_MAX, C(1, i) = 0;
  }
  for (int k = 2; k <= parts; ++k)
    for (int i = 0; i <= n; ++i) {
      B(k, i) = DBL_MAX, C(k, i) = -1;
      double tail = 0.0; /* blocks j .. i-1, the k-th part */
      for (int j = i - 1; j >= k - 1; --j) {
        tail += cost[j];
        const double m = B(k - 1, j) > tail ? B(k - 1, j) : tail;
        if (m < B(k, i)) B(k, i) = m, C(k, i) = j; /* ties: the later cut */
      }
    }
  for (int k = parts, i = n; k > 1; --k) {
    i = C(k, i);
    split[k - 2] = i;
  }
#undef B
#undef C
fail:
  free(best);
  free(cut);
  return st;
}

/* One timed forward of every piece (gradients recorded, as in training)
 * into t[0..n), the tape cleared after. Collective over the model's mesh. */
static sg_status time_pieces(sg_model_t model, sg_tape_t tape, sg_var *x, int n,
                             double *t) {
  sg_status st = SG_OK;
  sg_bundle io = {.n = 1, .v = {x}};
  for (int k = 0; k < n; ++k) {
    const double t0 = sg_wtime();
    SG_TRY(sg_model_forward_blocks(model, tape, k, 1, &io));
    t[k] = sg_wtime() - t0;
  }
fail:
  sg_tape_clear(tape);
  return st;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

sg_status sg_pipe_model_piece_costs(sg_mesh_t mesh, sg_model_t model,
                                    int64_t batch, int64_t cin, int reps,
                                    double *cost) {
  sg_status st = SG_OK;
  const int n = sg_model_nblocks(model);
  const int64_t np = sg_model_param_count(model);
  int64_t y0, ny, x0, nx;
  sg_model_box(model, &y0, &ny, &x0, &nx);
  const int64_t xs[4] = {batch, cin, ny, nx}, nxel = batch * cin * ny * nx;
  float *params = calloc((size_t)np + 1, sizeof *params),
        *grads = calloc((size_t)np + 1, sizeof *grads),
        *xd = malloc(((size_t)nxel + 1) * sizeof *xd);
  double *t = calloc((size_t)(n * (reps + 1)) + 1, sizeof *t);
  sg_tape_t tape = NULL;
  sg_var x;
  memset(&x, 0, sizeof x);
  if (!mesh || !model || !cost || n < 1 || reps < 1 || batch < 1 || cin < 1)
    st = sg_error_set(
        SG_ERR_INVALID_ARG, __FILE__, __LINE__,
        "sg_pipe_model_piece_costs: a mesh, a model with pieces, batch, cin and "
        "reps >= 1 are required");
  else if (!params || !grads || !xd || !t)
    st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
  SG_TRY(sg_agree(sg_mesh_comm(mesh), st));
  SG_TRY(sg_agree(sg_mesh_comm(mesh), sg_model_bind(model, params, grads)));
  SG_TRY(sg_agree(sg_mesh_comm(mesh), sg_model_init(model, 1)));
  SG_TRY(sg_rng_fill(SG_RNG_NORMAL, 0.0, 1.0, 7, 0, 0, nxel, SG_DTYPE_F32, xd));
  SG_TRY(sg_var_init(&x, "x", SG_DTYPE_F32, 4, xs, xd, 0));
  SG_TRY(sg_tape_create(&tape));
  /* a warm-up, then reps timed runs; a failure on one rank stops all */
  for (int r = 0; r <= reps; ++r)
    SG_TRY(sg_agree(sg_mesh_comm(mesh),
                    time_pieces(model, tape, &x, n, t + (size_t)r * n)));
  for (int k = 0; k < n; ++k) {
    double v[64];
    const int m = reps < 64 ? reps : 64;
    for (int r = 0; r < m; ++r) v[r] = t[(size_t)(r + 1) * n + k];
    qsort(v, (size_t)m, sizeof *v, cmp_double);
    cost[k] = v[m / 2];
  }
  /* the slowest rank's: every rank then computes the same split */
  SG_MPI(MPI_Allreduce(MPI_IN_PLACE, cost, n, MPI_DOUBLE, MPI_MAX,
                       sg_mesh_comm(mesh)));
fail:
  sg_tape_destroy(&tape);
  sg_var_release(&x);
  free(params);
  free(grads);
  free(xd);
  free(t);
  return st;
}
