/* The zoo's CNN (models/cnn.c) cut into pipeline stages through the model
 * table's block-range forward (sg_model_impl.h: nblocks, block_params,
 * forward_blocks): pieces lift, 3 residual blocks, projection. Each stage
 * builds its plan with its pieces' parameter entries (the model's own
 * offsets: the other stages' entries are gaps in its buffer). Per mesh,
 * schedule and m: STEPS AdamW steps give the losses and the parameters of
 * one process running the whole batch (every rank runs that reference on
 * MPI_COMM_SELF), to relative 1e-5. Runs at 2-4 ranks: pp=2; pp=3 (pieces
 * 2, 2, 1); pp=2,h=2 (halos and GroupNorm statistics over the domain
 * inside a stage) and pp=2,dp=2; GPipe and 1F1B x m in {1, 2, 4}, ZB-H1
 * (the tape's split backward) with m = 4. Verdict over all ranks. */
#include "sg_dist_loss.h"
#include "sg_model_impl.h"
#include "sg_pipeline.h"
#include "sg_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NY = 8, NX = 8, GB = 8, MMAX = 4, STEPS = 3, PMAX = 64 };
#define TOL 1e-5

typedef struct cmodel {
  const sg_model_i *I;
  void *impl;
  sg_mesh_t mesh; /* the stage mesh (the reference: one rank) */
  sg_pipe_t pipe; /* NULL: the reference */
  sg_parallel_t plan;
  int m, p0, np; /* the plan's entries: the model's [p0, p0 + np) */
  int dsize, dindex;
  sg_group_t domain, data; /* the loss's groups (sg_dist_loss.h) */
  int64_t step;
  sg_var x[MMAX], t[MMAX];
} cmodel;

static sg_model_config cnn_config(void) {
  sg_model_config c = sg_model_defaults(SG_MODEL_CNN);
  c.cin = 2, c.cout = 2, c.width = 4, c.blocks = 3, c.groups = 2,
  c.proj_width = 8;
  return c;
}

/* This rank's data ranks and the loss's groups, from the stage mesh. */
static sg_status cm_layout(cmodel *M, const sg_parallel_config *pc) {
  sg_status st = SG_OK;
  sg_parallel_mesh_info mi;
  SG_TRY(sg_parallel_check_mesh(M->mesh, pc, &mi));
  M->dsize = mi.data_size;
  M->dindex = mi.data_index;
  SG_TRY(sg_mesh_group(M->mesh, mi.domain_dims, &M->domain));
  SG_TRY(sg_mesh_group(M->mesh, mi.batch_dims, &M->data));
fail:
  return st;
}

/* The model (micro-batch size), the plan over this stage's pieces. */
static sg_status cm_create(cmodel *M) {
  sg_status st = SG_OK;
  const sg_model_config c = cnn_config();
  const sg_parallel_config pc = sg_parallel_defaults();
  M->I = &sg_cnn_model_i;
  SG_TRY(cm_layout(M, &pc));
  SG_TRY(M->I->create(M->mesh, &c, NY, NX, GB / M->m / M->dsize, &M->impl));
  const int nb = M->I->nblocks(M->impl);
  int first = 0, count = nb, q0, qn, q1, qm;
  if (M->pipe) sg_pipe_blocks(M->pipe, 0, &first, &count);
  M->I->block_params(M->impl, first, &q0, &qn);
  M->I->block_params(M->impl, first + count - 1, &q1, &qm);
  M->p0 = q0;
  M->np = q1 + qm - q0;
  sg_param_info tab[PMAX];
  int64_t nlocal = 0;
  sg_var **vars;
  const int n = M->I->params(M->impl,
                             &vars); /* tensors (param_count counts elements) */
  for (int i = 0; i < n; ++i) {
    sg_param_info pi;
    SG_TRY(M->I->param_info(M->impl, i, &pi));
    if (pi.offset + pi.numel > nlocal) nlocal = pi.offset + pi.numel;
    if (i >= M->p0 && i < M->p0 + M->np) tab[i - M->p0] = pi;
  }
  if (M->pipe)
    SG_TRY(sg_pipe_plan_create(M->pipe, &pc, M->np, tab, nlocal, &M->plan));
  else
    SG_TRY(sg_parallel_create(M->mesh, &pc, M->np, tab, nlocal, &M->plan));
  SG_TRY(M->I->bind(M->impl, sg_parallel_params(M->plan),
                    sg_parallel_grads(M->plan)));
  SG_TRY(M->I->init(M->impl, 7));
  if (M->pipe) SG_TRY(sg_pipe_attach(M->pipe, M->plan, vars + M->p0));
fail:
  return st;
}

static void cm_release_data(cmodel *M) {
  for (int i = 0; i < MMAX; ++i) {
    sg_var_release(&M->x[i]);
    sg_var_release(&M->t[i]);
  }
}

static void cm_destroy(cmodel *M) {
  cm_release_data(M);
  if (M->impl) M->I->destroy(M->impl);
  M->impl = NULL;
  sg_parallel_destroy(&M->plan);
}

/* This rank's block of micro-batch mb's input (which 0) or target (1). */
static sg_status cm_data(cmodel *M, int mb, int which, sg_var *v) {
  sg_status st = SG_OK;
  int64_t y0, ny, x0, nx;
  M->I->box(M->impl, &y0, &ny, &x0, &nx);
  const int64_t gmb = GB / M->m, lb = gmb / M->dsize,
                shape[4] = {lb, 2, ny, nx};
  SG_TRY(
      sg_var_init(v, which ? "target" : "x", SG_DTYPE_F32, 4, shape, NULL, 0));
  float *d = v->value.data;
  for (int64_t i = 0; i < lb; ++i)
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t y = 0; y < ny; ++y)
        for (int64_t x = 0; x < nx; ++x) {
          const int64_t s = M->step * GB + mb * gmb + M->dindex * lb + i;
          d[((i * 2 + c) * ny + y) * nx + x] = (float)sin(
              0.37 * (double)(s * 31 + c * 7 + (y0 + y) * 3 + x0 + x) + 1.1 +
              which);
        }
fail:
  return st;
}

/* The stage's forward (sg_pipe_forward_fn); the reference runs every piece. */
static sg_status cm_forward(sg_tape_t tape, void *ctx, int mb, int chunk,
                            sg_var *in, sg_var **out) {
  sg_status st = SG_OK;
  cmodel *M = ctx;
  const int nb = M->I->nblocks(M->impl);
  int first = 0, count = nb;
  if (M->pipe) sg_pipe_blocks(M->pipe, chunk, &first, &count);
  sg_var *x = in;
  if (!x) {
    SG_TRY(cm_data(M, mb, 0, &M->x[mb]));
    x = &M->x[mb];
  }
  SG_TRY(M->I->forward_blocks(M->impl, tape, first, count, x, &x));
  if (first + count == nb) {
    sg_var *l;
    SG_TRY(cm_data(M, mb, 1, &M->t[mb]));
    SG_TRY(M->I->mark(M->impl, &M->t[mb]));
    const sg_dist_loss_ctx lc = {M->domain, M->data, GB / M->m};
    SG_TRY(sg_ag_dist_loss(tape, SG_LOSS_MSE, x, &M->t[mb], NULL, &lc, &l));
    SG_TRY(sg_ag_scale(tape, 1.0 / M->m, l, &x));
  }
  *out = x;
fail:
  return st;
}

typedef struct ref_run {
  double loss[STEPS];
  float *params; /* the model's flat buffer */
  int64_t n;
} ref_run;

static sg_status reference(ref_run *R) {
  sg_status st = SG_OK;
  cmodel M;
  sg_tape_t tape = NULL;
  memset(&M, 0, sizeof M);
  M.m = 1;
  SG_TRY(sg_mesh_create(MPI_COMM_SELF, "dp=1", &M.mesh));
  SG_TRY(cm_create(&M));
  SG_TRY(sg_tape_create(&tape));
  for (int t = 0; t < STEPS; ++t) {
    sg_var *loss;
    double gn;
    M.step = t;
    SG_TRY(sg_parallel_begin_micro(M.plan, 0, 1));
    SG_TRY(cm_forward(tape, &M, 0, 0, NULL, &loss));
    R->loss[t] = sg_var_item(loss);
    SG_TRY(sg_tape_backward(tape, loss));
    cm_release_data(&M);
    SG_TRY(sg_parallel_reduce(M.plan, &gn));
    SG_TRY(sg_parallel_step(M.plan, t + 1, 1e-2, 1.0));
  }
  R->n = sg_parallel_local_count(M.plan);
  R->params = malloc((size_t)R->n * sizeof(float));
  memcpy(R->params, sg_parallel_params(M.plan), (size_t)R->n * sizeof(float));
fail:
  sg_tape_destroy(&tape);
  cm_destroy(&M);
  sg_mesh_destroy(&M.mesh);
  return st;
}

static void check_run(const char *spec, sg_pp_kind kind, int m,
                      const ref_run *R) {
  sg_mesh_t mesh = NULL;
  cmodel M;
  memset(&M, 0, sizeof M);
  M.m = m;
  double loss, ldiff = 0.0, d = 0.0, mx = 0.0;
  SG_CHECK_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  sg_pipe_config cfg = {.kind = kind,
                        .m = m,
                        .nblocks = (int)cnn_config().blocks + 2};
  sg_status st = sg_pipe_create(mesh, &cfg, &M.pipe);
  if (st == SG_OK) {
    M.mesh = sg_pipe_stage_mesh(M.pipe);
    st = cm_create(&M);
  }
  for (int t = 0; t < STEPS && st == SG_OK; ++t) {
    double gn;
    M.step = t;
    st = sg_pipe_run(M.pipe, cm_forward, &M, &loss);
    cm_release_data(&M);
    if (st == SG_OK) st = sg_pipe_reduce(M.pipe, &gn);
    if (st == SG_OK) st = sg_parallel_step(M.plan, t + 1, 1e-2, 1.0);
    if (st == SG_OK)
      ldiff = fmax(ldiff, fabs(loss - R->loss[t]) / fabs(R->loss[t]));
  }
  SG_CHECK(st == SG_OK, "%s %s m=%d: %s", spec, sg_pp_kind_name(kind), m,
           sg_last_error());
  if (st == SG_OK) { /* this stage's parameters against the reference's */
    const float *p = sg_parallel_params(M.plan);
    for (int i = 0; i < M.np; ++i) {
      sg_param_info pi;
      M.I->param_info(M.impl, M.p0 + i, &pi);
      for (int64_t e = pi.offset; e < pi.offset + pi.numel; ++e) {
        d = fmax(d, fabs((double)p[e] - R->params[e]));
        mx = fmax(mx, fabs((double)R->params[e]));
      }
    }
  }
  const double pdiff = mx > 0 ? d / mx : d;
  sg_pipe_stats ps = {0};
  sg_pipe_get_stats(M.pipe, &ps);
  SG_CHECK(
      st == SG_OK && ldiff <= TOL && pdiff <= TOL &&
          ps.peak_inflight == ps.peak_formula,
      "%s %s m=%d stage %d: loss diff %.2e, param diff %.2e, peak in flight %d (formula %d)",
      spec, sg_pp_kind_name(kind), m, sg_pipe_stage(M.pipe), ldiff, pdiff,
      ps.peak_inflight, ps.peak_formula);
  double all[2] = {ldiff, pdiff};
  MPI_Allreduce(MPI_IN_PLACE, all, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (sg_test_rank == 0)
    printf("cnn %-10s %-6s m=%d: max rel diff loss %.1e params %.1e\n", spec,
           sg_pp_kind_name(kind), m, all[0], all[1]);
  fflush(stdout);
  cm_destroy(&M);
  sg_pipe_destroy(&M.pipe);
  sg_mesh_destroy(&mesh);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  ref_run R = {0};
  SG_CHECK_OK(reference(&R));
  const char *spec = sg_test_size == 2   ? "pp=2"
                     : sg_test_size == 3 ? "pp=3"
                                         : "pp=2,h=2";
  const sg_pp_kind kinds[] = {SG_PP_GPIPE, SG_PP_1F1B};
  for (int k = 0; k < 2 && R.params; ++k)
    for (int m = 1; m <= MMAX; m *= 2) {
      check_run(spec, kinds[k], m, &R);
      if (sg_test_size == 4) check_run("pp=2,dp=2", kinds[k], m, &R);
    }
  /* ZB-H1: the tape's split backward through the CNN's convs, biases and
   * GroupNorms (sharded statistics on pp=2,h=2) */
  if (R.params) check_run(spec, SG_PP_ZB_H1, MMAX, &R);
  free(R.params);
  return sg_test_finish();
}
