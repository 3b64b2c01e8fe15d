/* The autograd tape on sharded variables: the same model code on one
 * process and on a mesh computes the same function. A small U-Net-like
 * chain (conv periodic -> group norm -> GELU -> pool -> conv reflect
 * dilation 2 -> bilinear up-sampling or transposed conv -> concat with a
 * skip -> conv zero stride 2 -> MSE) on odd grids (29x35) and on 64x64
 * (64 over 3 ranks: 22,21,21 -> pool 11,11,10 -> up 22,21,21), meshes per
 * rank count (spatial, batch and both; uneven splits at 3 ranks): forward
 * output, loss, input gradient and parameter gradients (partial sums summed
 * over the mesh) equal the one-process run of the same tape code on the
 * global tensor, computed in this test on every rank (f64: rel 1e-10; f32:
 * rel 1e-5). The up-sampling and transposed-conv paths on uneven splits
 * against central finite differences in f64; 1-D and 3-D convolutions;
 * max and average pooling with zero padding (max: -inf) and dilation 2 on
 * negative inputs against loops by hand, one process and sharded; error
 * paths on every rank. */
#include "sg_autograd.h"
#include "sg_mesh.h"
#include "sg_sharded_ops.h"
#include "sg_test.h"
#include "sg_test_tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static double urand(void) {
  rs ^= rs >> 12;
  rs ^= rs << 25;
  rs ^= rs >> 27;
  return (double)((rs * 2685821657736338717ull) >> 11) / 4503599627370496.0 -
         1.0;
}

/* dp -> Shard(0), h -> Shard(2), w -> Shard(3), z -> Shard(4). */
static void placements_for(sg_mesh_t mesh, sg_placement *pl) {
  for (int m = 0; m < sg_mesh_ndims(mesh); ++m) {
    const char *n = sg_mesh_dim_name(mesh, m);
    pl[m] = !strcmp(n, "dp")  ? sg_shard(0)
            : !strcmp(n, "h") ? sg_shard(2)
            : !strcmp(n, "w") ? sg_shard(3)
            : !strcmp(n, "z") ? sg_shard(4)
                              : sg_replicate();
  }
}

/* A sharded leaf from a global double array: local copy in *buf. */
static sg_status make_sharded(sg_var *v, const char *name, sg_dtype dt,
                              sg_mesh_t mesh, int nd, const int64_t *gshape,
                              double *global, int requires_grad, void **buf) {
  sg_status st = SG_OK;
  sg_placement pl[SG_MESH_MAX_DIMS];
  int64_t off[SG_TENSOR_MAX_DIMS], shape[SG_TENSOR_MAX_DIMS];
  placements_for(mesh, pl);
  SG_TRY(
      sg_shardtensor_box(mesh, nd, gshape, pl, sg_mesh_rank(mesh), off, shape));
  *buf = calloc((size_t)sg_test_numel(nd, shape) + 1, sizeof(double));
  sg_test_box_copy(nd, gshape, off, shape, global, *buf, dt, 0);
  SG_TRY(sg_var_init(v, name, dt, nd, shape, *buf, requires_grad));
  SG_TRY(sg_var_set_sharding(v, mesh, pl, gshape));
fail:
  return st;
}

/* Compare a sharded variable's local tensor (value or grad) with the box
 * of a global reference. */
static void cmp_local(const char *what, const char *spec, const sg_var *v,
                      const sg_tensor *t, double *ref, double rel,
                      double abs_tol) {
  int64_t off[SG_TENSOR_MAX_DIMS], shape[SG_TENSOR_MAX_DIMS];
  const int nd = v->value.ndim;
  if (sg_shardtensor_box(v->mesh, nd, v->global_shape, v->placements,
                         sg_mesh_rank(v->mesh), off, shape) != SG_OK) {
    SG_CHECK(0, "%s on %s: box", what, spec);
    return;
  }
  for (int d = 0; d < nd; ++d)
    SG_CHECK(shape[d] == t->shape[d], "%s on %s: local extent", what, spec);
  int64_t n = sg_test_numel(nd, shape);
  double *mine = malloc((size_t)(n + 1) * sizeof *mine),
         *want = malloc((size_t)(n + 1) * sizeof *want);
  double *tmp = calloc((size_t)sg_test_numel(nd, v->global_shape), sizeof *tmp);
  for (int64_t i = 0; i < n; ++i) mine[i] = sg_test_get(t->data, t->dtype, i);
  sg_test_box_copy(nd, v->global_shape, off, shape, ref, want, SG_DTYPE_F64, 0);
  char label[160];
  snprintf(label, sizeof label, "%s on %s", what, spec);
  SG_CHECK(sg_test_cmp_f64(label, mine, want, n, rel, abs_tol) == 0, "%s",
           label);
  free(mine);
  free(want);
  free(tmp);
}

/* ---- the model ------------------------------------------------------------ */

enum { NB = 2, CI = 2, CH = 4, CO = 3, NPARAM = 10 };

typedef struct model {
  sg_dtype dt;
  int variant; /* 0: avg pool 2 + bilinear; 1: max pool k3 s2 p1 + convt 2 */
  sg_var p[NPARAM]; /* w1 b1 gamma beta w2 b2 wu bu w3 b3 */
  double *ref_grad[NPARAM];
} model;

static sg_status model_init(model *m, sg_dtype dt, int variant) {
  sg_status st = SG_OK;
  memset(m, 0, sizeof *m);
  m->dt = dt;
  m->variant = variant;
  const int64_t shapes[NPARAM][4] = {
      {CH, CI, 3, 3},     {CH}, {CH},           {CH},
      {CH, CH, 3, 3},     {CH}, {CH, CH, 2, 2}, {CH},
      {CO, 2 * CH, 3, 3}, {CO}};
  const int nds[NPARAM] = {4, 1, 1, 1, 4, 1, 4, 1, 4, 1};
  const char *names[NPARAM] = {"w1", "b1", "gamma", "beta", "w2",
                               "b2", "wu", "bu",    "w3",   "b3"};
  rs = 0x1234567ull;
  for (int k = 0; k < NPARAM; ++k) {
    SG_TRY(sg_var_init_param(&m->p[k], names[k], dt, nds[k], shapes[k], NULL,
                             NULL));
    int64_t n = sg_test_numel(nds[k], shapes[k]);
    for (int64_t i = 0; i < n; ++i)
      sg_test_set(m->p[k].value.data, dt, i,
                  k == 2 ? 1.0 + 0.2 * urand() : 0.4 * urand());
    m->ref_grad[k] = calloc((size_t)n, sizeof(double));
  }
fail:
  return st;
}

static void model_free(model *m) {
  for (int k = 0; k < NPARAM; ++k) {
    sg_var_release(&m->p[k]);
    free(m->ref_grad[k]);
  }
}

/* x (NB, CI, H, W) -> (NB, CO, ~H/2, ~W/2). */
static sg_status model_body(sg_tape_t t, model *m, sg_var *x, sg_var **out) {
  sg_status st = SG_OK;
  sg_var *h1, *h2, *h3, *h4, *h5, *h6, *skip, *h7;
  sg_var *P = m->p;
  sg_window c1[2] = {{.pad = {1, 1}, .boundary = SG_PAD_PERIODIC},
                     {.pad = {1, 1}, .boundary = SG_PAD_PERIODIC}};
  SG_TRY(sg_ag_conv(t, x, &P[0], &P[1], c1, &h1));
  sg_norm_desc nd = {.kind = SG_NORM_GROUP, .groups = 2, .eps = 1e-5};
  SG_TRY(sg_ag_norm(t, &nd, h1, &P[2], &P[3], &h2));
  SG_TRY(sg_ag_act(t, SG_ACT_GELU, h2, &h3));
  if (m->variant == 0) {
    int64_t k[2] = {2, 2};
    sg_window pa[2] = {{.kernel = k[0], .stride = 2},
                       {.kernel = k[1], .stride = 2}};
    SG_TRY(sg_ag_pool(t, SG_POOL_AVG, h3, pa, &h4));
  } else {
    int64_t k[2] = {3, 3};
    sg_window pa[2] = {{.kernel = k[0],
                        .stride = 2,
                        .pad = {1, 1},
                        .boundary = SG_PAD_REPLICATE},
                       {.kernel = k[1],
                        .stride = 2,
                        .pad = {1, 1},
                        .boundary = SG_PAD_REPLICATE}};
    SG_TRY(sg_ag_pool(t, SG_POOL_MAX, h3, pa, &h4));
  }
  sg_window c2[2] = {
      {.dilation = 2, .pad = {2, 2}, .boundary = SG_PAD_REFLECT},
      {.dilation = 2, .pad = {2, 2}, .boundary = SG_PAD_REFLECT}};
  SG_TRY(sg_ag_conv(t, h4, &P[4], &P[5], c2, &h5));
  int64_t two[2] = {2, 2};
  if (m->variant == 0)
    SG_TRY(sg_ag_upsample(t, SG_UPSAMPLE_LINEAR, h5, two, &h6));
  else
    SG_TRY(sg_ag_convt(t, h5, &P[6], &P[7], &h6));
  /* the skip: h3 when the grid comes back to its size, else h4 up-sampled */
  const int64_t *g3 = sg_var_global_shape(h3), *g6 = sg_var_global_shape(h6);
  if (g3[2] == g6[2] && g3[3] == g6[3])
    skip = h3;
  else
    SG_TRY(sg_ag_upsample(t, SG_UPSAMPLE_NEAREST, h4, two, &skip));
  sg_var *cat[2] = {h6, skip};
  SG_TRY(sg_ag_concat(t, 2, cat, &h7));
  sg_window c3[2] = {{.stride = 2, .pad = {1, 1}},
                     {.stride = 2, .pad = {1, 1}}};
  SG_TRY(sg_ag_conv(t, h7, &P[8], &P[9], c3, out));
fail:
  return st;
}

typedef struct ref_run {
  int64_t gx[4], gy[4];
  double *x, *tgt, *y, *dx;
  double loss;
} ref_run;

/* The one-process run on the global tensors (every rank). */
static void run_reference(model *m, int64_t H, int64_t W, ref_run *r) {
  sg_tape_t tape = NULL;
  sg_var vx, vt, *y = NULL, *loss = NULL;
  void *xb = NULL, *tb = NULL;
  memset(&vx, 0, sizeof vx);
  memset(&vt, 0, sizeof vt);
  int64_t gx[4] = {NB, CI, H, W};
  memcpy(r->gx, gx, sizeof gx);
  int64_t nx = sg_test_numel(4, gx);
  r->x = malloc((size_t)nx * sizeof(double));
  r->dx = calloc((size_t)nx, sizeof(double));
  rs = 0xABCDEFull + (uint64_t)(H * 131 + W);
  for (int64_t i = 0; i < nx; ++i) r->x[i] = urand();
  xb = calloc((size_t)nx, sizeof(double));
  for (int64_t i = 0; i < nx; ++i) sg_test_set(xb, m->dt, i, r->x[i]);
  SG_REQUIRE_OK(sg_tape_create(&tape));
  SG_REQUIRE_OK(sg_var_init(&vx, "x", m->dt, 4, gx, xb, 1));
  SG_REQUIRE_OK(model_body(tape, m, &vx, &y));
  memcpy(r->gy, y->value.shape, sizeof r->gy);
  int64_t ny = sg_test_numel(4, r->gy);
  r->tgt = malloc((size_t)ny * sizeof(double));
  r->y = malloc((size_t)ny * sizeof(double));
  for (int64_t i = 0; i < ny; ++i) {
    r->tgt[i] = 0.5 * urand();
    r->y[i] = sg_test_get(y->value.data, m->dt, i);
  }
  tb = calloc((size_t)ny, sizeof(double));
  for (int64_t i = 0; i < ny; ++i) sg_test_set(tb, m->dt, i, r->tgt[i]);
  SG_REQUIRE_OK(sg_var_init(&vt, "t", m->dt, 4, r->gy, tb, 0));
  SG_REQUIRE_OK(sg_ag_loss(tape, SG_LOSS_MSE, y, &vt, &loss));
  r->loss = sg_var_item(loss);
  SG_REQUIRE_OK(sg_tape_backward(tape, loss));
  for (int64_t i = 0; i < nx; ++i)
    r->dx[i] = sg_test_get(vx.grad.data, m->dt, i);
  for (int k = 0; k < NPARAM; ++k) {
    int64_t n = sg_test_numel(m->p[k].value.ndim, m->p[k].value.shape);
    for (int64_t i = 0; i < n; ++i)
      m->ref_grad[k][i] = sg_test_get(m->p[k].grad.data, m->dt, i);
    sg_var_zero_grad(&m->p[k]);
  }
done:
  sg_tape_destroy(&tape);
  sg_var_release(&vx);
  sg_var_release(&vt);
  free(xb);
  free(tb);
}

static void ref_free(ref_run *r) {
  free(r->x);
  free(r->tgt);
  free(r->y);
  free(r->dx);
}

/* One model on one mesh against the reference. */
static void run_chain(const char *spec, sg_dtype dt, int variant, int64_t H,
                      int64_t W) {
  model m;
  ref_run r;
  sg_mesh_t mesh = NULL;
  sg_tape_t tape = NULL;
  sg_var vx, vt, *y = NULL, *loss = NULL;
  void *xb = NULL, *tb = NULL;
  memset(&r, 0, sizeof r);
  memset(&vx, 0, sizeof vx);
  memset(&vt, 0, sizeof vt);
  const double rel = dt == SG_DTYPE_F64 ? 1e-10 : 1e-5,
               abs_tol = dt == SG_DTYPE_F64 ? 1e-12 : 1e-6;
  char what[200];
  snprintf(what, sizeof what, "%s %s variant %d %lldx%lld", spec,
           sg_dtype_name(dt), variant, (long long)H, (long long)W);
  if (sg_test_rank == 0) printf("chain: %s\n", what), fflush(stdout);
  SG_REQUIRE_OK(model_init(&m, dt, variant));
  run_reference(&m, H, W, &r);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(sg_tape_create(&tape));
  SG_REQUIRE_OK(make_sharded(&vx, "x", dt, mesh, 4, r.gx, r.x, 1, &xb));
  for (int step = 0; step < 2;
       ++step) { /* the second step reuses the cached plans */
    SG_REQUIRE_OK(model_body(tape, &m, &vx, &y));
    SG_CHECK(sg_var_is_sharded(y), "%s: output not sharded", what);
    SG_CHECK(!memcmp(sg_var_global_shape(y), r.gy, sizeof r.gy),
             "%s: output global shape", what);
    cmp_local("output", what, y, &y->value, r.y, rel, abs_tol);
    if (step == 0)
      SG_REQUIRE_OK(make_sharded(&vt, "t", dt, mesh, 4, r.gy, r.tgt, 0, &tb));
    SG_REQUIRE_OK(sg_ag_loss(tape, SG_LOSS_MSE, y, &vt, &loss));
    double l = sg_var_item(loss);
    SG_CHECK(fabs(l - r.loss) <= rel * fabs(r.loss),
             "%s: loss %.17g vs one process %.17g", what, l, r.loss);
    SG_REQUIRE_OK(sg_tape_backward(tape, loss));
    cmp_local("dx", what, &vx, &vx.grad, r.dx, rel, abs_tol);
    SG_REQUIRE_OK(sg_var_zero_grad(&vx));
    for (int k = 0; k < NPARAM; ++k) {
      sg_var *p = &m.p[k];
      int64_t n = sg_test_numel(p->value.ndim, p->value.shape);
      if (variant == 0 && (k == 6 || k == 7)) continue; /* convt unused */
      double *g = malloc((size_t)n * sizeof *g);
      for (int64_t i = 0; i < n; ++i) g[i] = sg_test_get(p->grad.data, dt, i);
      /* partial sums over the mesh dims that split the data: every dim here */
      MPI_Allreduce(MPI_IN_PLACE, g, (int)n, MPI_DOUBLE, MPI_SUM,
                    sg_mesh_comm(mesh));
      char label[240];
      snprintf(label, sizeof label, "d%s on %s", p->name, what);
      SG_CHECK(sg_test_cmp_f64(label, g, m.ref_grad[k], n,
                               dt == SG_DTYPE_F64 ? 1e-9 : 1e-4,
                               dt == SG_DTYPE_F64 ? 1e-11 : 1e-5) == 0,
               "%s", label);
      free(g);
      sg_var_zero_grad(p);
    }
  }
done:
  sg_tape_destroy(&tape);
  sg_var_release(&vx);
  sg_var_release(&vt);
  free(xb);
  free(tb);
  sg_mesh_destroy(&mesh);
  ref_free(&r);
  model_free(&m);
}


/* ---- a generic small chain: one process vs sharded -------------------------- */

typedef sg_status (*chain_fn)(sg_tape_t t, sg_var *prm, sg_var *x,
                              sg_var **out);

/* conv 1-D k5 s2 periodic pad 2 -> SiLU -> conv k3 replicate pad (2, 0) */
static sg_status chain_1d(sg_tape_t t, sg_var *prm, sg_var *x, sg_var **out) {
  sg_status st = SG_OK;
  sg_var *h1, *h2;
  sg_window a1[1] = {{.stride = 2, .pad = {2, 2}, .boundary = SG_PAD_PERIODIC}};
  SG_TRY(sg_ag_conv(t, x, &prm[0], &prm[1], a1, &h1));
  SG_TRY(sg_ag_act(t, SG_ACT_SILU, h1, &h2));
  sg_window a2[1] = {{.pad = {2, 0}, .boundary = SG_PAD_REPLICATE}};
  SG_TRY(sg_ag_conv(t, h2, &prm[2], NULL, a2, out));
fail:
  return st;
}

/* conv 3-D k3 (periodic, reflect, zero) -> instance norm -> max pool 2 ->
 * nearest up 2 -> add a 1x1 linear of itself */
static sg_status chain_3d(sg_tape_t t, sg_var *prm, sg_var *x, sg_var **out) {
  sg_status st = SG_OK;
  sg_var *h1, *h2, *h3, *h4, *h5;
  sg_window a1[3] = {{.pad = {1, 1}, .boundary = SG_PAD_PERIODIC},
                     {.pad = {1, 1}, .boundary = SG_PAD_REFLECT},
                     {.pad = {1, 1}, .boundary = SG_PAD_ZERO}};
  SG_TRY(sg_ag_conv(t, x, &prm[0], &prm[1], a1, &h1));
  sg_norm_desc nd = {.kind = SG_NORM_INSTANCE, .eps = 1e-5};
  SG_TRY(sg_ag_norm(t, &nd, h1, NULL, NULL, &h2));
  int64_t k[3] = {2, 2, 2};
  sg_window pa[3] = {{.kernel = k[0], .stride = 2},
                     {.kernel = k[1], .stride = 2},
                     {.kernel = k[2], .stride = 2}};
  SG_TRY(sg_ag_pool(t, SG_POOL_MAX, h2, pa, &h3));
  SG_TRY(sg_ag_upsample(t, SG_UPSAMPLE_NEAREST, h3, k, &h4));
  SG_TRY(sg_ag_linear(t, h4, &prm[2], NULL, &h5));
  SG_TRY(sg_ag_binary(t, SG_BINARY_ADD, h4, h5, out));
fail:
  return st;
}

/* Run chain on the global x (every rank) and on the mesh; compare output,
 * MSE loss, dx and the summed parameter gradients (f64). */
static void run_generic(const char *what, const char *spec, chain_fn chain,
                        int nd, const int64_t *gx, int npar,
                        const int64_t (*pshape)[5], const int *pnd) {
  sg_var prm[4], vx, vt, gxv, gtv, *y = NULL, *loss = NULL;
  sg_tape_t tape = NULL;
  sg_mesh_t mesh = NULL;
  double *x = NULL, *tg = NULL, *yref = NULL, *dxref = NULL, *pgref[4] = {NULL};
  void *xb = NULL, *tb = NULL;
  int64_t gy[SG_TENSOR_MAX_DIMS];
  double lref = 0;
  memset(prm, 0, sizeof prm);
  memset(&vx, 0, sizeof vx);
  memset(&vt, 0, sizeof vt);
  memset(&gxv, 0, sizeof gxv);
  memset(&gtv, 0, sizeof gtv);
  char label[200];
  snprintf(label, sizeof label, "%s on %s", what, spec);
  if (sg_test_rank == 0) printf("generic: %s\n", label), fflush(stdout);
  rs = 0x777ull;
  for (int k = 0; k < npar; ++k) {
    SG_REQUIRE_OK(sg_var_init_param(&prm[k], "p", SG_DTYPE_F64, pnd[k],
                                    pshape[k], NULL, NULL));
    int64_t n = sg_test_numel(pnd[k], pshape[k]);
    for (int64_t i = 0; i < n; ++i)
      ((double *)prm[k].value.data)[i] = 0.5 * urand();
    pgref[k] = calloc((size_t)n, sizeof(double));
  }
  int64_t nx = sg_test_numel(nd, gx);
  x = malloc((size_t)nx * sizeof *x);
  dxref = malloc((size_t)nx * sizeof *dxref);
  for (int64_t i = 0; i < nx; ++i) x[i] = urand();
  /* one process */
  SG_REQUIRE_OK(sg_tape_create(&tape));
  SG_REQUIRE_OK(sg_var_init(&gxv, "x", SG_DTYPE_F64, nd, gx, x, 1));
  SG_REQUIRE_OK(chain(tape, prm, &gxv, &y));
  memcpy(gy, y->value.shape, sizeof gy);
  int64_t ny = sg_test_numel(nd, gy);
  tg = malloc((size_t)ny * sizeof *tg);
  yref = malloc((size_t)ny * sizeof *yref);
  for (int64_t i = 0; i < ny; ++i)
    tg[i] = urand(), yref[i] = ((double *)y->value.data)[i];
  SG_REQUIRE_OK(sg_var_init(&gtv, "t", SG_DTYPE_F64, nd, gy, tg, 0));
  SG_REQUIRE_OK(sg_ag_loss(tape, SG_LOSS_MSE, y, &gtv, &loss));
  lref = sg_var_item(loss);
  SG_REQUIRE_OK(sg_tape_backward(tape, loss));
  memcpy(dxref, gxv.grad.data, (size_t)nx * sizeof *dxref);
  for (int k = 0; k < npar; ++k) {
    memcpy(pgref[k], prm[k].grad.data,
           (size_t)sg_test_numel(pnd[k], pshape[k]) * sizeof(double));
    sg_var_zero_grad(&prm[k]);
  }
  /* sharded */
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(make_sharded(&vx, "x", SG_DTYPE_F64, mesh, nd, gx, x, 1, &xb));
  SG_REQUIRE_OK(chain(tape, prm, &vx, &y));
  SG_CHECK(!memcmp(sg_var_global_shape(y), gy, (size_t)nd * sizeof *gy),
           "%s: global shape", label);
  cmp_local("output", label, y, &y->value, yref, 1e-10, 1e-12);
  SG_REQUIRE_OK(make_sharded(&vt, "t", SG_DTYPE_F64, mesh, nd, gy, tg, 0, &tb));
  SG_REQUIRE_OK(sg_ag_loss(tape, SG_LOSS_MSE, y, &vt, &loss));
  SG_CHECK(fabs(sg_var_item(loss) - lref) <= 1e-10 * fabs(lref),
           "%s: loss %.17g vs %.17g", label, sg_var_item(loss), lref);
  SG_REQUIRE_OK(sg_tape_backward(tape, loss));
  cmp_local("dx", label, &vx, &vx.grad, dxref, 1e-10, 1e-12);
  for (int k = 0; k < npar; ++k) {
    int64_t n = sg_test_numel(pnd[k], pshape[k]);
    MPI_Allreduce(MPI_IN_PLACE, prm[k].grad.data, (int)n, MPI_DOUBLE, MPI_SUM,
                  sg_mesh_comm(mesh));
    SG_CHECK(sg_test_cmp_f64(label, prm[k].grad.data, pgref[k], n, 1e-9,
                             1e-11) == 0,
             "%s: parameter %d gradient", label, k);
  }
done:
  sg_tape_destroy(&tape);
  for (int k = 0; k < 4; ++k) {
    sg_var_release(&prm[k]);
    free(pgref[k]);
  }
  sg_var_release(&vx);
  sg_var_release(&vt);
  sg_var_release(&gxv);
  sg_var_release(&gtv);
  sg_mesh_destroy(&mesh);
  free(x);
  free(tg);
  free(yref);
  free(dxref);
  free(xb);
  free(tb);
}

/* ---- finite differences of the uneven up-sampling paths (f64) --------------- */

/* sum(r * op(x)) on the mesh; with grads: backward, dx gathered into gdx. */
static double up_loss(sg_tape_t tape, sg_mesh_t mesh, int kind,
                      const int64_t *gx, double *x, sg_var *w, sg_var *b,
                      double *r, double *gdx) {
  sg_var vx, vr, *y = NULL, *m = NULL, *loss = NULL;
  void *xb = NULL, *rb = NULL;
  double val = NAN;
  memset(&vx, 0, sizeof vx);
  memset(&vr, 0, sizeof vr);
  const int64_t sc[2] = {2, 3};
  int prev = sg_tape_set_grad_enabled(tape, gdx != NULL);
  SG_REQUIRE_OK(make_sharded(&vx, "x", SG_DTYPE_F64, mesh, 4, gx, x, 1, &xb));
  if (kind == 2)
    SG_REQUIRE_OK(sg_ag_convt(tape, &vx, w, b, &y));
  else
    SG_REQUIRE_OK(sg_ag_upsample(
        tape, kind ? SG_UPSAMPLE_LINEAR : SG_UPSAMPLE_NEAREST, &vx, sc, &y));
  SG_REQUIRE_OK(make_sharded(&vr, "r", SG_DTYPE_F64, mesh, 4,
                             sg_var_global_shape(y), r, 0, &rb));
  SG_REQUIRE_OK(sg_ag_binary(tape, SG_BINARY_MUL, y, &vr, &m));
  SG_REQUIRE_OK(sg_ag_loss(tape, SG_LOSS_SUM, m, NULL, &loss));
  val = sg_var_item(loss);
  if (gdx) {
    SG_REQUIRE_OK(sg_tape_backward(tape, loss));
    int64_t off[4], shape[4];
    SG_REQUIRE_OK(sg_shardtensor_box(mesh, 4, gx, vx.placements,
                                     sg_mesh_rank(mesh), off, shape));
    memset(gdx, 0, (size_t)sg_test_numel(4, gx) * sizeof *gdx);
    sg_test_box_copy(4, gx, off, shape, gdx, vx.grad.data, SG_DTYPE_F64, 1);
    MPI_Allreduce(MPI_IN_PLACE, gdx, (int)sg_test_numel(4, gx), MPI_DOUBLE,
                  MPI_SUM, sg_mesh_comm(mesh));
  }
done:
  sg_tape_clear(tape);
  sg_tape_set_grad_enabled(tape, prev);
  sg_var_release(&vx);
  sg_var_release(&vr);
  free(xb);
  free(rb);
  return val;
}

static void run_up_fd(const char *spec) {
  sg_mesh_t mesh = NULL;
  sg_tape_t tape = NULL;
  sg_var w, b;
  memset(&w, 0, sizeof w);
  memset(&b, 0, sizeof b);
  const int64_t gx[4] = {1, 2, 7, 5}, gy[4] = {1, 3, 14, 15},
                ws[4] = {2, 3, 2, 3}, bs[1] = {3};
  double x[70], r[3 * 14 * 15], dx[70], dw[36];
  rs = 0x4242ull;
  for (int i = 0; i < 70; ++i) x[i] = urand();
  for (int i = 0; i < 3 * 14 * 15; ++i) r[i] = urand();
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(sg_tape_create(&tape));
  SG_REQUIRE_OK(sg_var_init_param(&w, "wu", SG_DTYPE_F64, 4, ws, NULL, NULL));
  SG_REQUIRE_OK(sg_var_init_param(&b, "bu", SG_DTYPE_F64, 1, bs, NULL, NULL));
  for (int i = 0; i < 36; ++i) ((double *)w.value.data)[i] = urand();
  for (int i = 0; i < 3; ++i) ((double *)b.value.data)[i] = urand();
  (void)gy;
  for (int kind = 0; kind < 3; ++kind) {
    const char *name = kind == 0 ? "nearest" : kind == 1 ? "bilinear" : "convt";
    /* r has the output's global shape: nearest/bilinear keep 2 channels */
    up_loss(tape, mesh, kind, gx, x, &w, &b, r, dx);
    if (kind == 2) {
      memcpy(dw, w.grad.data, sizeof dw);
      MPI_Allreduce(MPI_IN_PLACE, dw, 36, MPI_DOUBLE, MPI_SUM,
                    sg_mesh_comm(mesh));
      sg_var_zero_grad(&w);
      sg_var_zero_grad(&b);
    }
    /* elements of rows 2..4 of one plane (where the uneven splits meet),
     * and for convt some weights */
    const int pick[6] = {10, 13, 16, 19, 22, 45};
    double *at[12], an[12];
    int nt = 0;
    for (int q = 0; q < 6; ++q, ++nt)
      at[nt] = &x[pick[q]], an[nt] = dx[pick[q]];
    for (int i = 1; kind == 2 && i < 36; i += 7, ++nt)
      at[nt] = (double *)w.value.data + i, an[nt] = dw[i];
    const double h = 1e-6;
    int64_t bad = 0;
    for (int q = 0; q < nt; ++q) {
      double keep = *at[q];
      *at[q] = keep + h;
      double up = up_loss(tape, mesh, kind, gx, x, &w, &b, r, NULL);
      *at[q] = keep - h;
      double dn = up_loss(tape, mesh, kind, gx, x, &w, &b, r, NULL);
      *at[q] = keep;
      double fd = (up - dn) / (2 * h);
      if (fabs(fd - an[q]) > 1e-8 + 1e-7 * fabs(fd)) {
        if (!bad)
          sg_test_fail_at(__FILE__, __LINE__,
                          "%s on %s: gradient %d = %.12g, finite difference "
                          "%.12g",
                          name, spec, q, an[q], fd);
        ++bad;
      }
    }
    SG_CHECK(bad == 0,
             "%s on %s: %lld gradients differ from finite differences", name,
             spec, (long long)bad);
  }
done:
  sg_tape_destroy(&tape);
  sg_var_release(&w);
  sg_var_release(&b);
  sg_mesh_destroy(&mesh);
}

/* ---- errors: every rank gets the same status, nobody hangs ------------------- */

static sg_status conv_on(sg_tape_t tape, sg_var *x, sg_var *w,
                         const sg_window *a) {
  sg_var *y = NULL;
  return sg_ag_conv(tape, x, w, NULL, a, &y);
}

/* Pooling on the tape, one process and sharded, against loops by hand
 * (issue 20): all-negative inputs with zero padding (max pooling pads with
 * -inf, so no padded zero may win; average pooling counts the padding:
 * count_include_pad) and dilation 2. Loss sum(y * r): dx by hand (max: r to
 * the first maximum of each window, avg: r / window size to every cell
 * inside). f64. */
static void run_pool_ref(const char *spec) {
  enum { N = 2, C = 2, H = 13, W = 11 };
  const int64_t gx[4] = {N, C, H, W};
  const sg_window a[2] = {
      {.kernel = 3, .stride = 1, .dilation = 2, .pad = {2, 2}},
      {.kernel = 3, .stride = 2, .dilation = 2, .pad = {2, 1}}};
  const int64_t OH = (H + 4 - 4 - 1) / 1 + 1, OW = (W + 3 - 4 - 1) / 2 + 1;
  const int64_t gy[4] = {N, C, OH, OW}, nx = N * C * H * W,
                ny = N * C * OH * OW;
  double *x = malloc(nx * sizeof *x), *r = malloc(ny * sizeof *r);
  double *yref = malloc(ny * sizeof *yref), *dxref = malloc(nx * sizeof *dxref);
  rs = 0x5151ull;
  for (int64_t i = 0; i < nx; ++i) x[i] = -2 + urand();
  for (int64_t i = 0; i < ny; ++i) r[i] = urand();
  for (int kind = 0; kind < 2; ++kind) {
    const sg_pool_kind pk = kind ? SG_POOL_MAX : SG_POOL_AVG;
    char label[160];
    snprintf(label, sizeof label, "%s d2 zero padding, negative input on %s",
             kind ? "max pool" : "avg pool", spec);
    memset(dxref, 0, nx * sizeof *dxref);
    for (int64_t p = 0; p < N * C; ++p)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double acc = kind ? -INFINITY : 0;
          int64_t best = -1;
          for (int u = 0; u < 3; ++u)
            for (int v = 0; v < 3; ++v) {
              int64_t h = i * a[0].stride - a[0].pad[0] + u * 2,
                      w = j * a[1].stride - a[1].pad[0] + v * 2;
              if (h < 0 || h >= H || w < 0 || w >= W) continue;
              int64_t e = (p * H + h) * W + w;
              if (kind && (best < 0 || x[e] > acc)) acc = x[e], best = e;
              if (!kind) acc += x[e], dxref[e] += r[(p * OH + i) * OW + j] / 9;
            }
          yref[(p * OH + i) * OW + j] = kind ? acc : acc / 9;
          if (kind) dxref[best] += r[(p * OH + i) * OW + j];
        }
    sg_tape_t tape = NULL;
    sg_mesh_t mesh = NULL;
    sg_var vx, vr, *y = NULL, *yr = NULL, *loss = NULL;
    void *xb = NULL, *rb = NULL;
    memset(&vx, 0, sizeof vx);
    memset(&vr, 0, sizeof vr);
    SG_REQUIRE_OK(sg_tape_create(&tape));
    if (spec) {
      SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
      SG_REQUIRE_OK(
          make_sharded(&vx, "x", SG_DTYPE_F64, mesh, 4, gx, x, 1, &xb));
    } else {
      SG_REQUIRE_OK(sg_var_init(&vx, "x", SG_DTYPE_F64, 4, gx, x, 1));
    }
    SG_REQUIRE_OK(sg_ag_pool(tape, pk, &vx, a, &y));
    SG_CHECK(!memcmp(sg_var_global_shape(y), gy, sizeof gy), "%s: output shape",
             label);
    if (spec) {
      cmp_local("output", label, y, &y->value, yref, 1e-13, 1e-14);
      SG_REQUIRE_OK(
          make_sharded(&vr, "r", SG_DTYPE_F64, mesh, 4, gy, r, 0, &rb));
    } else {
      SG_CHECK(sg_test_cmp_f64(label, y->value.data, yref, ny, 1e-13, 1e-14) ==
                   0,
               "%s", label);
      SG_REQUIRE_OK(sg_var_init(&vr, "r", SG_DTYPE_F64, 4, gy, r, 0));
    }
    int64_t zeros = 0, nl = sg_test_numel(4, y->value.shape);
    for (int64_t i = 0; i < nl; ++i) zeros += ((double *)y->value.data)[i] == 0;
    SG_CHECK(zeros == 0, "%s: %lld padded zeros in the output", label,
             (long long)zeros);
    SG_REQUIRE_OK(sg_ag_binary(tape, SG_BINARY_MUL, y, &vr, &yr));
    SG_REQUIRE_OK(sg_ag_loss(tape, SG_LOSS_SUM, yr, NULL, &loss));
    SG_REQUIRE_OK(sg_tape_backward(tape, loss));
    if (spec)
      cmp_local("dx", label, &vx, &vx.grad, dxref, 1e-12, 1e-13);
    else
      SG_CHECK(sg_test_cmp_f64(label, vx.grad.data, dxref, nx, 1e-12, 1e-13) ==
                   0,
               "%s dx", label);
  done:
    sg_tape_destroy(&tape);
    sg_var_release(&vx);
    sg_var_release(&vr);
    sg_mesh_destroy(&mesh);
    free(xb);
    free(rb);
  }
  free(x);
  free(r);
  free(yref);
  free(dxref);
}

static void run_errors(void) {
  sg_mesh_t mesh = NULL;
  sg_tape_t tape = NULL;
  sg_var x, xc, xp, x7, xu, w, ws, *y = NULL, *loss = NULL;
  void *bx = NULL, *bc = NULL, *bp = NULL, *b7 = NULL;
  double g[1 * 4 * 7 * 5];
  memset(&x, 0, sizeof x);
  memset(&xc, 0, sizeof xc);
  memset(&xp, 0, sizeof xp);
  memset(&x7, 0, sizeof x7);
  memset(&xu, 0, sizeof xu);
  memset(&w, 0, sizeof w);
  memset(&ws, 0, sizeof ws);
  for (int i = 0; i < 140; ++i) g[i] = 0.01 * i;
  char spec[32];
  snprintf(spec, sizeof spec, "h=%d", sg_test_size);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(sg_tape_create(&tape));
  const int64_t g5[4] = {1, 4, 5, 5}, g7[4] = {1, 4, 7, 5},
                wsh[4] = {4, 4, 3, 3};
  SG_REQUIRE_OK(make_sharded(&x, "x", SG_DTYPE_F64, mesh, 4, g5, g, 1, &bx));
  SG_REQUIRE_OK(make_sharded(&x7, "x7", SG_DTYPE_F64, mesh, 4, g7, g, 1, &b7));
  SG_REQUIRE_OK(sg_var_init_param(&w, "w", SG_DTYPE_F64, 4, wsh, NULL, NULL));
  sg_window a[2] = {{.pad = {1, 1}}, {.pad = {1, 1}}};
  /* channels sharded, Partial: placements conv does not accept */
  sg_placement pc[1] = {sg_shard(1)}, pp[1] = {sg_partial()};
  int64_t off[4], shp[4];
  SG_REQUIRE_OK(
      sg_shardtensor_box(mesh, 4, g5, pc, sg_mesh_rank(mesh), off, shp));
  bc = calloc((size_t)sg_test_numel(4, shp) + 1, sizeof(double));
  SG_REQUIRE_OK(sg_var_init(&xc, "xc", SG_DTYPE_F64, 4, shp, bc, 1));
  SG_REQUIRE_OK(sg_var_set_sharding(&xc, mesh, pc, g5));
  SG_CHECK_STATUS(conv_on(tape, &xc, &w, a), SG_ERR_INVALID_ARG);
  bp = calloc((size_t)sg_test_numel(4, g5), sizeof(double));
  SG_REQUIRE_OK(sg_var_init(&xp, "xp", SG_DTYPE_F64, 4, g5, bp, 1));
  SG_REQUIRE_OK(sg_var_set_sharding(&xp, mesh, pp, g5));
  SG_CHECK_STATUS(conv_on(tape, &xp, &w, a), SG_ERR_INVALID_ARG);
  /* shapes: concat of different global grids, binary sharded vs plain */
  sg_var *two[2] = {&x, &x7};
  SG_CHECK_STATUS(sg_ag_concat(tape, 2, two, &y), SG_ERR_SHAPE);
  SG_REQUIRE_OK(sg_var_init(&xu, "xu", SG_DTYPE_F64, 4, g5, bp, 0));
  SG_CHECK_STATUS(sg_ag_binary(tape, SG_BINARY_ADD, &x, &xu, &y),
                  SG_ERR_INVALID_ARG);
  /* a parameter that is sharded */
  SG_REQUIRE_OK(sg_var_init(&ws, "ws", SG_DTYPE_F64, 4, wsh, bp, 1));
  sg_placement pr[1] = {sg_replicate()};
  SG_REQUIRE_OK(sg_var_set_sharding(&ws, mesh, pr, wsh));
  SG_CHECK_STATUS(conv_on(tape, &x, &ws, a), SG_ERR_INVALID_ARG);
  /* a shard thinner than the halo (5 rows over >= 2 ranks, halo 3) */
  if (sg_test_size > 1) {
    sg_window th[2] = {{.dilation = 3, .pad = {3, 3}},
                       {.dilation = 1, .pad = {1, 1}}};
    SG_CHECK_STATUS(conv_on(tape, &x, &w, th), SG_ERR_HALO);
  }
  /* a wrong local block on rank 0 only: every rank fails */
  if (sg_test_size > 1) {
    sg_var bad;
    memset(&bad, 0, sizeof bad);
    int64_t l0 = sg_split_size(5, sg_test_size, sg_test_rank) +
                 (sg_test_rank == 0);
    int64_t ls[4] = {1, 4, l0, 5};
    sg_placement ph[1] = {sg_shard(2)};
    SG_CHECK_OK(sg_var_init(&bad, "bad", SG_DTYPE_F64, 4, ls, NULL, 0));
    SG_CHECK_STATUS(sg_var_set_sharding(&bad, mesh, ph, g5), SG_ERR_SHAPE);
    sg_var_release(&bad);
  }
  SG_CHECK(sg_tape_size(tape) == 0, "failed ops left %d nodes",
           sg_tape_size(tape));
  /* and the tape still works */
  SG_CHECK_OK(sg_ag_conv(tape, &x, &w, NULL, a, &y));
  if (y) {
    SG_CHECK_OK(sg_ag_loss(tape, SG_LOSS_MEAN, y, NULL, &loss));
    if (loss) SG_CHECK_OK(sg_tape_backward(tape, loss));
  }
done:
  sg_tape_destroy(&tape);
  sg_var_release(&x);
  sg_var_release(&xc);
  sg_var_release(&xp);
  sg_var_release(&x7);
  sg_var_release(&xu);
  sg_var_release(&w);
  sg_var_release(&ws);
  sg_mesh_destroy(&mesh);
  free(bx);
  free(bc);
  free(bp);
  free(b7);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  const char *specs[5][4] = {{NULL},
                             {"h=1", "dp=1,h=1,w=1", NULL},
                             {"h=2", "w=2", "dp=2", NULL},
                             {"h=3", "w=3", NULL},
                             {"h=2,w=2", "dp=2,h=2", "dp=2,w=2", "h=4"}};
  int p = sg_test_size < 5 ? sg_test_size : 4;
  for (int s = 0; s < 4 && specs[p][s]; ++s) {
    run_chain(specs[p][s], SG_DTYPE_F64, 0, 29, 35);
    run_chain(specs[p][s], SG_DTYPE_F64, 1, 64, 64);
  }
  run_chain(specs[p][0], SG_DTYPE_F32, 0, 64, 64);
  run_chain(specs[p][0], SG_DTYPE_F32, 1, 29, 35);
  /* 1-D and 3-D */
  const int64_t gx1[3] = {2, 2, 23}, p1[3][5] = {{3, 2, 5}, {3}, {2, 3, 3}};
  const int n1[3] = {3, 1, 3};
  const int64_t gx3[5] = {2, 2, 9, 7, 6},
                p3[3][5] = {{3, 2, 3, 3, 3}, {3}, {3, 3}};
  const int n3[3] = {5, 1, 2};
  for (int s = 0; s < 4 && specs[p][s]; ++s) {
    if (!strchr(specs[p][s], 'w'))
      run_generic("conv 1-D", specs[p][s], chain_1d, 3, gx1, 3, p1, n1);
    run_generic("conv 3-D", specs[p][s], chain_3d, 5, gx3, 3, p3, n3);
  }
  /* finite differences: up-sampling and convt on uneven splits */
  run_up_fd(p == 4 ? "h=2,w=2" : specs[p][0]);
  /* pooling with -inf padding and dilation against loops by hand */
  run_pool_ref(NULL);
  for (int s = 0; s < 4 && specs[p][s]; ++s) run_pool_ref(specs[p][s]);
  run_errors();
  return sg_test_finish();
}
