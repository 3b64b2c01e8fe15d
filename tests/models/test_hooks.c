/* The tape's hooks as strategies use them, and collective safety:
 *  1. a hook failing on one rank (pre-use on a sharded op, pre-use on a
 *     plain op of a tape with a communicator, grad-ready, pre-backward)
 *     makes the op fail on every rank — no rank is left waiting;
 *  2. a released parameter (value.data NULL, as ZeRO-3 leaves it) is
 *     gathered by pre_use / pre_backward and released by post_use /
 *     post_backward_use, and gives the same gradients as a resident one;
 *  3. several listeners run in order; one can be removed;
 *  4. backward from a (variable, gradient) pair equals backward from the
 *     scalar sum(y * g);
 *  5. an empty batch shard (global batch 1 over every rank of a dp mesh)
 *     runs forward and backward and matches one process (issue 20 #2).
 * Runs at 1-4 ranks (f64). */
#include "sg_autograd.h"
#include "sg_comm.h"
#include "sg_mesh.h"
#include "sg_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { C = 2, K = 3, H = 6, W = 5 };

static void fill(double *a, int64_t n, double s, int seed) {
  for (int64_t i = 0; i < n; ++i)
    a[i] = s * sin(0.7 * (double)(i + 1) + 1.3 * seed);
}

typedef struct hk_state {
  int fail_pre_use, fail_ready, fail_pre_bwd; /* fail on this rank */
  int calls[6];
  int order[16], norder, tag;
  /* released-parameter emulation */
  double *home;  /* where the value lives while gathered */
  sg_var *param; /* the parameter released between uses */
} hk_state;

static sg_status hk_pre_use(sg_var *p, void *u) {
  hk_state *s = u;
  s->calls[0]++;
  if (s->norder < 16) s->order[s->norder++] = s->tag;
  if (s->param == p) p->value.data = s->home;
  if (s->fail_pre_use)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "pre-use hook failed on rank %d", sg_test_rank);
  return SG_OK;
}
static sg_status hk_post_use(sg_var *p, void *u) {
  hk_state *s = u;
  s->calls[1]++;
  if (s->param == p) p->value.data = NULL;
  return SG_OK;
}
static sg_status hk_pre_bwd(sg_var *p, void *u) {
  hk_state *s = u;
  s->calls[2]++;
  if (s->param == p) p->value.data = s->home;
  if (s->fail_pre_bwd)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "pre-backward hook failed on rank %d", sg_test_rank);
  return SG_OK;
}
static sg_status hk_post_bwd_use(sg_var *p, void *u) {
  hk_state *s = u;
  s->calls[3]++;
  if (s->param == p) p->value.data = NULL;
  return SG_OK;
}
static sg_status hk_ready(sg_var *p, void *u) {
  hk_state *s = u;
  (void)p;
  s->calls[4]++;
  if (s->fail_ready)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "grad-ready hook failed on rank %d", sg_test_rank);
  return SG_OK;
}

static sg_hooks hk_all(hk_state *s) {
  sg_hooks h;
  memset(&h, 0, sizeof h);
  h.pre_use = hk_pre_use;
  h.post_use = hk_post_use;
  h.pre_backward = hk_pre_bwd;
  h.post_backward_use = hk_post_bwd_use;
  h.grad_ready = hk_ready;
  h.user = s;
  return h;
}

/* A small net on x (N, C, H, W): conv 3x3 (zero pad) + bias, GroupNorm,
 * tanh, sum of squares (MSE against 0). Parameters w (K, C, 3, 3), b (K). */
typedef struct net {
  double w[K * C * 9], b[K], gw[K * C * 9], gb[K];
  sg_var vw, vb;
} net;

static sg_status net_init(net *n) {
  sg_status st = SG_OK;
  const int64_t ws[4] = {K, C, 3, 3}, bs[1] = {K};
  fill(n->w, K * C * 9, 0.4, 1);
  fill(n->b, K, 0.2, 2);
  memset(n->gw, 0, sizeof n->gw);
  memset(n->gb, 0, sizeof n->gb);
  SG_TRY(sg_var_init_param(&n->vw, "w", SG_DTYPE_F64, 4, ws, n->w, n->gw));
  SG_TRY(sg_var_init_param(&n->vb, "b", SG_DTYPE_F64, 1, bs, n->b, n->gb));
fail:
  return st;
}

static sg_status net_forward(sg_tape_t t, net *n, sg_var *x, sg_var **y) {
  sg_status st = SG_OK;
  const sg_window a[2] = {{.pad = {1, 1}}, {.pad = {1, 1}}};
  sg_var *h = NULL, *g = NULL;
  SG_TRY(sg_ag_conv(t, x, &n->vw, &n->vb, a, &h));
  sg_norm_desc nd;
  memset(&nd, 0, sizeof nd);
  nd.kind = SG_NORM_GROUP;
  nd.groups = 1;
  nd.eps = 1e-5;
  SG_TRY(sg_ag_norm(t, &nd, h, NULL, NULL, &g));
  SG_TRY(sg_ag_act(t, SG_ACT_TANH, g, y));
fail:
  return st;
}

static sg_status net_loss(sg_tape_t t, net *n, sg_var *x, sg_var *tgt,
                          sg_var **loss) {
  sg_status st = SG_OK;
  sg_var *y = NULL;
  SG_TRY(net_forward(t, n, x, &y));
  SG_TRY(sg_ag_loss(t, SG_LOSS_MSE, y, tgt, loss));
fail:
  return st;
}

/* 1. failures on one rank reach every rank. */
static void test_failures(sg_mesh_t mesh) {
  net n;
  sg_tape_t tape = NULL;
  hk_state s;
  memset(&s, 0, sizeof s);
  const int last = sg_test_rank == sg_test_size - 1;
  double xd[2 * C * H * W], td[2 * K * H * W];
  const int64_t xs[4] = {2, C, H, W}, ts[4] = {2, K, H, W};
  sg_var x, tg, *loss = NULL;
  memset(&x, 0, sizeof x);
  memset(&tg, 0, sizeof tg);
  fill(xd, 2 * C * H * W, 1.0, 3);
  fill(td, 2 * K * H * W, 0.5, 4);
  SG_REQUIRE_OK(net_init(&n));
  SG_REQUIRE_OK(sg_tape_create(&tape));
  sg_hooks h = hk_all(&s);
  SG_REQUIRE_OK(sg_tape_add_hooks(tape, &h, NULL));
  sg_tape_set_comm(tape, sg_mesh_comm(mesh));
  /* plain (unsharded) variables: the tape's communicator carries it */
  SG_REQUIRE_OK(sg_var_init(&x, "x", SG_DTYPE_F64, 4, xs, xd, 0));
  SG_REQUIRE_OK(sg_var_init(&tg, "t", SG_DTYPE_F64, 4, ts, td, 0));
  s.fail_pre_use = last;
  SG_CHECK(sg_tape_apply != NULL, "apply");
  sg_status st = net_loss(tape, &n, &x, &tg, &loss);
  SG_CHECK(
      st == SG_ERR_INVALID_ARG,
      "plain op, pre-use hook failing on the last rank: %s on rank %d (%s)",
      sg_status_name(st), sg_test_rank, sg_last_error());
  SG_CHECK(strstr(sg_last_error(), "pre-use hook failed on rank") != NULL,
           "the failing rank's message: %s", sg_last_error());
  sg_tape_clear(tape);
  s.fail_pre_use = 0;
  /* grad-ready failing on one rank: backward fails everywhere */
  s.fail_ready = last;
  SG_REQUIRE_OK(net_loss(tape, &n, &x, &tg, &loss));
  st = sg_tape_backward(tape, loss);
  SG_CHECK(st == SG_ERR_INVALID_ARG,
           "grad-ready failing on the last rank: %s on rank %d",
           sg_status_name(st), sg_test_rank);
  s.fail_ready = 0;
  /* pre-backward failing on one rank (the GroupNorm backward after it is
   * collective on sharded inputs; here it must not run on the others) */
  s.fail_pre_bwd = last;
  SG_REQUIRE_OK(net_loss(tape, &n, &x, &tg, &loss));
  st = sg_tape_backward(tape, loss);
  SG_CHECK(st == SG_ERR_INVALID_ARG,
           "pre-backward failing on the last rank: %s on rank %d",
           sg_status_name(st), sg_test_rank);
  s.fail_pre_bwd = 0;
  /* sharded input over every rank (spatial split over h): the failure joins
   * the op's own agreement */
  if (sg_mesh_ndims(mesh) == 1 && H >= sg_test_size) {
    int64_t y0 = 0, ny = 0;
    {
      int64_t q = H / sg_test_size, m = H % sg_test_size;
      y0 = sg_test_rank * q + (sg_test_rank < m ? sg_test_rank : m);
      ny = q + (sg_test_rank < m ? 1 : 0);
    }
    double *xl = malloc((size_t)(2 * C * ny * W + 1) * sizeof *xl);
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t c = 0; c < C; ++c)
        memcpy(xl + ((i * C + c) * ny) * W, xd + ((i * C + c) * H + y0) * W,
               (size_t)(ny * W) * sizeof *xl);
    sg_var xs2;
    const int64_t ls[4] = {2, C, ny, W}, gs[4] = {2, C, H, W};
    sg_placement pl[1] = {sg_shard(2)};
    SG_CHECK_OK(sg_var_init(&xs2, "xs", SG_DTYPE_F64, 4, ls, xl, 0));
    SG_CHECK_OK(sg_var_set_sharding(&xs2, mesh, pl, gs));
    sg_tape_set_comm(tape, MPI_COMM_NULL); /* only the op's mesh now */
    s.fail_pre_use = last;
    sg_var *y = NULL;
    st = net_forward(tape, &n, &xs2, &y);
    SG_CHECK(st == SG_ERR_INVALID_ARG,
             "sharded op, pre-use failing on the last rank: %s on rank %d",
             sg_status_name(st), sg_test_rank);
    s.fail_pre_use = 0;
    sg_tape_clear(tape);
    sg_var_release(&xs2);
    free(xl);
  }
done:
  sg_tape_destroy(&tape);
  sg_var_release(&x);
  sg_var_release(&tg);
  sg_var_release(&n.vw);
  sg_var_release(&n.vb);
}

/* 2. + 3. + 4., on plain variables (every rank alike). */
static void test_release_listeners_pairs(void) {
  net a, b;
  sg_tape_t tape = NULL;
  hk_state s1, s2;
  memset(&s1, 0, sizeof s1);
  memset(&s2, 0, sizeof s2);
  double xd[2 * C * H * W], td[2 * K * H * W], gy[2 * K * H * W];
  const int64_t xs[4] = {2, C, H, W}, ts[4] = {2, K, H, W};
  sg_var x, tg, *loss = NULL, *y = NULL;
  memset(&x, 0, sizeof x);
  memset(&tg, 0, sizeof tg);
  fill(xd, 2 * C * H * W, 1.0, 5);
  fill(td, 2 * K * H * W, 0.0, 6);
  fill(gy, 2 * K * H * W, 0.3, 7);
  SG_REQUIRE_OK(net_init(&a));
  SG_REQUIRE_OK(net_init(&b));
  SG_REQUIRE_OK(sg_var_init(&x, "x", SG_DTYPE_F64, 4, xs, xd, 0));
  SG_REQUIRE_OK(sg_var_init(&tg, "t", SG_DTYPE_F64, 4, ts, td, 0));
  SG_REQUIRE_OK(sg_tape_create(&tape));
  /* reference: no hooks */
  SG_REQUIRE_OK(net_loss(tape, &a, &x, &tg, &loss));
  SG_REQUIRE_OK(sg_tape_backward(tape, loss));
  /* b's weight is released between uses; two listeners */
  s1.tag = 1;
  s2.tag = 2;
  s1.param = &b.vw;
  s1.home = b.w;
  b.vw.value.data = NULL;
  sg_hooks h1 = hk_all(&s1), h2 = hk_all(&s2);
  int id2 = 0;
  SG_REQUIRE_OK(sg_tape_add_hooks(tape, &h1, NULL));
  SG_REQUIRE_OK(sg_tape_add_hooks(tape, &h2, &id2));
  SG_REQUIRE_OK(net_loss(tape, &b, &x, &tg, &loss));
  SG_CHECK(b.vw.value.data == NULL, "released again after the forward");
  SG_REQUIRE_OK(sg_tape_backward(tape, loss));
  SG_CHECK(b.vw.value.data == NULL, "released again after the backward");
  sg_test_cmp_f64("dw with a released weight", b.gw, a.gw, K * C * 9, 0, 0);
  sg_test_cmp_f64("db with a released weight", b.gb, a.gb, K, 0, 0);
  SG_CHECK(
      s1.calls[0] == 2 && s1.calls[1] == 2 && s1.calls[2] == 2 &&
          s1.calls[3] == 2 && s1.calls[4] == 2,
      "hooks per parameter use: pre %d post %d pre-bwd %d post-bwd %d ready %d",
      s1.calls[0], s1.calls[1], s1.calls[2], s1.calls[3], s1.calls[4]);
  SG_CHECK(s2.calls[0] == 2 && s1.norder == 2 && s2.norder == 2,
           "both listeners ran");
  /* removal: listener 2 no longer called */
  SG_CHECK_OK(sg_tape_remove_hooks(tape, id2));
  SG_CHECK_STATUS(sg_tape_remove_hooks(tape, id2), SG_ERR_INVALID_ARG);
  SG_REQUIRE_OK(net_loss(tape, &b, &x, &tg, &loss));
  sg_tape_clear(tape);
  SG_CHECK(s2.calls[0] == 2 && s1.calls[0] == 4,
           "removed listener not called (%d, %d)", s2.calls[0], s1.calls[0]);
  sg_tape_set_hooks(tape, NULL);
  b.vw.value.data = b.w;
  /* 4. backward from (y, gy) == backward of sum(y * gy) */
  memset(a.gw, 0, sizeof a.gw);
  memset(a.gb, 0, sizeof a.gb);
  memset(b.gw, 0, sizeof b.gw);
  memset(b.gb, 0, sizeof b.gb);
  SG_REQUIRE_OK(net_forward(tape, &a, &x, &y));
  sg_tensor g;
  memset(&g, 0, sizeof g);
  g = y->value;
  g.data = gy;
  g.owns = 0;
  SG_REQUIRE_OK(sg_tape_backward_from(tape, 1, &y, &g));
  {
    sg_var gv, *p = NULL, *l = NULL;
    SG_REQUIRE_OK(sg_var_init(&gv, "gy", SG_DTYPE_F64, 4, ts, gy, 0));
    SG_REQUIRE_OK(net_forward(tape, &b, &x, &y));
    SG_REQUIRE_OK(sg_ag_binary(tape, SG_BINARY_MUL, y, &gv, &p));
    SG_REQUIRE_OK(sg_ag_loss(tape, SG_LOSS_SUM, p, NULL, &l));
    SG_REQUIRE_OK(sg_tape_backward(tape, l));
    sg_var_release(&gv);
  }
  sg_test_cmp_f64("dw from a (y, g) pair", a.gw, b.gw, K * C * 9, 1e-12, 1e-14);
  sg_test_cmp_f64("db from a (y, g) pair", a.gb, b.gb, K, 1e-12, 1e-14);
  /* a gradient of the wrong shape is refused */
  SG_REQUIRE_OK(net_forward(tape, &a, &x, &y));
  g.shape[3] = W + 1;
  SG_CHECK_STATUS(sg_tape_backward_from(tape, 1, &y, &g), SG_ERR_SHAPE);
done:
  sg_tape_destroy(&tape);
  sg_var_release(&x);
  sg_var_release(&tg);
  sg_var_release(&a.vw);
  sg_var_release(&a.vb);
  sg_var_release(&b.vw);
  sg_var_release(&b.vb);
}

/* 5. global batch 1 split over dp = every rank: the ranks past the first
 * hold no sample. Forward, loss and parameter gradients (summed over dp)
 * equal one process. */
static void test_empty_batch_shard(sg_mesh_t dpmesh) {
  net ref, sh;
  sg_tape_t tape = NULL;
  double xd[C * H * W], td[K * H * W];
  const int64_t xs[4] = {1, C, H, W}, ts[4] = {1, K, H, W};
  const int mine = sg_test_rank == 0;
  const int64_t ls[4] = {mine, C, H, W}, lt[4] = {mine, K, H, W};
  sg_var x, tg, xl, tl, *loss = NULL;
  memset(&x, 0, sizeof x);
  memset(&tg, 0, sizeof tg);
  memset(&xl, 0, sizeof xl);
  memset(&tl, 0, sizeof tl);
  fill(xd, C * H * W, 1.0, 8);
  fill(td, K * H * W, 0.5, 9);
  SG_REQUIRE_OK(net_init(&ref));
  SG_REQUIRE_OK(net_init(&sh));
  SG_REQUIRE_OK(sg_tape_create(&tape));
  SG_REQUIRE_OK(sg_var_init(&x, "x", SG_DTYPE_F64, 4, xs, xd, 0));
  SG_REQUIRE_OK(sg_var_init(&tg, "t", SG_DTYPE_F64, 4, ts, td, 0));
  SG_REQUIRE_OK(net_loss(tape, &ref, &x, &tg, &loss));
  const double lref = sg_var_item(loss);
  SG_REQUIRE_OK(sg_tape_backward(tape, loss));
  /* sharded: rank 0 holds the sample, the others an empty block */
  SG_REQUIRE_OK(
      sg_var_init(&xl, "x", SG_DTYPE_F64, 4, ls, mine ? xd : NULL, 0));
  SG_REQUIRE_OK(
      sg_var_init(&tl, "t", SG_DTYPE_F64, 4, lt, mine ? td : NULL, 0));
  sg_placement pl[1] = {sg_shard(0)};
  sg_status st = sg_var_set_sharding(&xl, dpmesh, pl, xs);
  if (st == SG_OK) st = sg_var_set_sharding(&tl, dpmesh, pl, ts);
  SG_REQUIRE_OK(st);
  st = net_loss(tape, &sh, &xl, &tl, &loss);
  SG_CHECK(st == SG_OK, "forward with an empty batch shard: %s (%s)",
           sg_status_name(st), sg_last_error());
  if (st == SG_OK) {
    SG_CHECK(fabs(sg_var_item(loss) - lref) <= 1e-12 * fabs(lref),
             "loss %.17g, one process %.17g", sg_var_item(loss), lref);
    st = sg_tape_backward(tape, loss);
    SG_CHECK(st == SG_OK, "backward with an empty batch shard: %s (%s)",
             sg_status_name(st), sg_last_error());
    MPI_Allreduce(MPI_IN_PLACE, sh.gw, K * C * 9, MPI_DOUBLE, MPI_SUM,
                  MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, sh.gb, K, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    sg_test_cmp_f64("dw, empty batch shards", sh.gw, ref.gw, K * C * 9, 1e-12,
                    1e-14);
    sg_test_cmp_f64("db, empty batch shards", sh.gb, ref.gb, K, 1e-12, 1e-14);
  }
  sg_tape_clear(tape);
done:
  sg_tape_destroy(&tape);
  sg_var_release(&x);
  sg_var_release(&tg);
  sg_var_release(&xl);
  sg_var_release(&tl);
  sg_var_release(&ref.vw);
  sg_var_release(&ref.vb);
  sg_var_release(&sh.vw);
  sg_var_release(&sh.vb);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  sg_mesh_t hmesh = NULL, dpmesh = NULL;
  char spec[32];
  snprintf(spec, sizeof spec, "h=%d", sg_test_size);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &hmesh));
  snprintf(spec, sizeof spec, "dp=%d", sg_test_size);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &dpmesh));
  test_failures(hmesh);
  test_release_listeners_pairs();
  test_empty_batch_shard(dpmesh);
done:
  sg_mesh_destroy(&hmesh);
  sg_mesh_destroy(&dpmesh);
  return sg_test_finish();
}
