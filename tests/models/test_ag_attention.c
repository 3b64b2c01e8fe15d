/* The transformer ops of the tape (models/ag_attention.c) in a pre-LN
 * block: h = x + pos (sg_ag_add_field), y = h + mhsa(layernorm(h)),
 * loss = mse(y, target).
 *  - one process, f64: every gradient (x, pos, LayerNorm, QKV and output
 *    projections) against central finite differences;
 *  - f32 against f64 (loss and gradients, relative 1e-4);
 *  - sharded (2, 3, 4 ranks: h, w, dp and their products; 7x5 tokens, so
 *    the ring's blocks are uneven): loss, dx (each rank's box), the
 *    replicated parameters' gradients (summed over the split dims) and the
 *    position field's (this rank's box, summed over dp) against one
 *    process at relative 1e-10, f64; the bytes the ring moved equal the
 *    formulas (forward and backward: the K/V of the other ranks' tokens;
 *    the dK/dV accumulators: all of dK/dV). */
#include "sg_autograd.h"
#include "sg_mesh.h"
#include "sg_test.h"
#include "sg_test_tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { NB = 2, C = 4, HY = 7, WX = 5, HEADS = 2, NP = 7 };

/* parameters: gamma, beta, wqkv, bqkv, wo, bo, pos */
static const int pnd[NP] = {1, 1, 2, 1, 2, 1, 3};
static const int64_t pshape[NP][3] = {{C},    {C}, {3 * C, C}, {3 * C},
                                      {C, C}, {C}, {C, HY, WX}};

typedef struct block {
  sg_dtype dt;
  sg_var x, target, p[NP];
  double *gx, *gt, *gp[NP]; /* global values (f64) */
} block;

static int64_t numel(int nd, const int64_t *s) {
  int64_t n = 1;
  for (int i = 0; i < nd; ++i) n *= s[i];
  return n;
}

static const int64_t xshape[4] = {NB, C, HY, WX};

static void gen(block *b) {
  const int64_t nx = numel(4, xshape);
  b->gx = malloc((size_t)nx * sizeof(double));
  b->gt = malloc((size_t)nx * sizeof(double));
  sg_test_rand_fill(b->gx, nx, 1, -1, 1);
  sg_test_rand_fill(b->gt, nx, 2, -1, 1);
  for (int i = 0; i < NP; ++i) {
    int64_t n = numel(pnd[i], pshape[i]);
    b->gp[i] = malloc((size_t)n * sizeof(double));
    sg_test_rand_fill(b->gp[i], n, 10 + (uint64_t)i, -0.7, 0.7);
    if (i == 0)
      for (int64_t k = 0; k < n; ++k) b->gp[i][k] += 1.0; /* gamma ~ 1 */
  }
}

static sg_status forward(sg_tape_t t, block *b, sg_var **loss) {
  sg_status st = SG_OK;
  sg_var *h = NULL, *n = NULL, *a = NULL, *y = NULL, *P = b->p;
  SG_TRY(sg_ag_add_field(t, &b->x, &P[6], &h));
  SG_TRY(sg_ag_layernorm(t, 1e-5, h, &P[0], &P[1], &n));
  SG_TRY(sg_ag_mhsa(t, HEADS, n, &P[2], &P[3], &P[4], &P[5], &a));
  SG_TRY(sg_ag_binary(t, SG_BINARY_ADD, h, a, &y));
  SG_TRY(sg_ag_loss(t, SG_LOSS_MSE, y, &b->target, loss));
fail:
  return st;
}

/* A leaf over a copy of global values in dtype dt (local box when the
 * parameter is the position field and x is sharded). */
static sg_status leaf(sg_var *v, const char *nm, sg_dtype dt, int nd,
                      const int64_t *shape, const int64_t *off,
                      const int64_t *gshape, double *g, int param) {
  sg_status st = SG_OK;
  if (param)
    SG_TRY(sg_var_init_param(v, nm, dt, nd, shape, NULL, NULL));
  else
    SG_TRY(sg_var_init(v, nm, dt, nd, shape, NULL, 1));
  sg_test_box_copy(nd, gshape, off, shape, g, v->value.data, dt, 0);
fail:
  return st;
}

static sg_status setup_plain(block *b, sg_dtype dt) {
  sg_status st = SG_OK;
  const int64_t z[4] = {0, 0, 0, 0};
  b->dt = dt;
  SG_TRY(leaf(&b->x, "x", dt, 4, xshape, z, xshape, b->gx, 0));
  SG_TRY(leaf(&b->target, "t", dt, 4, xshape, z, xshape, b->gt, 0));
  b->target.requires_grad = 0;
  for (int i = 0; i < NP; ++i)
    SG_TRY(
        leaf(&b->p[i], "p", dt, pnd[i], pshape[i], z, pshape[i], b->gp[i], 1));
fail:
  return st;
}

static void release(block *b) {
  sg_var_release(&b->x);
  sg_var_release(&b->target);
  for (int i = 0; i < NP; ++i) sg_var_release(&b->p[i]);
}

static void gen_free(block *b) {
  free(b->gx), free(b->gt);
  for (int i = 0; i < NP; ++i) free(b->gp[i]);
}

static double loss_of(sg_tape_t t, block *b) {
  sg_var *l = NULL;
  int prev = sg_tape_set_grad_enabled(t, 0);
  double v = forward(t, b, &l) == SG_OK ? sg_var_item(l) : NAN;
  sg_tape_clear(t);
  sg_tape_set_grad_enabled(t, prev);
  return v;
}

/* central differences on entries of v (f64) against its gradient */
static int fd_var(sg_tape_t t, block *b, sg_var *v) {
  double *p = v->value.data, *g = v->grad.data;
  int bad = 0;
  const int64_t n = sg_tensor_numel(&v->value), step = n > 24 ? 5 : 1;
  for (int64_t i = 0; i < n; i += step) { /* every 5th of a large one */
    const double e = 1e-6, p0 = p[i];
    p[i] = p0 + e;
    double lp = loss_of(t, b);
    p[i] = p0 - e;
    double lm = loss_of(t, b);
    p[i] = p0;
    double fd = (lp - lm) / (2 * e);
    if (!(fabs(fd - g[i]) <= 1e-7 + 1e-6 * fabs(g[i]))) bad++;
  }
  return bad;
}

static void test_fd(void) {
  block b;
  memset(&b, 0, sizeof b);
  sg_tape_t t = NULL;
  sg_var *l = NULL;
  gen(&b);
  SG_REQUIRE_OK(sg_tape_create(&t));
  SG_REQUIRE_OK(setup_plain(&b, SG_DTYPE_F64));
  SG_REQUIRE_OK(forward(t, &b, &l));
  SG_CHECK(isfinite(sg_var_item(l)), "loss finite");
  SG_REQUIRE_OK(sg_tape_backward(t, l));
  SG_CHECK(fd_var(t, &b, &b.x) == 0, "dx differs from finite differences");
  static const char *nm[NP] = {"gamma", "beta", "wqkv", "bqkv",
                               "wo",    "bo",   "pos"};
  for (int i = 0; i < NP; ++i)
    SG_CHECK(fd_var(t, &b, &b.p[i]) == 0, "d%s differs from finite differences",
             nm[i]);
done:
  sg_tape_destroy(&t);
  release(&b);
  gen_free(&b);
}

static double get(const sg_tensor *t, int64_t i) {
  return sg_test_get(t->data, t->dtype, i);
}

static int cmp_tensors(const sg_tensor *a, const sg_tensor *r, double rel) {
  double scale = 0;
  int bad = 0;
  for (int64_t i = 0; i < sg_tensor_numel(r); ++i)
    scale = fmax(scale, fabs(get(r, i)));
  for (int64_t i = 0; i < sg_tensor_numel(r); ++i)
    if (!(fabs(get(a, i) - get(r, i)) <= rel * scale)) bad++;
  return bad;
}

/* f32 against f64: the same block, the same values */
static void test_f32(void) {
  block b[2];
  memset(b, 0, sizeof b);
  sg_tape_t t = NULL;
  double l[2] = {0, 0};
  gen(&b[0]);
  b[1] = b[0]; /* the same global values (freed once) */
  SG_REQUIRE_OK(sg_tape_create(&t));
  for (int k = 0; k < 2; ++k) {
    sg_var *lv = NULL;
    SG_REQUIRE_OK(setup_plain(&b[k], k ? SG_DTYPE_F32 : SG_DTYPE_F64));
    SG_REQUIRE_OK(forward(t, &b[k], &lv));
    l[k] = sg_var_item(lv);
    SG_REQUIRE_OK(sg_tape_backward(t, lv));
  }
  SG_CHECK(fabs(l[1] - l[0]) <= 1e-5 * fabs(l[0]), "f32 loss %.9g, f64 %.9g",
           l[1], l[0]);
  SG_CHECK(cmp_tensors(&b[1].x.grad, &b[0].x.grad, 1e-4) == 0,
           "f32 dx differs from f64");
  for (int i = 0; i < NP; ++i)
    SG_CHECK(cmp_tensors(&b[1].p[i].grad, &b[0].p[i].grad, 1e-4) == 0,
             "f32 gradient of parameter %d differs from f64", i);
done:
  sg_tape_destroy(&t);
  release(&b[0]);
  release(&b[1]);
  gen_free(&b[0]);
}

/* ---- sharded against one process ------------------------------------------ */

/* The reference: loss, dx, parameter gradients (global, f64). */
typedef struct ref {
  double loss, *dx, *dp[NP];
} ref;

static void ref_free(ref *r) {
  free(r->dx);
  for (int i = 0; i < NP; ++i) free(r->dp[i]);
}

static sg_status run_plain(block *b, ref *r) {
  sg_status st = SG_OK;
  sg_tape_t t = NULL;
  sg_var *l = NULL;
  SG_TRY(sg_tape_create(&t));
  SG_TRY(setup_plain(b, SG_DTYPE_F64));
  SG_TRY(forward(t, b, &l));
  r->loss = sg_var_item(l);
  SG_TRY(sg_tape_backward(t, l));
  r->dx = malloc(sizeof(double) * (size_t)numel(4, xshape));
  memcpy(r->dx, b->x.grad.data, sizeof(double) * (size_t)numel(4, xshape));
  for (int i = 0; i < NP; ++i) {
    size_t n = (size_t)numel(pnd[i], pshape[i]);
    r->dp[i] = malloc(n * sizeof(double));
    memcpy(r->dp[i], b->p[i].grad.data, n * sizeof(double));
  }
fail:
  sg_tape_destroy(&t);
  release(b);
  return st;
}

/* sum over the group of mask (in place) */
static void sum_over(sg_mesh_t mesh, unsigned mask, double *v, int64_t n) {
  sg_group_t g = NULL;
  if (mask && sg_mesh_group(mesh, mask, &g) == SG_OK && g)
    MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE, MPI_SUM,
                  sg_group_comm(g));
}

static void test_sharded(const char *spec, block *b, const ref *r) {
  sg_mesh_t mesh = NULL;
  sg_tape_t t = NULL;
  sg_var *l = NULL;
  sg_placement pl[SG_MESH_MAX_DIMS];
  int64_t off[4], box[4], z[3] = {0, 0, 0};
  double *want = NULL, *got = NULL;
  unsigned split = 0, bsplit = 0;
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(sg_tape_create(&t));
  sg_test_nchw_placements(mesh, pl);
  for (int m = 0; m < sg_mesh_ndims(mesh); ++m)
    if (pl[m].kind == SG_PLACEMENT_SHARD) {
      split |= 1u << m;
      if (pl[m].dim == 0) bsplit |= 1u << m;
    }
  SG_REQUIRE_OK(
      sg_shardtensor_box(mesh, 4, xshape, pl, sg_mesh_rank(mesh), off, box));
  SG_REQUIRE_OK(leaf(&b->x, "x", SG_DTYPE_F64, 4, box, off, xshape, b->gx, 0));
  SG_REQUIRE_OK(
      leaf(&b->target, "t", SG_DTYPE_F64, 4, box, off, xshape, b->gt, 0));
  b->target.requires_grad = 0;
  SG_REQUIRE_OK(sg_var_set_sharding(&b->x, mesh, pl, xshape));
  SG_REQUIRE_OK(sg_var_set_sharding(&b->target, mesh, pl, xshape));
  for (int i = 0; i < NP; ++i) {
    const int field = i == 6;
    SG_REQUIRE_OK(leaf(&b->p[i], "p", SG_DTYPE_F64, pnd[i],
                       field ? box + 1 : pshape[i], field ? off + 1 : z,
                       pshape[i], b->gp[i], 1));
  }
  sg_ag_attention_ring_bytes(NULL, 1);
  SG_REQUIRE_OK(forward(t, b, &l));
  const double lv = sg_var_item(l);
  SG_CHECK(fabs(lv - r->loss) <= 1e-10 * fabs(r->loss),
           "%s: loss %.17g, one process %.17g", spec, lv, r->loss);
  SG_REQUIRE_OK(sg_tape_backward(t, l));
  /* the ring's volume: forward and backward each receive the K/V of the
   * tokens of the other ranks, (P-1)/P of K/V when even; the dK/dV
   * accumulators make P shifts, one block each: all of dK/dV */
  const int64_t ntok = HY * WX, mine = box[2] * box[3],
                ring = box[2] < HY || box[3] < WX,
                kv = 2 * box[0] * C * (int64_t)sizeof(double);
  long long rx[3];
  sg_ag_attention_ring_bytes(rx, 1);
  SG_CHECK(rx[SG_RING_FWD_KV] == (ring ? kv * (ntok - mine) : 0) &&
               rx[SG_RING_BWD_KV] == rx[SG_RING_FWD_KV] &&
               rx[SG_RING_BWD_DKV] == (ring ? kv * ntok : 0),
           "%s: ring bytes received %lld, %lld, %lld; expected %lld, %lld, "
           "%lld",
           spec, rx[0], rx[1], rx[2],
           (long long)(ring ? kv * (ntok - mine) : 0),
           (long long)(ring ? kv * (ntok - mine) : 0),
           (long long)(ring ? kv * ntok : 0));
  /* dx: this rank's box */
  int64_t n = numel(4, box);
  want = malloc(sizeof(double) * (size_t)(n + 1));
  sg_test_box_copy(4, xshape, off, box, r->dx, want, SG_DTYPE_F64, 0);
  char msg[256];
  SG_CHECK(sg_test_cmp_ref(b->x.grad.data, SG_DTYPE_F64, want, n, 1e-10, msg,
                           sizeof msg) == 0,
           "%s: dx: %s", spec, msg);
  for (int i = 0; i < NP; ++i) {
    const int field = i == 6;
    const int64_t *s = field ? box + 1 : pshape[i];
    int64_t m = numel(pnd[i], s);
    free(want), free(got);
    want = malloc(sizeof(double) * (size_t)(m + 1));
    got = malloc(sizeof(double) * (size_t)(m + 1));
    memcpy(got, b->p[i].grad.data, sizeof(double) * (size_t)m);
    sum_over(mesh, field ? bsplit : split, got, m);
    sg_test_box_copy(pnd[i], pshape[i], field ? off + 1 : z, s, r->dp[i], want,
                     SG_DTYPE_F64, 0);
    SG_CHECK(sg_test_cmp_ref(got, SG_DTYPE_F64, want, m, 1e-10, msg,
                             sizeof msg) == 0,
             "%s: gradient of parameter %d: %s", spec, i, msg);
  }
done:
  free(want), free(got);
  sg_tape_destroy(&t);
  release(b);
  sg_mesh_destroy(&mesh);
}

static void test_meshes(void) {
  static const char *l2[] = {"h=2", "w=2", "dp=2"};
  static const char *l3[] = {"h=3", "w=3"};
  static const char *l4[] = {"h=2,w=2", "h=4", "dp=2,h=2"};
  const int np = sg_test_size;
  const char **l = np == 2 ? l2 : np == 3 ? l3 : np == 4 ? l4 : NULL;
  const int nl = np == 2 ? 3 : np == 3 ? 2 : np == 4 ? 3 : 0;
  block b;
  ref r;
  memset(&b, 0, sizeof b);
  memset(&r, 0, sizeof r);
  gen(&b);
  SG_CHECK_OK(run_plain(&b, &r));
  for (int k = 0; k < nl; ++k) test_sharded(l[k], &b, &r);
  ref_free(&r);
  gen_free(&b);
}

/* heads must divide the channels: SG_ERR_CONFIG */
static void test_bad_heads(void) {
  block b;
  memset(&b, 0, sizeof b);
  sg_tape_t t = NULL;
  sg_var *o = NULL;
  gen(&b);
  SG_REQUIRE_OK(sg_tape_create(&t));
  SG_REQUIRE_OK(setup_plain(&b, SG_DTYPE_F64));
  SG_CHECK_STATUS(sg_ag_attention(t, 3, &b.x, &b.x, &b.x, &o), SG_ERR_CONFIG);
  SG_CHECK_STATUS(sg_ag_attention(t, 0, &b.x, &b.x, &b.x, &o), SG_ERR_CONFIG);
  SG_CHECK_STATUS(sg_ag_add_field(t, &b.x, &b.p[0], &o), SG_ERR_SHAPE);
done:
  sg_tape_destroy(&t);
  release(&b);
  gen_free(&b);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  if (sg_test_size == 1) {
    test_fd();
    test_f32();
    test_bad_heads();
  } else {
    test_meshes();
  }
  return sg_test_finish();
}
