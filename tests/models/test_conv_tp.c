/* Tensor parallelism of the conv nets over channels (models/ag_tp.c,
 * sg_ag_conv_tp; issue 17 §2): on a mesh "tp=P" (P = 1..4 ranks) against
 * one process, f64 at 1e-10, forward and backward, loss = sum(y * t).
 *
 * - the conv pair y = conv_row(gelu(conv_col(x; W1, b1)); W2, b2), 3x3
 *   "same" (periodic in y, zero in x), hidden width 7 split by channel
 *   (uneven: 4+3, 3+2+2, 2+2+2+1);
 * - the CNN's residual block y = x + conv_row(gelu(GN(conv_col(x)))) with
 *   hidden width 8 in 4 GroupNorm groups split by whole groups as the
 *   models split them (2+2, 2+1+1, 1+1+1+1 groups of 2 channels): the
 *   norm on this rank's groups alone is exact.
 *
 * Checked: y, the loss and dx (replicated: every tp rank; the same bits on
 * every rank), this rank's output rows of dW1 and slices of db1, dgamma,
 * dbeta, its input columns of dW2, and db2 (after the reduction). And the
 * CNN's and the U-Net's refusal of fewer GroupNorm groups than tp ranks. */
#include "cnn.h"
#include "sg_autograd.h"
#include "sg_decomp.h"
#include "sg_mesh.h"
#include "sg_test.h"
#include "unet.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N = 2, C = 3, NY = 6, NX = 5, S = NY * NX, K = 3, HMAX = 8 };
static const int64_t XS[4] = {N, C, NY, NX};

static double xv(int64_t i) { return 0.1 * (double)(i % 13) - 0.6; }
static double tv(int64_t i) { return 0.05 * (double)(i % 7) - 0.1; }
/* weights by global (out, in, tap) */
static double w1v(int64_t h, int64_t c, int64_t k) {
  return 0.3 * sin(1.0 + (double)((h * C + c) * K * K + k));
}
static double w2v(int64_t o, int64_t h, int64_t k) {
  return 0.25 * cos(2.0 + (double)((o * HMAX + h) * K * K + k));
}
static double b1v(int64_t h) { return 0.1 * (double)h - 0.3; }
static double b2v(int64_t o) { return 0.2 - 0.07 * (double)o; }
static double gv(int64_t h) { return 1.0 + 0.1 * (double)h; }
static double bev(int64_t h) { return 0.05 * (double)h - 0.1; }

/* the case: hidden width H, GroupNorm groups (0: the pair, no norm) */
typedef struct tcase {
  int64_t H, groups;
} tcase;

typedef struct result {
  double y[N * C * S], loss, dx[N * C * S];
  /* global layouts; this rank's part filled */
  double dw1[HMAX * C * K * K], db1[HMAX], dg[HMAX], dbe[HMAX];
  double dw2[C * HMAX * K * K], db2[C];
} result;

typedef struct vars {
  sg_var x, t, w1, b1, g, be, w2, b2;
} vars;

static sg_status var_f64(sg_var *v, const char *nm, int nd, const int64_t *sh,
                         int param) {
  return param ? sg_var_init_param(v, nm, SG_DTYPE_F64, nd, sh, NULL, NULL)
               : sg_var_init(v, nm, SG_DTYPE_F64, nd, sh, NULL, 1);
}

/* The variables of hidden channels [h0, h0 + hl). */
static sg_status make_vars(int64_t h0, int64_t hl, vars *v) {
  sg_status st = SG_OK;
  const int64_t s1[4] = {hl, C, K, K}, s2[4] = {C, hl, K, K}, sh[1] = {hl},
                sc[1] = {C};
  SG_TRY(var_f64(&v->x, "x", 4, XS, 0));
  SG_TRY(var_f64(&v->t, "t", 4, XS, 0));
  SG_TRY(var_f64(&v->w1, "w1", 4, s1, 1));
  SG_TRY(var_f64(&v->b1, "b1", 1, sh, 1));
  SG_TRY(var_f64(&v->g, "gamma", 1, sh, 1));
  SG_TRY(var_f64(&v->be, "beta", 1, sh, 1));
  SG_TRY(var_f64(&v->w2, "w2", 4, s2, 1));
  SG_TRY(var_f64(&v->b2, "b2", 1, sc, 1));
  double *xd = v->x.value.data, *td = v->t.value.data, *w1 = v->w1.value.data,
         *w2 = v->w2.value.data;
  for (int64_t i = 0; i < N * C * S; ++i) xd[i] = xv(i), td[i] = tv(i);
  for (int64_t j = 0; j < hl; ++j) {
    ((double *)v->b1.value.data)[j] = b1v(h0 + j);
    ((double *)v->g.value.data)[j] = gv(h0 + j);
    ((double *)v->be.value.data)[j] = bev(h0 + j);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t k = 0; k < K * K; ++k) {
        w1[(j * C + c) * K * K + k] = w1v(h0 + j, c, k);
        w2[(c * hl + j) * K * K + k] = w2v(c, h0 + j, k);
      }
  }
  for (int64_t o = 0; o < C; ++o) ((double *)v->b2.value.data)[o] = b2v(o);
fail:
  return st;
}

static void release_vars(vars *v) {
  sg_var *vs[8] = {&v->x, &v->t, &v->w1, &v->b1, &v->g, &v->be, &v->w2, &v->b2};
  for (int i = 0; i < 8; ++i) sg_var_release(vs[i]);
}

/* The gradients of this rank's slice into the global layouts of r. */
static void gather_grads(const vars *v, int64_t h0, int64_t hl, result *r) {
  const double *g1 = v->w1.grad.data, *g2 = v->w2.grad.data;
  for (int64_t j = 0; j < hl; ++j) {
    r->db1[h0 + j] = ((const double *)v->b1.grad.data)[j];
    r->dg[h0 + j] = v->g.grad.data ? ((const double *)v->g.grad.data)[j] : 0;
    r->dbe[h0 + j] = v->be.grad.data ? ((const double *)v->be.grad.data)[j] : 0;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t k = 0; k < K * K; ++k) {
        r->dw1[((h0 + j) * C + c) * K * K + k] = g1[(j * C + c) * K * K + k];
        r->dw2[(c * HMAX + h0 + j) * K * K + k] = g2[(c * hl + j) * K * K + k];
      }
  }
  memcpy(r->db2, v->b2.grad.data, sizeof r->db2);
}

/* The run on tp group g (NULL: one process) with hidden channels [h0, h0
 * + hl) in gl GroupNorm groups. */
static sg_status run(const tcase *tc, sg_group_t g, int64_t h0, int64_t hl,
                     int64_t gl, result *r) {
  sg_status st = SG_OK;
  sg_tape_t tape = NULL;
  vars v;
  memset(&v, 0, sizeof v);
  sg_var *h = NULL, *y = NULL, *l = NULL;
  sg_window win[2];
  memset(win, 0, sizeof win);
  win[0].pad[0] = win[0].pad[1] = win[1].pad[0] = win[1].pad[1] = 1;
  win[0].boundary = SG_BOUNDARY_PERIODIC;
  SG_TRY(make_vars(h0, hl, &v));
  SG_TRY(sg_tape_create(&tape));
  SG_TRY(sg_ag_conv_tp(tape, g, 0, &v.x, &v.w1, &v.b1, win, &h));
  if (tc->groups) {
    sg_norm_desc nd = {.kind = SG_NORM_GROUP, .groups = gl, .eps = 1e-5};
    SG_TRY(sg_ag_norm(tape, &nd, h, &v.g, &v.be, &h));
  }
  SG_TRY(sg_ag_act(tape, SG_ACT_GELU, h, &h));
  SG_TRY(sg_ag_conv_tp(tape, g, 1, h, &v.w2, &v.b2, win, &y));
  if (tc->groups) SG_TRY(sg_ag_binary(tape, SG_BINARY_ADD, &v.x, y, &y));
  memcpy(r->y, y->value.data, sizeof r->y);
  SG_TRY(sg_ag_binary(tape, SG_BINARY_MUL, y, &v.t, &y));
  SG_TRY(sg_ag_loss(tape, SG_LOSS_SUM, y, NULL, &l));
  r->loss = sg_var_item(l);
  SG_TRY(sg_tape_backward(tape, l));
  memcpy(r->dx, v.x.grad.data, sizeof r->dx);
  gather_grads(&v, h0, hl, r);
fail:
  sg_tape_destroy(&tape);
  release_vars(&v);
  return st;
}

/* a[i] vs b[i] where the element's hidden channel (i / inner % H, after
 * outer blocks of H) is in [h0, h0 + hl); H 1: every element */
static void cmp_part(const char *what, const double *a, const double *b,
                     int64_t n, int64_t H, int64_t inner, int64_t h0,
                     int64_t hl) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = H > 1 ? i / inner % H : 0;
    if (H > 1 && (k < h0 || k >= h0 + hl)) continue;
    SG_CHECK(fabs(a[i] - b[i]) <= 1e-10 * (1.0 + fabs(b[i])),
             "%s[%lld]: %.17g vs %.17g", what, (long long)i, a[i], b[i]);
  }
}

static void check_case(const tcase *tc, sg_group_t g, int P, int me) {
  static result ref, got;
  memset(&ref, 0, sizeof ref), memset(&got, 0, sizeof got);
  /* the pair: any channel split; the block: whole groups */
  const int64_t G = tc->groups ? tc->groups : tc->H, cpg = tc->H / G,
                gl = sg_split_size(G, P, me),
                h0 = sg_split_offset(G, P, me) * cpg, hl = gl * cpg;
  SG_REQUIRE_OK(run(tc, NULL, 0, tc->H, tc->groups, &ref));
  SG_REQUIRE_OK(run(tc, g, h0, hl, gl, &got));
  const char *nm = tc->groups ? "block" : "pair";
  cmp_part("y", got.y, ref.y, N * C * S, 1, 1, 0, 0);
  cmp_part("loss", &got.loss, &ref.loss, 1, 1, 1, 0, 0);
  cmp_part("dx", got.dx, ref.dx, N * C * S, 1, 1, 0, 0);
  cmp_part("dW1 (rows)", got.dw1, ref.dw1, tc->H * C * K * K, HMAX, C * K * K,
           h0, hl);
  cmp_part("db1", got.db1, ref.db1, tc->H, HMAX, 1, h0, hl);
  cmp_part("dgamma", got.dg, ref.dg, tc->H, HMAX, 1, h0, hl);
  cmp_part("dbeta", got.dbe, ref.dbe, tc->H, HMAX, 1, h0, hl);
  cmp_part("dW2 (columns)", got.dw2, ref.dw2, C * HMAX * K * K, HMAX, K * K, h0,
           hl);
  cmp_part("db2", got.db2, ref.db2, C, 1, 1, 0, 0);
  { /* the replicated results are the same bits on every tp rank */
    double mx[2] = {got.loss, got.dx[7]}, mn[2] = {got.loss, got.dx[7]};
    MPI_Allreduce(MPI_IN_PLACE, mx, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, mn, 2, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    SG_CHECK(mx[0] == mn[0] && mx[1] == mn[1],
             "%s: tp ranks differ in the replicated loss or dx", nm);
  }
done:
  return;
}

/* The conv nets refuse groups below tp, SG_ERR_CONFIG on every rank. */
static void groups_below_tp(sg_mesh_t mesh, int P) {
  if (P < 2) return;
  sg_cnn_config c = sg_cnn_defaults();
  c.width = 6, c.groups = P - 1, c.blocks = 1;
  sg_cnn_t cm = NULL;
  sg_status st = sg_cnn_create(mesh, &c, 8, 8, 1, &cm);
  SG_CHECK(st == SG_ERR_CONFIG && !cm &&
               strstr(sg_last_error(), "must be >= tp") != NULL,
           "CNN groups %d on tp=%d: %s", P - 1, P, sg_last_error());
  sg_cnn_destroy(&cm);
  sg_unet_config u = sg_unet_defaults();
  u.width = 6, u.groups = P - 1, u.levels = 1;
  sg_unet_t um = NULL;
  st = sg_unet_create(mesh, &u, 8, 8, 1, &um);
  SG_CHECK(st == SG_ERR_CONFIG && !um &&
               strstr(sg_last_error(), "must be >= tp") != NULL,
           "U-Net groups %d on tp=%d: %s", P - 1, P, sg_last_error());
  sg_unet_destroy(&um);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  sg_mesh_t mesh = NULL;
  sg_group_t g = NULL;
  char spec[32];
  snprintf(spec, sizeof spec, "tp=%d", sg_test_size);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(sg_mesh_group(mesh, 1u, &g));
  const int P = sg_test_size, me = sg_group_rank(g);
  const tcase pair = {.H = 7, .groups = 0}, blk = {.H = 8, .groups = 4};
  check_case(&pair, g, P, me);
  check_case(&blk, g, P, me);
  groups_below_tp(mesh, P);
done:
  sg_mesh_destroy(&mesh);
  return sg_test_finish();
}
