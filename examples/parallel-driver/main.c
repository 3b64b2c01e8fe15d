/* parallel-driver — a user's own training driver on the parallel plan, in a
 * few calls: a CNN learns a smoothing of a synthetic field, on any mesh the
 * plan supports (dp, fsdp with zero = 1, h, w), and prints the same losses
 * as one process.
 *
 *   mpiexec -n 4 sg-parallel-driver fsdp=2,h=2 1     # mesh, zero stage
 *
 * The plan (strategies/sg_parallel.h) owns the parameter buffers, the
 * gradient reductions, the global norm, the optimizer step and the
 * checkpoint boxes; the driver only makes data, runs forward and backward,
 * and calls the plan around them. */
#include "sg_comm.h"
#include "sg_dist_loss.h"
#include "sg_model.h"
#include "sg_parallel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NY = 12, NX = 10, BATCH = 4, STEPS = 8 };

/* Sample s of the global batch at global cell (y, x): input and target. */
static float field(int64_t s, int64_t y, int64_t x) {
  return (float)(sin(0.5 * (double)y + 0.3 * (double)s) *
                 cos(0.4 * (double)x - 0.2 * (double)s));
}
static float target(int64_t s, int64_t y, int64_t x) {
  return 0.5f * field(s, y, x) +
         0.25f * (field(s, (y + 1) % NY, x) + field(s, y, (x + 1) % NX));
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
  int64_t y0, ny, x0, nx;
  sg_model_box(model, &y0, &ny, &x0, &nx);
  xb = malloc((size_t)(lb * ny * nx + 1) * sizeof *xb);
  yb = malloc((size_t)(lb * ny * nx + 1) * sizeof *yb);
  if (!xb || !yb) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  /* 4. train: forward, loss, backward; the plan reduces and steps */
  for (int64_t t = 1; t <= STEPS; ++t) {
    for (int64_t j = 0; j < lb; ++j) {
      const int64_t s = (t * BATCH + mi.data_index * lb + j) %
                        17; /* sample ids */
      for (int64_t y = 0; y < ny; ++y)
        for (int64_t x = 0; x < nx; ++x) {
          xb[(j * ny + y) * nx + x] = field(s, y0 + y, x0 + x);
          yb[(j * ny + y) * nx + x] = target(s, y0 + y, x0 + x);
        }
    }
    const int64_t shp[4] = {lb, 1, ny, nx};
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
