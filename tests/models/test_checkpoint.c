/* Activation checkpointing (sg_ag_checkpoint), at 1-4 ranks on an input
 * sharded over "h" (7 rows: uneven on 2, 3 and 4 ranks):
 *  1. a small net of checkpointed blocks (a block on a leaf input, two
 *     residual blocks, one with two inputs and a nested checkpoint,
 *     parameters shared between blocks and with ops outside them) gives
 *     the same loss and the same gradients, bit for bit, as the same net
 *     without checkpoints, in f64 and f32; it holds fewer bytes after
 *     forward;
 *  2. with listeners that release every parameter between uses (ZeRO-3
 *     style): the same bits, and grad_ready fires exactly once per
 *     parameter per backward, when the gradient is final;
 *  3. a block that reads an activation not given as an input, and a block
 *     that returns its input, are refused on every rank;
 *  4. the FNO, CNN and U-Net with act_ckpt_every = 1 (and 2) give the same
 *     loss and gradients, bit for bit, as without;
 *  5. peak activation memory (core's accounting) of a CNN step drops by
 *     the amount docs/strategies.md predicts;
 *  6. 1 under a bf16 storage policy too (the kernels' own rounding of
 *     whole gradients must not take a block's stand-in for a whole
 *     input). */
#include "sg_autograd.h"
#include "sg_comm.h"
#include "sg_device.h"
#include "sg_mesh.h"
#include "sg_model.h"
#include "sg_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 2, C = 3, H = 7, W = 5, NP = 12 };

static double gval(int64_t i, int seed) {
  return sin(0.37 * (double)(i + 1) + 1.3 * seed);
}

/* ---- 1-3: a net of blocks ------------------------------------------------- */

typedef struct net {
  sg_var p[NP];  /* w0 b0 w1 b1 g1 be1 w2 b2 g2 be2 b5 wx */
  int ck;        /* checkpoint the blocks */
  sg_var *outer; /* for the refused block: an outer activation */
} net;

enum { W0, B0, W1, B1, G1, BE1, W2, B2, G2, BE2, B5, WX };

static sg_status conv(sg_tape_t t, sg_var *x, sg_var *w, sg_var *b,
                      sg_var **y) {
  const sg_window a[2] = {{.pad = {1, 1}, .boundary = SG_BOUNDARY_ZERO},
                          {.pad = {1, 1}, .boundary = SG_BOUNDARY_PERIODIC}};
  return sg_ag_conv(t, x, w, b, a, y);
}

static sg_status norm_act(sg_tape_t t, sg_var *x, sg_var *g, sg_var *b,
                          sg_var **y) {
  sg_status st = SG_OK;
  sg_norm_desc nd;
  memset(&nd, 0, sizeof nd);
  nd.kind = SG_NORM_GROUP;
  nd.groups = 1;
  nd.eps = 1e-5;
  SG_TRY(sg_ag_norm(t, &nd, x, g, b, y));
  SG_TRY(sg_ag_act(t, SG_ACT_TANH, *y, y));
fail:
  return st;
}

/* block A: conv(x) */
static sg_status blk_a(sg_tape_t t, void *ctx, sg_var *const *in,
                       sg_var **out) {
  net *n = ctx;
  return conv(t, in[0], &n->p[W0], &n->p[B0], out);
}

/* nested: norm + act with g2, be2 */
static sg_status blk_inner(sg_tape_t t, void *ctx, sg_var *const *in,
                           sg_var **out) {
  net *n = ctx;
  return norm_act(t, in[0], &n->p[G2], &n->p[BE2], out);
}

/* R1: h + conv(norm_act(conv(h, w1)), w2) */
static sg_status blk_r1(sg_tape_t t, void *ctx, sg_var *const *in,
                        sg_var **out) {
  sg_status st = SG_OK;
  net *n = ctx;
  sg_var *r = NULL;
  SG_TRY(conv(t, in[0], &n->p[W1], &n->p[B1], &r));
  SG_TRY(norm_act(t, r, &n->p[G1], &n->p[BE1], &r));
  SG_TRY(conv(t, r, &n->p[W2], &n->p[B2], &r));
  SG_TRY(sg_ag_binary(t, SG_BINARY_ADD, in[0], r, out));
fail:
  return st;
}

/* R2(h, h0): h + (conv(inner(conv(h, w1)), w2) + h0), inner nested */
static sg_status blk_r2(sg_tape_t t, void *ctx, sg_var *const *in,
                        sg_var **out) {
  sg_status st = SG_OK;
  net *n = ctx;
  sg_var *r = NULL;
  SG_TRY(conv(t, in[0], &n->p[W1], &n->p[B1], &r));
  if (n->ck)
    SG_TRY(sg_ag_checkpoint(t, blk_inner, n, 1, &r, 1, &r));
  else
    SG_TRY(blk_inner(t, n, &r, &r));
  SG_TRY(conv(t, r, &n->p[W2], &n->p[B2], &r));
  SG_TRY(sg_ag_binary(t, SG_BINARY_ADD, r, in[1], &r));
  SG_TRY(sg_ag_binary(t, SG_BINARY_ADD, in[0], r, out));
fail:
  return st;
}

static sg_status run_block(net *n, sg_tape_t t, sg_block_fn fn, int nin,
                           sg_var **in, sg_var **out) {
  if (n->ck) return sg_ag_checkpoint(t, fn, n, nin, in, 1, out);
  return fn(t, n, in, out);
}

static sg_status net_loss(net *n, sg_tape_t t, sg_var *x, sg_var *tgt,
                          sg_var **loss) {
  sg_status st = SG_OK;
  sg_var *h0 = NULL, *h1 = NULL, *h2 = NULL, *y = NULL;
  SG_TRY(run_block(n, t, blk_a, 1, &x, &h0));
  SG_TRY(run_block(n, t, blk_r1, 1, &h0, &h1));
  sg_var *in2[2] = {h1, h0};
  SG_TRY(run_block(n, t, blk_r2, 2, in2, &h2));
  SG_TRY(conv(t, h2, &n->p[W2], &n->p[B5], &y)); /* w2 outside the blocks too */
  SG_TRY(sg_ag_linear(t, y, &n->p[WX], NULL, &y));
  SG_TRY(sg_ag_loss(t, SG_LOSS_MSE, y, tgt, loss));
fail:
  return st;
}

static sg_status net_init(net *n, sg_dtype dt) {
  sg_status st = SG_OK;
  const int64_t ws[4] = {C, C, 3, 3}, cs[1] = {C}, xs[2] = {C, C};
  memset(n, 0, sizeof *n);
  static const char *const names[NP] = {"w0", "b0", "w1", "b1",  "g1", "be1",
                                        "w2", "b2", "g2", "be2", "b5", "wx"};
  for (int i = 0; i < NP; ++i) {
    const int isw = i == W0 || i == W1 || i == W2;
    SG_TRY(sg_var_init_param(&n->p[i], names[i], dt,
                             isw       ? 4
                             : i == WX ? 2
                                       : 1,
                             isw       ? ws
                             : i == WX ? xs
                                       : cs,
                             NULL, NULL));
    const int64_t ne = isw ? C * C * 9 : i == WX ? C * C : C;
    for (int64_t k = 0; k < ne; ++k) {
      double v = (i == G1 || i == G2 ? 1.0 : 0.0) +
                 (isw ? 0.3 : 0.2) * gval(k, 10 + i);
      if (dt == SG_DTYPE_F32)
        ((float *)n->p[i].value.data)[k] = (float)v;
      else
        ((double *)n->p[i].value.data)[k] = v;
    }
  }
fail:
  return st;
}

static void net_release(net *n) {
  for (int i = 0; i < NP; ++i) sg_var_release(&n->p[i]);
}

/* This rank's rows [y0, y0 + ny) of H (the balanced split). */
static void rows(int64_t *y0, int64_t *ny) {
  int64_t q = H / sg_test_size, m = H % sg_test_size;
  *y0 = sg_test_rank * q + (sg_test_rank < m ? sg_test_rank : m);
  *ny = q + (sg_test_rank < m ? 1 : 0);
}

/* A sharded leaf (N, C, H, W) of this rank: global values from seed. */
static sg_status make_input(sg_mesh_t mesh, sg_var *v, const char *name,
                            sg_dtype dt, int seed, int rg) {
  sg_status st = SG_OK;
  int64_t y0, ny;
  rows(&y0, &ny);
  const int64_t ls[4] = {N, C, ny, W}, gs[4] = {N, C, H, W};
  SG_TRY(sg_var_init(v, name, dt, 4, ls, NULL, rg));
  for (int64_t i = 0; i < N * C; ++i)
    for (int64_t r = 0; r < ny; ++r)
      for (int64_t c = 0; c < W; ++c) {
        double g = gval((i * H + y0 + r) * W + c, seed);
        int64_t k = (i * ny + r) * W + c;
        if (dt == SG_DTYPE_F32)
          ((float *)v->value.data)[k] = (float)g;
        else
          ((double *)v->value.data)[k] = g;
      }
  sg_placement pl[1] = {sg_shard(2)};
  SG_TRY(sg_var_set_sharding(v, mesh, pl, gs));
fail:
  return st;
}

/* Listeners: every parameter released between uses (value.data NULL, as
 * ZeRO-3 leaves it), grad_ready counted and the gradient copied then. */
typedef struct rel_state {
  net *n;
  void *home[NP];
  int ready[NP], uses;
  void *snap[NP];
  int early; /* grad_ready for a parameter whose uses are not all done */
} rel_state;

static int pidx(rel_state *s, sg_var *v) {
  for (int i = 0; i < NP; ++i)
    if (&s->n->p[i] == v) return i;
  return -1;
}
static size_t vbytes(const sg_var *v) {
  size_t b = sg_dtype_size(v->value.dtype);
  for (int d = 0; d < v->value.ndim; ++d) b *= (size_t)v->value.shape[d];
  return b;
}
static sg_status rel_gather(sg_var *v, void *u) {
  rel_state *s = u;
  int i = pidx(s, v);
  if (i >= 0) v->value.data = s->home[i];
  s->uses++;
  return SG_OK;
}
static sg_status rel_release(sg_var *v, void *u) {
  rel_state *s = u;
  if (pidx(s, v) >= 0) v->value.data = NULL;
  return SG_OK;
}
static sg_status rel_ready(sg_var *v, void *u) {
  rel_state *s = u;
  int i = pidx(s, v);
  if (i < 0) return SG_OK;
  s->ready[i]++;
  if (v->pending != 0) s->early++;
  memcpy(s->snap[i], v->grad.data, vbytes(v));
  return SG_OK;
}

typedef struct result {
  double loss;
  void *grad[NP];
  void *gx;
  size_t gxb;
  size_t bytes_fwd;
} result;

static void result_free(result *r) {
  for (int i = 0; i < NP; ++i) free(r->grad[i]);
  free(r->gx);
  memset(r, 0, sizeof *r);
}

/* One forward and backward; ck: checkpoints; hooks: the releasing
 * listeners (checked here). */
static int net_bf16; /* the tape stores bf16 (6.) */

static void run_net(sg_mesh_t mesh, sg_dtype dt, int ck, int hooks, int passes,
                    result *res) {
  net n;
  sg_tape_t tape = NULL;
  sg_var x, tg, *loss = NULL;
  rel_state s;
  memset(&x, 0, sizeof x);
  memset(&tg, 0, sizeof tg);
  memset(&s, 0, sizeof s);
  memset(res, 0, sizeof *res);
  SG_REQUIRE_OK(net_init(&n, dt));
  n.ck = ck;
  SG_REQUIRE_OK(make_input(mesh, &x, "x", dt, 1, 1));
  SG_REQUIRE_OK(make_input(mesh, &tg, "t", dt, 2, 0));
  SG_REQUIRE_OK(sg_tape_create(&tape));
  if (net_bf16) SG_REQUIRE_OK(sg_tape_set_storage_dtype(tape, SG_DTYPE_BF16));
  if (hooks) {
    s.n = &n;
    for (int i = 0; i < NP; ++i) {
      s.home[i] = n.p[i].value.data;
      n.p[i].value.data = NULL;
      s.snap[i] = calloc(1, vbytes(&n.p[i]));
    }
    sg_hooks h;
    memset(&h, 0, sizeof h);
    h.pre_use = h.pre_backward = rel_gather;
    h.post_use = h.post_backward_use = rel_release;
    h.grad_ready = rel_ready;
    h.user = &s;
    SG_REQUIRE_OK(sg_tape_add_hooks(tape, &h, NULL));
    sg_tape_set_comm(tape, sg_mesh_comm(mesh));
  }
  for (int pass = 0; pass < passes;
       ++pass) { /* twice: the tape (and its child) reused */
    for (int i = 0; i < NP; ++i) SG_REQUIRE_OK(sg_var_zero_grad(&n.p[i]));
    SG_REQUIRE_OK(sg_var_zero_grad(&x));
    memset(s.ready, 0, sizeof s.ready);
    SG_REQUIRE_OK(net_loss(&n, tape, &x, &tg, &loss));
    res->loss = sg_var_item(loss);
    res->bytes_fwd = sg_tape_bytes(tape);
    SG_REQUIRE_OK(sg_tape_backward(tape, loss));
    if (hooks) {
      for (int i = 0; i < NP; ++i) {
        SG_CHECK(s.ready[i] == 1,
                 "ck %d: grad_ready fired %d times for %s (once per backward)",
                 ck, s.ready[i], n.p[i].name);
        SG_CHECK(n.p[i].value.data == NULL, "ck %d: %s released after backward",
                 ck, n.p[i].name);
        sg_test_cmp_bytes("gradient when grad_ready fired == final gradient",
                          s.snap[i], n.p[i].grad.data, vbytes(&n.p[i]));
      }
      SG_CHECK(s.early == 0, "ck %d: grad_ready before the last use (%d)", ck,
               s.early);
    }
  }
  for (int i = 0; i < NP; ++i) {
    res->grad[i] = malloc(vbytes(&n.p[i]));
    memcpy(res->grad[i], n.p[i].grad.data, vbytes(&n.p[i]));
  }
  res->gxb = vbytes(&x);
  res->gx = malloc(res->gxb + 1);
  if (x.grad.data) memcpy(res->gx, x.grad.data, res->gxb);
done:
  if (hooks)
    for (int i = 0; i < NP; ++i) {
      n.p[i].value.data = s.home[i];
      free(s.snap[i]);
    }
  sg_tape_destroy(&tape);
  sg_var_release(&x);
  sg_var_release(&tg);
  net_release(&n);
}

static void test_net(sg_mesh_t mesh, sg_dtype dt) {
  result ref, ck, ckh;
  const int f64 = dt == SG_DTYPE_F64;
  run_net(mesh, dt, 0, 0, 1, &ref);
  run_net(mesh, dt, 1, 0, 1, &ck);
  run_net(mesh, dt, 1, 1, f64 ? 2 : 1, &ckh);
  const char *dn = sg_dtype_name(dt);
  SG_CHECK(ref.loss == ck.loss && ref.loss == ckh.loss && isfinite(ref.loss),
           "%s loss: %.17g without, %.17g checkpointed, %.17g with listeners",
           dn, ref.loss, ck.loss, ckh.loss);
  size_t gb[NP];
  {
    net n;
    if (net_init(&n, dt) == SG_OK)
      for (int i = 0; i < NP; ++i) gb[i] = vbytes(&n.p[i]);
    net_release(&n);
  }
  for (int i = 0; i < NP; ++i) {
    char what[64];
    snprintf(what, sizeof what, "%s: gradient %d checkpointed", dn, i);
    if (ref.grad[i] && ck.grad[i])
      sg_test_cmp_bytes(what, ck.grad[i], ref.grad[i], gb[i]);
    snprintf(what, sizeof what, "%s: gradient %d checkpointed, released", dn,
             i);
    if (ref.grad[i] && ckh.grad[i])
      sg_test_cmp_bytes(what, ckh.grad[i], ref.grad[i], gb[i]);
  }
  if (ref.gx && ck.gx)
    sg_test_cmp_bytes("input gradient checkpointed", ck.gx, ref.gx, ref.gxb);
  if (ref.gx && ckh.gx)
    sg_test_cmp_bytes("input gradient checkpointed, released", ckh.gx, ref.gx,
                      ref.gxb);
  SG_CHECK(ck.bytes_fwd < ref.bytes_fwd,
           "%s: bytes held after forward %zu checkpointed, %zu without", dn,
           ck.bytes_fwd, ref.bytes_fwd);
  result_free(&ref);
  result_free(&ck);
  result_free(&ckh);
}

/* 6. bf16: a block whose first op (an activation) reads an input that an
 * op before the block reads too. Inside the block the input's stand-in
 * has one use, but the outer input's gradient is not whole after the
 * block: its part must not be rounded before the other part is added
 * (the input gradient equal, bit for bit, to the run without the
 * checkpoint). */
static sg_status blk_act(sg_tape_t t, void *ctx, sg_var *const *in,
                         sg_var **out) {
  (void)ctx;
  return sg_ag_act(t, SG_ACT_TANH, in[0], out);
}

static void run_standin(sg_mesh_t mesh, int ck, double *loss, float **gx,
                        size_t *gxb) {
  sg_tape_t tape = NULL;
  sg_var x, tg, *h = NULL, *a = NULL, *y = NULL, *l = NULL;
  memset(&x, 0, sizeof x);
  memset(&tg, 0, sizeof tg);
  SG_REQUIRE_OK(make_input(mesh, &x, "x", SG_DTYPE_F32, 3, 1));
  SG_REQUIRE_OK(make_input(mesh, &tg, "t", SG_DTYPE_F32, 4, 0));
  SG_REQUIRE_OK(sg_tape_create(&tape));
  SG_REQUIRE_OK(sg_tape_set_storage_dtype(tape, SG_DTYPE_BF16));
  SG_REQUIRE_OK(sg_ag_act(tape, SG_ACT_GELU, &x, &h));
  SG_REQUIRE_OK(sg_ag_act(tape, SG_ACT_SILU, h, &a)); /* before the block */
  if (ck)
    SG_REQUIRE_OK(sg_ag_checkpoint(tape, blk_act, NULL, 1, &h, 1, &y));
  else
    SG_REQUIRE_OK(blk_act(tape, NULL, &h, &y));
  SG_REQUIRE_OK(sg_ag_binary(tape, SG_BINARY_MUL, a, y, &y));
  SG_REQUIRE_OK(sg_ag_loss(tape, SG_LOSS_MSE, y, &tg, &l));
  *loss = sg_var_item(l);
  SG_REQUIRE_OK(sg_tape_backward(tape, l));
  *gxb = vbytes(&x);
  *gx = malloc(*gxb + 1);
  if (x.grad.data) memcpy(*gx, x.grad.data, *gxb);
done:
  sg_tape_destroy(&tape);
  sg_var_release(&x);
  sg_var_release(&tg);
}

static void test_bf16_standin(sg_mesh_t mesh) {
  double l0 = 0, l1 = 0;
  float *g0 = NULL, *g1 = NULL;
  size_t b0 = 0, b1 = 0;
  run_standin(mesh, 0, &l0, &g0, &b0);
  run_standin(mesh, 1, &l1, &g1, &b1);
  SG_CHECK(l0 == l1, "bf16 stand-in: loss %.17g without, %.17g checkpointed",
           l0, l1);
  if (g0 && g1 && b0 == b1)
    sg_test_cmp_bytes("bf16: input gradient through a shared input", g1, g0,
                      b0);
  free(g0);
  free(g1);
}

/* 3. refused blocks */
static sg_status blk_reads_outer(sg_tape_t t, void *ctx, sg_var *const *in,
                                 sg_var **out) {
  net *n = ctx;
  return sg_ag_binary(t, SG_BINARY_ADD, in[0], n->outer, out);
}
static sg_status blk_identity(sg_tape_t t, void *ctx, sg_var *const *in,
                              sg_var **out) {
  (void)t, (void)ctx;
  out[0] = in[0];
  return SG_OK;
}

static void test_refused(sg_mesh_t mesh) {
  net n;
  sg_tape_t tape = NULL;
  sg_var x;
  memset(&x, 0, sizeof x);
  SG_REQUIRE_OK(net_init(&n, SG_DTYPE_F64));
  SG_REQUIRE_OK(make_input(mesh, &x, "x", SG_DTYPE_F64, 1, 1));
  SG_REQUIRE_OK(sg_tape_create(&tape));
  sg_var *h = NULL, *y = NULL, *xp = &x;
  SG_REQUIRE_OK(blk_a(tape, &n, &xp, &h));
  n.outer = h;
  sg_status st = sg_ag_checkpoint(tape, blk_reads_outer, &n, 1, &xp, 1, &y);
  SG_CHECK(st == SG_ERR_INVALID_ARG &&
               strstr(sg_last_error(), "made outside the block"),
           "a block reading an outer activation: %s (%s)", sg_status_name(st),
           sg_last_error());
  st = sg_ag_checkpoint(tape, blk_identity, &n, 1, &xp, 1, &y);
  SG_CHECK(st == SG_ERR_INVALID_ARG, "a block returning its input: %s (%s)",
           sg_status_name(st), sg_last_error());
  SG_CHECK(sg_test_all(MPI_COMM_WORLD, 1), "every rank got here");
done:
  sg_tape_destroy(&tape);
  sg_var_release(&x);
  net_release(&n);
}

/* ---- 4-5: the models ----------------------------------------------------- */

typedef struct mrun {
  double loss;
  float *grads;
  int64_t np;
  size_t tape_fwd,
      peak_work; /* bytes: tape after forward; peak above the start */
} mrun;

static void run_model(sg_mesh_t mesh, sg_model_kind kind, int every, int64_t ny,
                      int64_t nx, int64_t width, int passes, mrun *r) {
  sg_model_t m = NULL;
  sg_tape_t tape = NULL;
  float *params = NULL, *xd = NULL, *td = NULL;
  sg_var x, tg, *y = NULL, *loss = NULL;
  memset(&x, 0, sizeof x);
  memset(&tg, 0, sizeof tg);
  memset(r, 0, sizeof *r);
  sg_model_config c = sg_model_defaults(kind);
  c.cin = 2, c.cout = 1, c.width = width, c.proj_width = 8, c.modes = 3,
  c.layers = 4, c.blocks = 4, c.levels = 2;
  c.groups = 2;
  c.act_ckpt_every = every;
  const int64_t batch = 2;
  SG_REQUIRE_OK(sg_model_create(mesh, &c, ny, nx, batch, &m));
  r->np = sg_model_param_count(m);
  params = malloc((size_t)r->np * sizeof *params);
  r->grads = calloc((size_t)r->np, sizeof *r->grads);
  SG_REQUIRE_OK(params && r->grads ? SG_OK : SG_ERR_ALLOC);
  SG_REQUIRE_OK(sg_model_bind(m, params, r->grads));
  SG_REQUIRE_OK(sg_model_init(m, 7));
  int64_t y0, lny, x0, lnx;
  sg_model_box(m, &y0, &lny, &x0, &lnx);
  const int64_t xs[4] = {batch, 2, lny, lnx}, ts[4] = {batch, 1, lny, lnx};
  xd = malloc((size_t)(batch * 2 * lny * lnx) * sizeof *xd);
  td = malloc((size_t)(batch * lny * lnx) * sizeof *td);
  for (int64_t i = 0; i < batch * 2; ++i)
    for (int64_t a = 0; a < lny; ++a)
      for (int64_t b = 0; b < lnx; ++b) {
        xd[(i * lny + a) * lnx + b] = (float)gval(
            (i * ny + y0 + a) * nx + x0 + b, 3);
        if (i < batch)
          td[(i * lny + a) * lnx + b] = (float)gval(
              (i * ny + y0 + a) * nx + x0 + b, 4);
      }
  SG_REQUIRE_OK(sg_var_init(&x, "x", SG_DTYPE_F32, 4, xs, xd, 0));
  SG_REQUIRE_OK(sg_var_init(&tg, "t", SG_DTYPE_F32, 4, ts, td, 0));
  SG_REQUIRE_OK(sg_model_mark(m, &tg));
  SG_REQUIRE_OK(sg_tape_create(&tape));
  for (int pass = 0; pass < passes;
       ++pass) { /* the second: plans made, the peak is the step's */
    memset(r->grads, 0, (size_t)r->np * sizeof *r->grads);
    sg_mem_info m0, m1;
    SG_REQUIRE_OK(sg_mem_reset_peak(sg_device_host()));
    SG_REQUIRE_OK(sg_mem_get_info(sg_device_host(), &m0));
    SG_REQUIRE_OK(sg_model_forward(m, tape, &x, &y));
    SG_REQUIRE_OK(sg_ag_loss(tape, SG_LOSS_MSE, y, &tg, &loss));
    r->loss = sg_var_item(loss);
    r->tape_fwd = sg_tape_bytes(tape);
    SG_REQUIRE_OK(sg_tape_backward(tape, loss));
    SG_REQUIRE_OK(sg_mem_get_info(sg_device_host(), &m1));
    r->peak_work = m1.peak_bytes - m0.current_bytes;
  }
done:
  sg_tape_destroy(&tape);
  sg_var_release(&x);
  sg_var_release(&tg);
  free(xd);
  free(td);
  free(params);
  sg_model_destroy(&m);
}

static void test_models(sg_mesh_t mesh) {
  static const sg_model_kind kinds[3] = {SG_MODEL_FNO, SG_MODEL_CNN,
                                         SG_MODEL_UNET};
  for (int k = 0; k < 3; ++k)
    for (int every = 1; every <= (kinds[k] == SG_MODEL_CNN ? 2 : 1); ++every) {
      mrun a, b;
      run_model(mesh, kinds[k], 0, 16, 10, 4, 1, &a);
      run_model(mesh, kinds[k], every, 16, 10, 4, 1, &b);
      SG_CHECK(a.loss == b.loss && isfinite(a.loss),
               "%s every %d: loss %.9g checkpointed, %.9g without",
               sg_model_kind_name(kinds[k]), every, b.loss, a.loss);
      char what[64];
      snprintf(what, sizeof what, "%s every %d: gradients",
               sg_model_kind_name(kinds[k]), every);
      if (a.grads && b.grads && a.np == b.np)
        sg_test_cmp_bytes(what, b.grads, a.grads, (size_t)a.np * sizeof(float));
      free(a.grads);
      free(b.grads);
    }
}

/* 5. the prediction of docs/strategies.md: for L blocks whose activations
 * (outputs included) take A bytes and whose outputs take s, checkpointing
 * every block holds L*s instead of L*A at the end of forward (the tape's
 * bytes: T_full - T_ck = L*(A - s)) and adds one block's recomputation
 * (A) during backward, so the peak drops by about L*(A - s) - A. */
static void test_peak(sg_mesh_t mesh) {
  mrun a, b;
  const int64_t L = 4, width = 8, ny = 24, nx = 16;
  run_model(mesh, SG_MODEL_CNN, 0, ny, nx, width, 2, &a);
  run_model(mesh, SG_MODEL_CNN, 1, ny, nx, width, 2, &b);
  const int64_t q = ny / sg_test_size,
                lny = q + (sg_test_rank < ny % sg_test_size ? 1 : 0), lnx = nx;
  const double s = (double)(2 * width * lny * lnx) *
                   sizeof(float); /* a block's output */
  const double held = (double)a.tape_fwd - (double)b.tape_fwd; /* L*(A - s) */
  const double A = held / (double)L + s;
  const double predicted = held - A,
               drop = (double)a.peak_work - (double)b.peak_work;
  if (sg_test_rank == 0)
    printf(
        "CNN %lld blocks, width %d: peak work %.1f KiB without, %.1f KiB checkpointed; drop %.1f KiB, predicted "
        "%.1f KiB (A %.1f KiB, s %.1f KiB)\n",
        (long long)L, (int)width, a.peak_work / 1024.0, b.peak_work / 1024.0,
        drop / 1024.0, predicted / 1024.0, A / 1024.0, s / 1024.0);
  SG_CHECK(held > 0 && b.peak_work < a.peak_work,
           "checkpointing lowers the peak (%zu -> %zu)", a.peak_work,
           b.peak_work);
  SG_CHECK(drop >= 0.8 * predicted && drop <= 1.2 * predicted,
           "peak drop %.0f B within 20%% of the prediction %.0f B", drop,
           predicted);
  free(a.grads);
  free(b.grads);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  sg_mesh_t hmesh = NULL;
  char spec[32];
  snprintf(spec, sizeof spec, "h=%d", sg_test_size);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &hmesh));
  test_net(hmesh, SG_DTYPE_F64);
  test_net(hmesh, SG_DTYPE_F32);
  net_bf16 = 1;
  test_net(hmesh, SG_DTYPE_F32);
  net_bf16 = 0;
  test_bf16_standin(hmesh);
  test_refused(hmesh);
  test_models(hmesh);
  test_peak(hmesh);
done:
  sg_mesh_destroy(&hmesh);
  return sg_test_finish();
}
