/* The pipeline runtime (sg_pipeline.h, "execution") against one process.
 *
 * The model: NB residual blocks y = x + gelu(conv1d_3(x; w_b) + b_b) on
 * (N, C, S) fields (zero padding: a halo when S is split over "h"), the
 * MSE against a target after the last block, AdamW through the parallel
 * plan. Each stage builds a plan on its stage mesh with its own blocks'
 * parameters; stage 0 makes the micro-batch's input (its share under
 * dp/h), the last stage its loss (the micro-batch mean / m).
 *
 * Per mesh, schedule and m in {1, 2, 4}: STEPS steps give the losses and
 * the parameters of one process running the whole batch in one forward
 * (every rank runs that reference on MPI_COMM_SELF), to relative 1e-5;
 * each stage's measured peak of micro-batches in flight equals the
 * schedule's formula. At 4 ranks ZeRO 1, 2 and 3 inside the stages
 * (pp=2,fsdp=2; zero 3 also with interleaved chunks). Bad input (more
 * stages than blocks, m < 1, a bad
 * split) and a forward that fails on one stage give an error on every
 * rank, no hang. Runs at 1-4 ranks: the meshes that fit; verdict over all
 * ranks. */
#include "sg_comm.h"
#include "sg_pipeline.h"
#include "sg_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { C = 4, S = 8, GB = 8, NBMAX = 8, MMAX = 4, STEPS = 3 };
#define TOL 1e-5

typedef struct tmodel {
  int nb, m;
  sg_mesh_t mesh; /* the stage mesh (the reference: one rank) */
  sg_pipe_t pipe; /* NULL: the reference */
  sg_parallel_t plan;
  int np, blk[2 * NBMAX]; /* table entry -> block; entries 2k, 2k+1: w, b */
  sg_var w[NBMAX], b[NBMAX];
  sg_var x[MMAX], t[MMAX];
  int dsize, dindex, hsize, hindex;
  sg_placement pl[SG_MESH_MAX_DIMS];
  int64_t step;
  int fail_stage, fail_mb; /* inject a failure there (-1: none) */
} tmodel;

static float wave(int64_t a, int64_t b, int64_t c, double phase) {
  return (float)sin(0.37 * (double)(a * 31 + b * 7 + c) + phase);
}

static int64_t wnumel(void) { return C * C * 3; }

/* The dims of the stage mesh: batch (dp, fsdp) and domain (h). */
static void tm_layout(tmodel *M) {
  M->dsize = M->hsize = 1;
  M->dindex = M->hindex = 0;
  for (int d = 0; d < sg_mesh_ndims(M->mesh); ++d) {
    const char *n = sg_mesh_dim_name(M->mesh, d);
    const int sz = sg_mesh_dim_size(M->mesh, d), c = sg_mesh_coord(M->mesh, d);
    M->pl[d] = sg_replicate();
    if (!strcmp(n, "dp") || !strcmp(n, "fsdp")) {
      M->dindex = M->dindex * sz + c;
      M->dsize *= sz;
      M->pl[d] = sg_shard(0);
    } else if (!strcmp(n, "h")) {
      M->hindex = c;
      M->hsize = sz;
      M->pl[d] = sg_shard(2);
    }
  }
}

/* The plan over the blocks of this stage (all blocks: the reference). */
static sg_status tm_create(tmodel *M, const sg_parallel_config *pc, int zero) {
  sg_status st = SG_OK;
  sg_param_info tab[2 * NBMAX];
  char names[2 * NBMAX][24];
  int64_t off = 0;
  memset(tab, 0, sizeof tab);
  M->np = 0;
  const int nch = M->pipe ? sg_pipe_schedule(M->pipe)->v : 1;
  for (int c = 0; c < nch; ++c) {
    int first = 0, count = M->nb;
    if (M->pipe) sg_pipe_blocks(M->pipe, c, &first, &count);
    for (int k = first; k < first + count; ++k)
      for (int j = 0; j < 2; ++j) {
        sg_param_info *q = &tab[M->np];
        snprintf(names[M->np], sizeof names[0], "block%d.%s", k, j ? "b" : "w");
        q->name = names[M->np];
        q->ndim = j ? 1 : 3;
        const int64_t sh[3] = {C, j ? 1 : C, 3};
        for (int d = 0; d < q->ndim; ++d)
          q->global_shape[d] = q->count[d] = sh[d];
        q->numel = j ? C : wnumel();
        q->offset = off;
        off += q->numel;
        M->blk[M->np++] = k;
      }
  }
  sg_parallel_config cfg = *pc;
  cfg.zero = zero;
  if (M->pipe)
    SG_TRY(sg_pipe_plan_create(M->pipe, &cfg, M->np, tab, off, &M->plan));
  else
    SG_TRY(sg_parallel_create(M->mesh, &cfg, M->np, tab, off, &M->plan));
  float *pp = sg_parallel_params(M->plan), *gg = sg_parallel_grads(M->plan);
  sg_var *vars[2 * NBMAX];
  for (int i = 0; i < M->np; ++i) {
    const int k = M->blk[i], j = i & 1;
    for (int64_t e = 0; e < tab[i].numel; ++e)
      pp[tab[i].offset + e] = 0.3f * wave(k, e, j, 0.5);
    sg_var *v = j ? &M->b[k] : &M->w[k];
    const int64_t sh[3] = {C, C, 3};
    SG_TRY(sg_var_init_param(v, names[i], SG_DTYPE_F32, j ? 1 : 3, sh,
                             pp + tab[i].offset, gg + tab[i].offset));
    vars[i] = v;
  }
  if (M->pipe) SG_TRY(sg_pipe_attach(M->pipe, M->plan, vars));
fail:
  return st;
}

static void tm_destroy(tmodel *M) {
  for (int k = 0; k < NBMAX; ++k) {
    sg_var_release(&M->w[k]);
    sg_var_release(&M->b[k]);
  }
  sg_parallel_destroy(&M->plan);
}

/* This rank's share of micro-batch mb's input (which 0) or target (1):
 * samples of the micro-batch split over the data ranks, S over h. */
static sg_status tm_data(tmodel *M, int mb, int which, sg_var *v) {
  sg_status st = SG_OK;
  const int64_t gmb = GB / M->m, lb = gmb / M->dsize, ls = S / M->hsize;
  const int64_t shape[3] = {lb, C, ls}, gshape[3] = {gmb, C, S};
  SG_TRY(
      sg_var_init(v, which ? "target" : "x", SG_DTYPE_F32, 3, shape, NULL, 0));
  float *d = v->value.data;
  for (int64_t i = 0; i < lb; ++i)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t k = 0; k < ls; ++k) {
        const int64_t s = M->step * GB + mb * gmb + M->dindex * lb + i;
        d[(i * C + c) * ls + k] = wave(s, c, M->hindex * ls + k, 1.1 + which);
      }
  if (M->pipe) SG_TRY(sg_var_set_sharding(v, M->mesh, M->pl, gshape));
fail:
  return st;
}

static sg_status tm_block(sg_tape_t tape, tmodel *M, int k, sg_var *x,
                          sg_var **y) {
  sg_status st = SG_OK;
  sg_window a = SG_WINDOW_SYM(3, 1, 1, 1); /* zero boundary */
  sg_var *h, *g;
  SG_TRY(sg_ag_conv(tape, x, &M->w[k], &M->b[k], &a, &h));
  SG_TRY(sg_ag_act(tape, SG_ACT_GELU, h, &g));
  SG_TRY(sg_ag_binary(tape, SG_BINARY_ADD, x, g, y));
fail:
  return st;
}

/* The stage's forward (sg_pipe_forward_fn); the reference calls it with
 * every block. */
static sg_status tm_forward(sg_tape_t tape, void *ctx, int mb, int chunk,
                            sg_bundle *io) {
  sg_status st = SG_OK;
  tmodel *M = ctx;
  int first = 0, count = M->nb;
  if (M->pipe) sg_pipe_blocks(M->pipe, chunk, &first, &count);
  if (M->pipe && sg_pipe_stage(M->pipe) == M->fail_stage && mb == M->fail_mb)
    SG_RAISE(SG_ERR_INVALID_ARG, "injected failure on stage %d, micro-batch %d",
             M->fail_stage, mb);
  sg_var *x = io->n ? io->v[0] : NULL;
  if (!x) {
    SG_TRY(tm_data(M, mb, 0, &M->x[mb]));
    x = &M->x[mb];
  }
  for (int k = first; k < first + count; ++k)
    SG_TRY(tm_block(tape, M, k, x, &x));
  if (first + count == M->nb) {
    sg_var *l;
    SG_TRY(tm_data(M, mb, 1, &M->t[mb]));
    SG_TRY(sg_ag_loss(tape, SG_LOSS_MSE, x, &M->t[mb], &l));
    SG_TRY(sg_ag_scale(tape, 1.0 / M->m, l, &x));
  }
  *io = (sg_bundle){.n = 1, .v = {x}};
fail:
  return st;
}

static void tm_release_data(tmodel *M) {
  for (int i = 0; i < MMAX; ++i) {
    sg_var_release(&M->x[i]);
    sg_var_release(&M->t[i]);
  }
}

/* The reference: one process, the whole batch in one forward. */
typedef struct ref_run {
  double loss[STEPS];
  float *params; /* every block's w, b in block order */
} ref_run;

static sg_status reference(int nb, const sg_parallel_config *pc, ref_run *R) {
  sg_status st = SG_OK;
  tmodel M;
  sg_tape_t tape = NULL;
  memset(&M, 0, sizeof M);
  M.nb = nb;
  M.m = 1;
  SG_TRY(sg_mesh_create(MPI_COMM_SELF, "dp=1", &M.mesh));
  tm_layout(&M);
  SG_TRY(tm_create(&M, pc, 0));
  SG_TRY(sg_tape_create(&tape));
  for (int t = 0; t < STEPS; ++t) {
    sg_bundle io = {0};
    double gn;
    M.step = t;
    SG_TRY(sg_parallel_begin_micro(M.plan, 0, 1));
    SG_TRY(tm_forward(tape, &M, 0, 0, &io));
    R->loss[t] = sg_var_item(io.v[0]);
    SG_TRY(sg_tape_backward(tape, io.v[0]));
    tm_release_data(&M);
    SG_TRY(sg_parallel_reduce(M.plan, &gn));
    SG_TRY(sg_parallel_step(M.plan, t + 1, 1e-2, 1.0));
  }
  R->params = malloc((size_t)(nb * (wnumel() + C)) * sizeof(float));
  for (int i = 0, o = 0; i < M.np; ++i) {
    SG_TRY(sg_parallel_gather_param(M.plan, i, R->params + o));
    o += (i & 1) ? C : (int)wnumel();
  }
fail:
  sg_tape_destroy(&tape);
  tm_release_data(&M);
  tm_destroy(&M);
  sg_mesh_destroy(&M.mesh);
  return st;
}

static double rel_diff(const float *a, const float *b, int64_t n) {
  double d = 0.0, m = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    d = fmax(d, fabs((double)a[i] - b[i]));
    m = fmax(m, fabs((double)b[i]));
  }
  return m > 0 ? d / m : d;
}

/* The stage of the last run on this rank, and whether the rank is its
 * stage's first (it prints). */
static int last_stage, last_first;

/* One pipelined run on `mesh` against the reference; the verdict. The
 * stage's measured stats into *out (may be NULL). */
static void check_run_stats(const char *spec, sg_pp_kind kind, int m, int v,
                            int nb, const int *split, int zero,
                            const ref_run *R, sg_pipe_stats *out) {
  const sg_parallel_config pc = sg_parallel_defaults();
  sg_mesh_t mesh = NULL;
  tmodel M;
  memset(&M, 0, sizeof M);
  M.nb = nb;
  M.m = m;
  M.fail_stage = -1;
  double loss[STEPS], ldiff = 0.0, pdiff = 0.0;
  int ok = 1;
  SG_CHECK_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  sg_pipe_config cfg = {
      .kind = kind, .m = m, .v = v, .nblocks = nb, .split = split};
  sg_status st = sg_pipe_create(mesh, &cfg, &M.pipe);
  SG_CHECK(st == SG_OK, "%s %s m=%d: sg_pipe_create: %s", spec,
           sg_pp_kind_name(kind), m, sg_last_error());
  if (st != SG_OK) goto done;
  M.mesh = sg_pipe_stage_mesh(M.pipe);
  tm_layout(&M);
  st = tm_create(&M, &pc, zero);
  for (int t = 0; t < STEPS && st == SG_OK; ++t) {
    double gn;
    M.step = t;
    st = sg_pipe_run(M.pipe, tm_forward, &M, &loss[t]);
    tm_release_data(&M);
    if (st == SG_OK) st = sg_pipe_reduce(M.pipe, &gn);
    if (st == SG_OK) st = sg_parallel_step(M.plan, t + 1, 1e-2, 1.0);
    if (st == SG_OK)
      ldiff = fmax(ldiff, fabs(loss[t] - R->loss[t]) / fabs(R->loss[t]));
  }
  SG_CHECK(st == SG_OK, "%s %s m=%d: %s", spec, sg_pp_kind_name(kind), m,
           sg_last_error());
  float buf[C * C * 3];
  for (int i = 0; i < M.np && st == SG_OK; ++i) {
    const int k = M.blk[i], j = i & 1;
    const int64_t n = j ? C : wnumel();
    st = sg_parallel_gather_param(M.plan, i, buf);
    pdiff = fmax(
        pdiff,
        rel_diff(buf, R->params + k * (wnumel() + C) + (j ? wnumel() : 0), n));
  }
  sg_pipe_stats ps;
  sg_pipe_get_stats(M.pipe, &ps);
  if (out) *out = ps;
  last_stage = sg_pipe_stage(M.pipe);
  last_first = sg_mesh_rank(M.mesh) == 0;
  ok = st == SG_OK && ldiff <= TOL && pdiff <= TOL &&
       ps.peak_inflight == ps.peak_formula && ps.peak_fw == ps.peak_fw_formula;
  SG_CHECK(
      ok,
      "%s %s m=%d v=%d zero=%d stage %d: loss diff %.2e, param diff %.2e (tolerance %.0e), "
      "peak in flight %d, formula %d; until W %d, formula %d",
      spec, sg_pp_kind_name(kind), m, v, zero, sg_pipe_stage(M.pipe), ldiff,
      pdiff, TOL, ps.peak_inflight, ps.peak_formula, ps.peak_fw,
      ps.peak_fw_formula);
  /* the table: one line per stage from the stage's first rank */
  double mx[2] = {ldiff, pdiff};
  MPI_Allreduce(MPI_IN_PLACE, mx, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (sg_mesh_rank(M.mesh) == 0)
    printf(
        "%-10s %-11s m=%d v=%d zero=%d stage %d: peak in flight %d (formula %d), tapes %zu bytes, "
        "inputs %zu bytes; max rel diff loss %.1e params %.1e\n",
        spec, sg_pp_kind_name(kind), m, v, zero, sg_pipe_stage(M.pipe),
        ps.peak_inflight, ps.peak_formula, ps.peak_bytes, ps.peak_input_bytes,
        mx[0], mx[1]);
  fflush(stdout);
done:
  tm_release_data(&M);
  tm_destroy(&M);
  sg_pipe_destroy(&M.pipe);
  sg_mesh_destroy(&mesh);
}

static void check_run(const char *spec, sg_pp_kind kind, int m, int v, int nb,
                      const int *split, int zero, const ref_run *R) {
  check_run_stats(spec, kind, m, v, nb, split, zero, R, NULL);
}

/* Every kind x m in {1, 2, 4}; and the activation memory: with the same
 * micro-batch size a stage's peak tape bytes are proportional to its peak
 * in flight, so 1F1B's over GPipe's (m = 4) is the ratio of the formulas.
 * ZB-H1 holds 1F1B's pairs in flight plus the W state (less than a pair in
 * flight) of the pairs whose B is done, up to min(m, p) pairs until W: its
 * peak lies between 1F1B's and min(m, p) pairs' worth of GPipe's. */
static void check_kinds(const char *spec, int nb, const int *split, int zero,
                        const ref_run *R) {
  const sg_pp_kind kinds[] = {SG_PP_GPIPE, SG_PP_1F1B, SG_PP_ZB_H1};
  const int ms[] = {1, 2, 4};
  sg_pipe_stats s4[3] = {{0}};
  for (int k = 0; k < 3; ++k)
    for (int i = 0; i < 3; ++i)
      check_run_stats(spec, kinds[k], ms[i], 1, nb, split, zero, R, &s4[k]);
  const double bytes = (double)s4[1].peak_bytes / (double)s4[0].peak_bytes;
  const double slots = (double)s4[1].peak_formula / s4[0].peak_formula;
  SG_CHECK(fabs(bytes - slots) <= 0.05 * slots,
           "%s: 1f1b / gpipe peak tape bytes %.3f, peak in flight %.3f", spec,
           bytes, slots);
  const double zb = (double)s4[2].peak_bytes / (double)s4[0].peak_bytes,
               fw = (double)s4[2].peak_fw_formula / s4[0].peak_formula;
  SG_CHECK(zb >= bytes && zb <= 1.05 * fw,
           "%s: zb-h1 / gpipe peak tape bytes %.3f: not between 1f1b's %.3f "
           "and the pairs until W %.3f",
           spec, zb, bytes, fw);
  if (last_first)
    printf("%-10s stage %d peak tape bytes, m = 4: gpipe %zu, 1f1b %zu, "
           "zb-h1 %zu (zb-h1 pairs until W %d, formula %d)\n",
           spec, last_stage, s4[0].peak_bytes, s4[1].peak_bytes,
           s4[2].peak_bytes, s4[2].peak_fw, s4[2].peak_fw_formula);
}

/* Bad input: the same clear error on every rank, no hang. */
static void check_error(const char *spec, const sg_pipe_config *cfg,
                        const char *expect) {
  sg_mesh_t mesh = NULL;
  sg_pipe_t pipe = NULL;
  SG_CHECK_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  sg_status st = sg_pipe_create(mesh, cfg, &pipe);
  SG_CHECK(st == SG_ERR_INVALID_ARG && strstr(sg_last_error(), expect) && !pipe,
           "%s: expected '%s', got %s: %s", spec, expect, sg_status_name(st),
           sg_last_error());
  sg_pipe_destroy(&pipe);
  sg_mesh_destroy(&mesh);
}

/* A forward that fails on one stage: every rank returns its error. */
static void check_failure(const char *spec, sg_pp_kind kind, int nb,
                          int fail_stage) {
  const sg_parallel_config pc = sg_parallel_defaults();
  sg_mesh_t mesh = NULL;
  tmodel M;
  memset(&M, 0, sizeof M);
  M.nb = nb;
  M.m = 4;
  M.fail_stage = fail_stage;
  M.fail_mb = 1;
  SG_CHECK_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  sg_pipe_config cfg = {.kind = kind, .m = M.m, .nblocks = nb};
  SG_CHECK_OK(sg_pipe_create(mesh, &cfg, &M.pipe));
  M.mesh = sg_pipe_stage_mesh(M.pipe);
  tm_layout(&M);
  SG_CHECK_OK(tm_create(&M, &pc, 0));
  double loss;
  for (int t = 0; t < 2; ++t) { /* the second step runs after a failed one */
    sg_status st = sg_pipe_run(M.pipe, tm_forward, &M, &loss);
    tm_release_data(&M);
    SG_CHECK(st == SG_ERR_INVALID_ARG &&
                 strstr(sg_last_error(), "injected failure on stage"),
             "%s %s: a failing stage %d gave %s: %s", spec,
             sg_pp_kind_name(kind), fail_stage, sg_status_name(st),
             sg_last_error());
  }
  tm_destroy(&M);
  sg_pipe_destroy(&M.pipe);
  sg_mesh_destroy(&mesh);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  const sg_parallel_config pc = sg_parallel_defaults();
  ref_run R4 = {0}, R5 = {0}, R8 = {0};
  SG_CHECK_OK(reference(4, &pc, &R4));
  SG_CHECK_OK(reference(5, &pc, &R5));
  SG_CHECK_OK(reference(8, &pc, &R8));
  const int n = sg_test_size;
  if (n == 1) {
    check_kinds("pp=1", 4, NULL, 0, &R4);
  } else if (n == 2) {
    check_kinds("pp=2", 4, NULL, 0, &R4);
    for (int m = 2; m <= 4; m += 2)
      check_run("pp=2", SG_PP_INTERLEAVED, m, 2, 4, NULL, 0, &R4);
    check_error("pp=2",
                &(sg_pipe_config){.kind = SG_PP_1F1B, .m = 2, .nblocks = 1},
                "2 virtual stages (pp = 2 x v = 1) but the model has 1 blocks");
    check_error("pp=2",
                &(sg_pipe_config){.kind = SG_PP_GPIPE, .m = 0, .nblocks = 4},
                "m = 0 micro-batches: m must be >= 1");
    check_error("pp=2",
                &(sg_pipe_config){
                    .kind = SG_PP_INTERLEAVED, .m = 2, .v = 2, .nblocks = 3},
                "4 virtual stages (pp = 2 x v = 2) but the model has 3 blocks");
    check_error("pp=2",
                &(sg_pipe_config){.kind = SG_PP_1F1B,
                                  .m = 2,
                                  .nblocks = 4,
                                  .split = (int[]){4}},
                "split point 0 is block 4");
    check_failure("pp=2", SG_PP_1F1B, 4, 1);
    check_failure("pp=2", SG_PP_GPIPE, 4, 0);
  } else if (n == 3) {
    check_kinds("pp=3", 5, NULL, 0, &R5); /* blocks 2, 2, 1 */
    check_run("pp=3", SG_PP_1F1B, 4, 1, 5, (int[]){1, 3}, 0, &R5); /* 1, 2, 2 */
    check_failure("pp=3", SG_PP_1F1B, 5, 1);
  } else if (n == 4) {
    check_kinds("pp=2,dp=2", 4, NULL, 0, &R4);
    check_kinds("pp=2,h=2", 4, NULL, 0, &R4);
    check_run("dp=2,pp=2", SG_PP_1F1B, 4, 1, 4, NULL, 0, &R4);
    check_run("pp=2,fsdp=2", SG_PP_1F1B, 2, 1, 4, NULL, 1, &R4);
    /* zero 2/3 inside the stages: the plan's hooks on every micro-batch's
     * tape (gathers in F, B and W; reduce-scatters per backward) */
    check_run("pp=2,fsdp=2", SG_PP_1F1B, 4, 1, 4, NULL, 3, &R4);
    check_run("pp=2,fsdp=2", SG_PP_ZB_H1, 4, 1, 4, NULL, 2, &R4);
    check_run("pp=2,fsdp=2", SG_PP_INTERLEAVED, 2, 2, 4, NULL, 3, &R4);
    check_run("pp=4", SG_PP_1F1B, 4, 1, 5, NULL, 0, &R5);
    check_run("pp=4", SG_PP_INTERLEAVED, 4, 2, 8, NULL, 0, &R8);
    check_failure("pp=2,h=2", SG_PP_1F1B, 4, 0);
  }
  free(R4.params);
  free(R5.params);
  free(R8.params);
  return sg_test_finish();
}
