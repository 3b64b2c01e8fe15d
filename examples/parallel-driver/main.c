/* parallel-driver — a user's own training driver on the parallel plan, in a
 * few calls: a CNN learns a smoothing of a synthetic field, on any mesh the
 * plan supports (dp, fsdp with zero = 1, 2 or 3, h, w; and pp: a pipeline
 * of the model's pieces, 1F1B over M micro-batches), and prints the same
 * losses as one process.
 *
 *   mpiexec -n 4 sg-parallel-driver fsdp=2,h=2 1     # mesh, zero stage
 *   mpiexec -n 4 sg-parallel-driver pp=2,fsdp=2 3
 *
 * The plan (strategies/sg_parallel.h) owns the parameter buffers, the
 * gradient reductions, the global norm, the optimizer step and the
 * checkpoint boxes; the driver only makes data, runs forward and backward,
 * and calls the plan around them. */
#include "sg_comm.h"
#include "sg_dist_loss.h"
#include "sg_model.h"
#include "sg_parallel.h"
#include "sg_pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NY = 12, NX = 10, BATCH = 4, STEPS = 8, M = 2 };

/* Sample s of the global batch at global cell (y, x): input and target. */
static float field(int64_t s, int64_t y, int64_t x) {
  return (float)(sin(0.5 * (double)y + 0.3 * (double)s) *
                 cos(0.4 * (double)x - 0.2 * (double)s));
}
static float target(int64_t s, int64_t y, int64_t x) {
  return 0.5f * field(s, y, x) +
         0.25f * (field(s, (y + 1) % NY, x) + field(s, y, (x + 1) % NX));
}

/* Step t's samples of this data rank (lb of them, from its index) on its
 * box of the grid: inputs into xb, targets into yb. */
static void make_batch(int64_t t, int index, int64_t lb, const int64_t *box,
                       float *xb, float *yb) {
  const int64_t y0 = box[0], ny = box[1], x0 = box[2], nx = box[3];
  for (int64_t j = 0; j < lb; ++j) {
    const int64_t s = (t * BATCH + index * lb + j) % 17; /* sample ids */
    for (int64_t y = 0; y < ny; ++y)
      for (int64_t x = 0; x < nx; ++x) {
        xb[(j * ny + y) * nx + x] = field(s, y0 + y, x0 + x);
        yb[(j * ny + y) * nx + x] = target(s, y0 + y, x0 + x);
      }
  }
}

/* ---- with pp: the stages run the model's pieces (sg_pipeline.h) ---------
 * The driver gives the first stage its micro-batch and the last its loss;
 * sg_pipe_model_run runs the schedule. */
typedef struct pipe_data {
  sg_model_t model;
  float *xb, *yb;
  int64_t shp[4]; /* a micro-batch's (samples, 1, ny, nx) */
  sg_var yv[M];
  sg_dist_loss_ctx lc;
} pipe_data;

static sg_status pd_input(void *ctx, int mb, sg_var *x) {
  pipe_data *d = ctx;
  const int64_t n = d->shp[0] * d->shp[2] * d->shp[3];
  return sg_var_init(x, "x", SG_DTYPE_F32, 4, d->shp, d->xb + mb * n, 0);
}

static sg_status pd_loss(void *ctx, sg_tape_t tape, int mb, sg_var *pred,
                         sg_var **loss) {
  sg_status st = SG_OK;
  pipe_data *d = ctx;
  const int64_t n = d->shp[0] * d->shp[2] * d->shp[3];
  SG_TRY(
      sg_var_init(&d->yv[mb], "y", SG_DTYPE_F32, 4, d->shp, d->yb + mb * n, 0));
  SG_TRY(sg_model_mark(d->model, &d->yv[mb]));
  /* relative L2 summed over the samples / BATCH: micro-batches add up */
  SG_TRY(sg_ag_dist_loss(tape, SG_LOSS_REL_L2, pred, &d->yv[mb], NULL, &d->lc,
                         loss));
fail:
  return st;
}

static sg_status run_pp(sg_mesh_t mesh, const sg_parallel_config *pc) {
  sg_status st = SG_OK;
  sg_mesh_t smesh = NULL;
  sg_pipe_t pipe = NULL;
  sg_parallel_t plan = NULL;
  pipe_data d = {0};
  SG_TRY(sg_pipe_stage_mesh_create(mesh, &smesh));
  sg_parallel_mesh_info mi;
  SG_TRY(sg_parallel_check_mesh(smesh, pc, &mi));
  if (BATCH % (mi.data_size * M))
    SG_RAISE(SG_ERR_CONFIG,
             "batch %d is not divisible by %d data replicas "
             "x %d micro-batches",
             BATCH, mi.data_size, M);
  const int64_t lb = BATCH / mi.data_size;
  sg_group_t domain = NULL, data = NULL;
  SG_TRY(sg_mesh_group(smesh, mi.domain_dims, &domain));
  SG_TRY(sg_mesh_group(smesh, mi.batch_dims, &data));
  sg_model_config mc = sg_model_defaults(SG_MODEL_CNN);
  mc.width = 4, mc.blocks = 1, mc.groups = 2, mc.proj_width = 8;
  SG_TRY(sg_model_create(smesh, &mc, NY, NX, lb / M, &d.model));
  sg_pipe_config cfg = {.kind = SG_PP_1F1B,
                        .m = M,
                        .nblocks = sg_model_nblocks(d.model),
                        .stage_mesh = smesh};
  SG_TRY(sg_pipe_create(mesh, &cfg, &pipe));
  /* the plan over this stage's pieces, bound, initialised, attached */
  SG_TRY(sg_pipe_model_plan(pipe, d.model, pc, 7, &plan));
  int64_t box[4];
  sg_model_box(d.model, &box[0], &box[1], &box[2], &box[3]);
  d.xb = malloc((size_t)(lb * box[1] * box[3] + 1) * sizeof *d.xb);
  d.yb = malloc((size_t)(lb * box[1] * box[3] + 1) * sizeof *d.yb);
  if (!d.xb || !d.yb) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  d.shp[0] = lb / M, d.shp[1] = 1, d.shp[2] = box[1], d.shp[3] = box[3];
  d.lc = (sg_dist_loss_ctx){domain, data, BATCH};
  const sg_pipe_model_io io = {d.model, NULL, pd_input, pd_loss, &d};
  for (int64_t t = 1; t <= STEPS; ++t) {
    make_batch(t, mi.data_index, lb, box, d.xb, d.yb);
    double l = 0.0, gnorm = 0.0;
    st = sg_pipe_model_run(pipe, &io, &l);
    for (int k = 0; k < M; ++k) sg_var_release(&d.yv[k]);
    SG_TRY(st);
    SG_TRY(sg_pipe_reduce(pipe, &gnorm));
    SG_TRY(sg_parallel_step(plan, t, 3e-3, sg_clip_scale(gnorm, 1.0)));
    if (sg_mesh_rank(mesh) == 0)
      printf("step %lld loss %.9e grad_norm %.9e\n", (long long)t, l, gnorm);
  }
  SG_TRY(sg_parallel_check_replicas(plan, STEPS));
fail:
  free(d.xb);
  free(d.yb);
  sg_parallel_destroy(&plan);
  sg_pipe_destroy(&pipe);
  sg_model_destroy(&d.model);
  sg_mesh_destroy(&smesh);
  return st;
}

static sg_status run(const char *spec, int zero) {
  sg_status st = SG_OK;
  sg_mesh_t mesh = NULL;
  sg_model_t model = NULL;
  sg_parallel_t plan = NULL;
  sg_tape_t tape = NULL;
  sg_param_info *tab = NULL;
  float *xb = NULL, *yb = NULL;
  SG_TRY(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  /* 1. the plan's settings and the mesh's roles (before any data) */
  sg_parallel_config pc = sg_parallel_defaults();
  pc.zero = zero;
  pc.deterministic = 1;
  if (sg_mesh_find_dim(mesh, "pp") >= 0) {
    st = run_pp(mesh, &pc);
    goto fail;
  }
  sg_parallel_mesh_info mi;
  SG_TRY(sg_parallel_check_mesh(mesh, &pc, &mi));
  if (BATCH % mi.data_size)
    SG_RAISE(SG_ERR_CONFIG, "batch %d is not divisible by %d data replicas",
             BATCH, mi.data_size);
  const int64_t lb = BATCH / mi.data_size;
  sg_group_t domain = NULL, data = NULL;
  SG_TRY(sg_mesh_group(mesh, mi.domain_dims, &domain));
  SG_TRY(sg_mesh_group(mesh, mi.batch_dims, &data));
  /* 2. the model, and the plan over its parameter table */
  sg_model_config mc = sg_model_defaults(SG_MODEL_CNN);
  mc.width = 4, mc.blocks = 1, mc.groups = 2, mc.proj_width = 8;
  SG_TRY(sg_model_create(mesh, &mc, NY, NX, lb, &model));
  sg_var **vars = NULL;
  const int np = sg_model_params(model, &vars);
  tab = calloc((size_t)np, sizeof *tab);
  if (!tab) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  for (int i = 0; i < np; ++i) SG_TRY(sg_model_param_info(model, i, &tab[i]));
  SG_TRY(sg_parallel_create(mesh, &pc, np, tab, sg_model_param_count(model),
                            &plan));
  SG_TRY(
      sg_model_bind(model, sg_parallel_params(plan), sg_parallel_grads(plan)));
  SG_TRY(sg_model_init(model, 7));
  SG_TRY(sg_tape_create(&tape));
  SG_TRY(sg_parallel_attach(plan, tape, vars));
  /* 3. this rank's block of the data */
  int64_t box[4];
  sg_model_box(model, &box[0], &box[1], &box[2], &box[3]);
  xb = malloc((size_t)(lb * box[1] * box[3] + 1) * sizeof *xb);
  yb = malloc((size_t)(lb * box[1] * box[3] + 1) * sizeof *yb);
  if (!xb || !yb) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  /* 4. train: forward, loss, backward; the plan reduces and steps */
  for (int64_t t = 1; t <= STEPS; ++t) {
    make_batch(t, mi.data_index, lb, box, xb, yb);
    const int64_t shp[4] = {lb, 1, box[1], box[3]};
    sg_var xv, yv, *pred = NULL, *loss = NULL;
    SG_TRY(sg_var_init(&xv, "x", SG_DTYPE_F32, 4, shp, xb, 0));
    SG_TRY(sg_var_init(&yv, "y", SG_DTYPE_F32, 4, shp, yb, 0));
    SG_TRY(sg_model_mark(model, &yv));
    SG_TRY(sg_parallel_begin_micro(plan, 0, 1));
    SG_TRY(sg_model_forward(model, tape, &xv, &pred));
    sg_dist_loss_ctx lc = {domain, data, BATCH};
    SG_TRY(sg_ag_dist_loss(tape, SG_LOSS_REL_L2, pred, &yv, NULL, &lc, &loss));
    const double l = sg_dist_loss_value(loss);
    SG_TRY(sg_tape_backward(tape, loss));
    double gnorm = 0.0;
    SG_TRY(sg_parallel_reduce(plan, &gnorm));
    SG_TRY(sg_parallel_step(plan, t, 3e-3, sg_clip_scale(gnorm, 1.0)));
    if (sg_mesh_rank(mesh) == 0)
      printf("step %lld loss %.9e grad_norm %.9e\n", (long long)t, l, gnorm);
  }
  SG_TRY(sg_parallel_check_replicas(plan, STEPS));
fail:
  free(xb);
  free(yb);
  free(tab);
  sg_tape_destroy(&tape);
  sg_model_destroy(&model);
  sg_parallel_destroy(&plan);
  sg_mesh_destroy(&mesh);
  return st;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const char *spec = argc > 1 ? argv[1] : "h=1";
  const int zero = argc > 2 ? atoi(argv[2]) : 0;
  sg_status st = sg_agree(MPI_COMM_WORLD, run(spec, zero));
  if (st != SG_OK && rank == 0)
    fprintf(stderr, "sg-parallel-driver: %s\n", sg_last_error());
  MPI_Finalize();
  return st == SG_OK ? 0 : 1;
}
