/* The tape's split backward (ZB-H1's B and W, sg_tape_backward_split /
 * sg_tape_backward_weights) against the one-pass backward, per model of
 * ops:
 *  - conv (padded, with bias) -> gelu -> conv (no bias) -> bias -> MSE;
 *  - linear with bias, the same weight used twice (its gradient gets two
 *    parts) -> MSE;
 *  - group norm (gamma, beta) -> silu -> 1x1 conv without padding (it reads
 *    its input's value in W: held) -> backward from a (variable, gradient)
 *    pair;
 *  - a conv + group norm on a spatially sharded input (mesh h = ranks: halo
 *    exchanges and global statistics in both passes);
 *  - an activation checkpoint (run whole in B) next to a plain linear.
 * For each, f32 and f64: after B alone the input's gradient equals the
 * one-pass one bit for bit and the parameters' gradients are untouched
 * (they start from a non-zero accumulation), the tape holds the deferred
 * nodes (sg_tape_bytes > 0); after W the parameter gradients are the
 * one-pass bits, grad_ready fired once per parameter (in W, but for the
 * checkpoint's parameters: in B), post_backward once, and the tape is
 * empty (sg_tape_bytes 0). Misuse: W without B, a backward while W is
 * pending, sg_tape_clear in between. Runs at 1-3 ranks. */
#include "sg_autograd.h"
#include "sg_mesh.h"
#include "sg_shardtensor.h"
#include "sg_test.h"
#include "sg_test_tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAXP = 6, N = 2, C = 4, S = 12 };

typedef struct run_ctx {
  sg_dtype dt;
  sg_mesh_t mesh; /* the sharded model's, else NULL */
  sg_var p[MAXP];
  int np;
  sg_var *ckp; /* the checkpointed block's parameters (p + 0, 2) */
} run_ctx;

typedef sg_status (*model_fn)(sg_tape_t t, run_ctx *c, sg_var *x, sg_var **out);

typedef struct model {
  const char *name;
  int np;
  int pnd[MAXP];
  int64_t pshape[MAXP][3];
  int sharded, from; /* from: backward from (output, gradient) */
  int ready_in_b;    /* parameters whose grad_ready fires in B */
  model_fn fn;
} model;

static const sg_window pad1 = {.kernel = 3, .pad = {1, 1}};

static sg_status mse(sg_tape_t t, sg_var *y, sg_var **loss) {
  return sg_ag_loss(t, SG_LOSS_SUM, y, NULL, loss);
}

static sg_status m_conv(sg_tape_t t, run_ctx *c, sg_var *x, sg_var **out) {
  sg_status st = SG_OK;
  sg_var *h, *a, *h2, *y, *sq;
  SG_TRY(sg_ag_conv(t, x, &c->p[0], &c->p[1], &pad1, &h));
  SG_TRY(sg_ag_act(t, SG_ACT_GELU, h, &a));
  SG_TRY(sg_ag_conv(t, a, &c->p[2], NULL, &pad1, &h2));
  SG_TRY(sg_ag_bias(t, h2, &c->p[3], &y));
  SG_TRY(sg_ag_binary(t, SG_BINARY_MUL, y, y, &sq));
  SG_TRY(mse(t, sq, out));
fail:
  return st;
}

static sg_status m_linear(sg_tape_t t, run_ctx *c, sg_var *x, sg_var **out) {
  sg_status st = SG_OK;
  sg_var *h, *a, *h2, *sq;
  SG_TRY(sg_ag_linear(t, x, &c->p[0], &c->p[1], &h));
  SG_TRY(sg_ag_act(t, SG_ACT_TANH, h, &a));
  SG_TRY(sg_ag_linear(t, a, &c->p[0], NULL, &h2)); /* the same weight */
  SG_TRY(sg_ag_binary(t, SG_BINARY_MUL, h2, h2, &sq));
  SG_TRY(mse(t, sq, out));
fail:
  return st;
}

static sg_status m_norm(sg_tape_t t, run_ctx *c, sg_var *x, sg_var **out) {
  sg_status st = SG_OK;
  sg_var *h, *a;
  sg_norm_desc d = {.kind = SG_NORM_GROUP, .groups = 2, .eps = 1e-5};
  const sg_window k1 = {.kernel = 1};
  SG_TRY(sg_ag_norm(t, &d, x, &c->p[0], &c->p[1], &h));
  SG_TRY(sg_ag_act(t, SG_ACT_SILU, h, &a));
  SG_TRY(sg_ag_conv(t, a, &c->p[2], &c->p[3], &k1, out));
fail:
  return st;
}

static sg_status m_sharded(sg_tape_t t, run_ctx *c, sg_var *x, sg_var **out) {
  sg_status st = SG_OK;
  sg_var *h, *n, *a, *sq;
  sg_norm_desc d = {.kind = SG_NORM_GROUP, .groups = 2, .eps = 1e-5};
  SG_TRY(sg_ag_conv(t, x, &c->p[0], &c->p[1], &pad1, &h));
  SG_TRY(sg_ag_norm(t, &d, h, &c->p[2], &c->p[3], &n));
  SG_TRY(sg_ag_act(t, SG_ACT_GELU, n, &a));
  SG_TRY(sg_ag_binary(t, SG_BINARY_MUL, a, a, &sq));
  SG_TRY(mse(t, sq, out));
fail:
  return st;
}

static sg_status ck_block(sg_tape_t t, void *ctx, sg_var *const *in,
                          sg_var **out) {
  run_ctx *c = ctx;
  sg_status st = SG_OK;
  sg_var *h;
  SG_TRY(sg_ag_conv(t, in[0], &c->p[0], &c->p[1], &pad1, &h));
  SG_TRY(sg_ag_act(t, SG_ACT_TANH, h, &out[0]));
fail:
  return st;
}

static sg_status m_ckpt(sg_tape_t t, run_ctx *c, sg_var *x, sg_var **out) {
  sg_status st = SG_OK;
  sg_var *a, *h, *sq;
  SG_TRY(sg_ag_checkpoint(t, ck_block, c, 1, &x, 1, &a));
  SG_TRY(sg_ag_linear(t, a, &c->p[2], &c->p[3], &h));
  SG_TRY(sg_ag_binary(t, SG_BINARY_MUL, h, h, &sq));
  SG_TRY(mse(t, sq, out));
fail:
  return st;
}

static const model models[] = {
    {"conv",
     4,
     {3, 1, 3, 1},
     {{C, C, 3}, {C}, {C, C, 3}, {C}},
     0,
     0,
     0,
     m_conv},
    {"linear", 2, {2, 1}, {{C, C}, {C}}, 0, 0, 0, m_linear},
    {"norm", 4, {1, 1, 3, 1}, {{C}, {C}, {C, C, 1}, {C}}, 0, 1, 0, m_norm},
    {"sharded",
     4,
     {3, 1, 1, 1},
     {{C, C, 3}, {C}, {C}, {C}},
     1,
     0,
     0,
     m_sharded},
    {"ckpt", 4, {3, 1, 2, 1}, {{C, C, 3}, {C}, {C, C}, {C}}, 0, 0, 2, m_ckpt},
};

/* ---- hooks: counts per parameter ------------------------------------------ */

typedef struct counts {
  run_ctx *c;
  int ready[MAXP], pre_bwd[MAXP], post_backward;
} counts;

static int param_index(counts *k, const sg_var *v) {
  for (int i = 0; i < k->c->np; ++i)
    if (&k->c->p[i] == v) return i;
  return -1;
}
static sg_status on_ready(sg_var *v, void *u) {
  int i = param_index(u, v);
  if (i >= 0) ((counts *)u)->ready[i]++;
  return SG_OK;
}
static sg_status on_pre_bwd(sg_var *v, void *u) {
  int i = param_index(u, v);
  if (i >= 0) ((counts *)u)->pre_bwd[i]++;
  return SG_OK;
}
static sg_status on_post(sg_tape_t t, void *u) {
  (void)t;
  ((counts *)u)->post_backward++;
  return SG_OK;
}

/* ---- one run ------------------------------------------------------------------ */

typedef struct result {
  double *pgrad[MAXP];
  int64_t pn[MAXP];
  double *xgrad;
  int64_t xn;
} result;

static void result_free(result *r) {
  for (int i = 0; i < MAXP; ++i) free(r->pgrad[i]);
  free(r->xgrad);
  memset(r, 0, sizeof *r);
}

static double *copy_out(const sg_tensor *t, int64_t n) {
  double *a = calloc((size_t)n + 1, sizeof *a);
  for (int64_t i = 0; i < n && t->data; ++i)
    a[i] = sg_test_get(t->data, t->dtype, i);
  return a;
}

/* Compare bit for bit (as the dtype's values). */
static void cmp_bits(const char *what, const char *name, sg_dtype dt,
                     const double *a, const double *b, int64_t n) {
  char msg[128];
  snprintf(msg, sizeof msg, "%s %s (%s)", name, what, sg_dtype_name(dt));
  SG_CHECK(sg_test_cmp_bytes(msg, a, b, (size_t)n * sizeof *a) == 0,
           "%s: not the one-pass bits", msg);
}

/* The input leaf: this rank's block (the sharded model splits dim 2 over h). */
static sg_status make_x(const model *m, run_ctx *c, sg_var *x, void **buf) {
  sg_status st = SG_OK;
  const int64_t gshape[3] = {N, C, S};
  int64_t off[3] = {0}, shape[3] = {N, C, S};
  sg_placement pl[1] = {sg_shard(2)};
  double g[N * C * S];
  sg_test_rand_fill(g, N * C * S, 7, -1, 1);
  if (m->sharded)
    SG_TRY(sg_shardtensor_box(c->mesh, 3, gshape, pl, sg_mesh_rank(c->mesh),
                              off, shape));
  *buf = calloc((size_t)sg_test_numel(3, shape) + 1, sizeof(double));
  sg_test_box_copy(3, gshape, off, shape, g, *buf, c->dt, 0);
  SG_TRY(sg_var_init(x, "x", c->dt, 3, shape, *buf, 1));
  if (m->sharded) SG_TRY(sg_var_set_sharding(x, c->mesh, pl, gshape));
fail:
  return st;
}

/* Forward, then one pass (split 0) or B, the checks after B, and W. */
static void run(const model *m, run_ctx *c, int split, result *r) {
  sg_tape_t tape = NULL;
  sg_var x;
  void *xbuf = NULL, *pv[MAXP] = {0}, *pg[MAXP] = {0};
  double *init[MAXP] = {0};
  counts k = {.c = c};
  memset(&x, 0, sizeof x);
  c->np = m->np;
  for (int i = 0; i < m->np; ++i) {
    const int64_t n = sg_test_numel(m->pnd[i], m->pshape[i]);
    pv[i] = calloc((size_t)n, sizeof(double));
    pg[i] = calloc((size_t)n, sizeof(double));
    for (int64_t j = 0; j < n; ++j) {
      sg_test_set(pv[i], c->dt, j, sg_test_rand(11 + i, j, -0.5, 0.5));
      /* an earlier micro-batch's part: W must add to it in order */
      sg_test_set(pg[i], c->dt, j, sg_test_rand(31 + i, j, -0.1, 0.1));
    }
    SG_REQUIRE_OK(sg_var_init_param(&c->p[i], "p", c->dt, m->pnd[i],
                                    m->pshape[i], pv[i], pg[i]));
    r->pn[i] = n;
  }
  for (int i = 0; i < m->np; ++i) init[i] = copy_out(&c->p[i].grad, r->pn[i]);
  SG_REQUIRE_OK(make_x(m, c, &x, &xbuf));
  SG_REQUIRE_OK(sg_tape_create(&tape));
  sg_hooks h = {.grad_ready = on_ready,
                .pre_backward = on_pre_bwd,
                .post_backward = on_post,
                .user = &k};
  sg_tape_set_hooks(tape, &h);
  sg_var *out = NULL;
  SG_REQUIRE_OK(m->fn(tape, c, &x, &out));
  sg_tensor g = out->value; /* the seed of a (variable, gradient) pair */
  void *gdata = calloc((size_t)sg_tensor_numel(&g) + 1, sizeof(double));
  for (int64_t j = 0; j < sg_tensor_numel(&g); ++j)
    sg_test_set(gdata, c->dt, j, sg_test_rand(5, j, -1, 1));
  g.data = gdata;
  g.owns = 0;
  const size_t fw_bytes = sg_tape_bytes(tape);
  sg_status st;
  if (!split) {
    st = m->from ? sg_tape_backward_from(tape, 1, &out, &g)
                 : sg_tape_backward(tape, out);
    SG_CHECK(st == SG_OK, "%s: one-pass backward failed", m->name);
  } else {
    st = m->from ? sg_tape_backward_from_split(tape, 1, &out, &g)
                 : sg_tape_backward_split(tape, out);
    SG_CHECK(st == SG_OK, "%s: split B failed", m->name);
    SG_CHECK(sg_tape_weights_pending(tape), "%s: W not pending", m->name);
    const size_t b_bytes = sg_tape_bytes(tape);
    /* the deferred nodes' outputs with their gradients, saved state and
     * held inputs */
    SG_CHECK(b_bytes > 0, "%s: after B the tape holds nothing", m->name);
    if (sg_test_rank == 0 && c->dt == SG_DTYPE_F64)
      printf("%s: tape bytes after forward %zu, after B %zu\n", m->name,
             fw_bytes, b_bytes);
    SG_CHECK(sg_tape_size(tape) > 0, "%s: no deferred node", m->name);
    int ready = 0;
    for (int i = 0; i < m->np; ++i) {
      ready += k.ready[i];
      SG_CHECK(k.pre_bwd[i] >= 1 || i < m->ready_in_b,
               "%s: pre_backward of parameter %d not in B", m->name, i);
    }
    SG_CHECK(ready == m->ready_in_b && k.post_backward == 0,
             "%s: after B grad_ready fired %d times (expected %d), "
             "post_backward %d",
             m->name, ready, m->ready_in_b, k.post_backward);
    /* the parameters outside a checkpoint: untouched */
    for (int i = m->ready_in_b; i < m->np; ++i) {
      double *now = copy_out(&c->p[i].grad, r->pn[i]);
      SG_CHECK(sg_test_cmp_bytes("untouched", now, init[i],
                                 (size_t)r->pn[i] * sizeof *now) == 0,
               "%s: parameter %d's gradient changed in B", m->name, i);
      free(now);
    }
    r->xgrad = copy_out(&x.grad, sg_tensor_numel(&x.value)); /* after B */
    SG_CHECK(sg_tape_backward(tape, out) == SG_ERR_INVALID_ARG,
             "%s: a backward while W is pending is refused", m->name);
    SG_CHECK(sg_tape_weights_pending(tape), "%s: the refusal kept W", m->name);
    st = sg_tape_backward_weights(tape);
    SG_CHECK(st == SG_OK, "%s: W failed", m->name);
  }
  SG_CHECK(sg_tape_bytes(tape) == 0 && sg_tape_size(tape) == 0 &&
               !sg_tape_weights_pending(tape),
           "%s: the tape holds %zu bytes, %d nodes after backward", m->name,
           sg_tape_bytes(tape), sg_tape_size(tape));
  for (int i = 0; i < m->np; ++i)
    SG_CHECK(k.ready[i] == 1, "%s: grad_ready of parameter %d fired %d times",
             m->name, i, k.ready[i]);
  SG_CHECK(k.post_backward == 1, "%s: post_backward fired %d times", m->name,
           k.post_backward);
  if (!split) r->xgrad = copy_out(&x.grad, sg_tensor_numel(&x.value));
  r->xn = sg_tensor_numel(&x.value);
  for (int i = 0; i < m->np; ++i)
    r->pgrad[i] = copy_out(&c->p[i].grad, r->pn[i]);
  free(gdata);
done:
  sg_tape_destroy(&tape);
  sg_var_release(&x);
  free(xbuf);
  for (int i = 0; i < m->np; ++i) {
    sg_var_release(&c->p[i]);
    free(pv[i]);
    free(pg[i]);
    free(init[i]);
  }
}

static void test_model(const model *m, sg_dtype dt, sg_mesh_t mesh) {
  run_ctx c = {.dt = dt, .mesh = m->sharded ? mesh : NULL};
  result one = {0}, two = {0};
  run(m, &c, 0, &one);
  run(m, &c, 1, &two);
  if (one.xgrad && two.xgrad)
    cmp_bits("input gradient", m->name, dt, one.xgrad, two.xgrad, one.xn);
  for (int i = 0; i < m->np; ++i)
    if (one.pgrad[i] && two.pgrad[i]) {
      char what[32];
      snprintf(what, sizeof what, "parameter %d gradient", i);
      cmp_bits(what, m->name, dt, one.pgrad[i], two.pgrad[i], one.pn[i]);
    }
  result_free(&one);
  result_free(&two);
}

/* W without B; sg_tape_clear between B and W drops the deferred nodes. */
static void test_misuse(void) {
  sg_tape_t tape = NULL;
  sg_var x, w, *y = NULL, *l = NULL;
  double xv[N * C * S], wv[C * C] = {0}, wg[C * C] = {0};
  sg_test_rand_fill(xv, N * C * S, 3, -1, 1);
  sg_test_rand_fill(wv, C * C, 4, -1, 1);
  const int64_t xs[3] = {N, C, S}, ws[2] = {C, C};
  SG_REQUIRE_OK(sg_var_init(&x, "x", SG_DTYPE_F64, 3, xs, xv, 0));
  SG_REQUIRE_OK(sg_var_init_param(&w, "w", SG_DTYPE_F64, 2, ws, wv, wg));
  SG_REQUIRE_OK(sg_tape_create(&tape));
  SG_CHECK_STATUS(sg_tape_backward_weights(tape), SG_ERR_INVALID_ARG);
  SG_REQUIRE_OK(sg_ag_linear(tape, &x, &w, NULL, &y));
  SG_REQUIRE_OK(sg_ag_loss(tape, SG_LOSS_SUM, y, NULL, &l));
  SG_CHECK_OK(sg_tape_backward_split(tape, l));
  SG_CHECK(sg_tape_size(tape) == 1 && sg_tape_bytes(tape) > 0,
           "misuse: the linear is deferred (%d nodes)", sg_tape_size(tape));
  sg_tape_clear(tape);
  SG_CHECK(sg_tape_bytes(tape) == 0 && !sg_tape_weights_pending(tape),
           "misuse: clear drops the deferred nodes");
  SG_CHECK(w.pending == 0, "misuse: clear resets the uses (%d)", w.pending);
  for (int i = 0; i < C * C; ++i)
    SG_CHECK(wg[i] == 0, "misuse: no W, no weight gradient");
  SG_CHECK_STATUS(sg_tape_backward_weights(tape), SG_ERR_INVALID_ARG);
  /* the tape is usable again */
  SG_REQUIRE_OK(sg_ag_linear(tape, &x, &w, NULL, &y));
  SG_REQUIRE_OK(sg_ag_loss(tape, SG_LOSS_SUM, y, NULL, &l));
  SG_CHECK_OK(sg_tape_backward(tape, l));
done:
  sg_tape_destroy(&tape);
  sg_var_release(&x);
  sg_var_release(&w);
}

/* Two micro-batches in flight on their own tapes sharing a parameter (a
 * ZB-H1 pipeline stage: F0 F1 B0 B1 W0 W1): the parameter's uses are
 * counted over both tapes, so grad_ready fires once, after the last W
 * (W0 must not reset the count of W1's uses), and the gradient is the sum
 * of the two one-pass gradients. */
static void test_two_tapes(void) {
  sg_tape_t t[2] = {NULL, NULL};
  sg_var x[2], *y = NULL, *l[2] = {NULL, NULL};
  double xv[2][N * C * S], wv[C * C], wg[C * C] = {0}, ref[C * C] = {0};
  counts k = {0};
  run_ctx c = {.np = 1};
  const int64_t xs[3] = {N, C, S}, ws[2] = {C, C};
  memset(x, 0, sizeof x);
  sg_test_rand_fill(wv, C * C, 4, -1, 1);
  sg_var *w = &c.p[0]; /* the hooks count c's parameters */
  SG_REQUIRE_OK(sg_var_init_param(w, "w", SG_DTYPE_F64, 2, ws, wv, wg));
  k.c = &c;
  sg_hooks h = {.grad_ready = on_ready, .post_backward = on_post, .user = &k};
  for (int i = 0; i < 2; ++i) {
    sg_test_rand_fill(xv[i], N * C * S, 20 + i, -1, 1);
    SG_REQUIRE_OK(sg_var_init(&x[i], "x", SG_DTYPE_F64, 3, xs, xv[i], 0));
    SG_REQUIRE_OK(sg_tape_create(&t[i]));
  }
  for (int pass = 0; pass < 2; ++pass) { /* one pass each, then split */
    if (pass) {
      memcpy(ref, wg, sizeof ref);
      memset(wg, 0, sizeof wg);
      for (int i = 0; i < 2; ++i) sg_tape_set_hooks(t[i], &h);
    }
    for (int i = 0; i < 2; ++i) {
      SG_REQUIRE_OK(sg_ag_linear(t[i], &x[i], w, NULL, &y));
      SG_REQUIRE_OK(sg_ag_loss(t[i], SG_LOSS_SUM, y, NULL, &l[i]));
      if (!pass) SG_REQUIRE_OK(sg_tape_backward(t[i], l[i]));
    }
    if (!pass) continue;
    for (int i = 0; i < 2; ++i) SG_CHECK_OK(sg_tape_backward_split(t[i], l[i]));
    SG_CHECK_OK(sg_tape_backward_weights(t[0]));
    SG_CHECK(k.ready[0] == 0, "two tapes: grad_ready after the first W");
    SG_CHECK_OK(sg_tape_backward_weights(t[1]));
    SG_CHECK(k.ready[0] == 1 && k.post_backward == 2,
             "two tapes: grad_ready fired %d times (expected once, after "
             "the last W), post_backward %d",
             k.ready[0], k.post_backward);
  }
  for (int i = 0; i < C * C; ++i)
    SG_CHECK(fabs(wg[i] - ref[i]) <= 1e-12 * (1 + fabs(ref[i])),
             "two tapes: weight gradient %d: %g, one pass each %g", i, wg[i],
             ref[i]);
done:
  for (int i = 0; i < 2; ++i) {
    sg_tape_destroy(&t[i]);
    sg_var_release(&x[i]);
  }
  sg_var_release(&c.p[0]);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  sg_mesh_t mesh = NULL;
  char spec[32];
  snprintf(spec, sizeof spec, "h=%d", sg_test_size);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  const sg_dtype dts[2] = {SG_DTYPE_F32, SG_DTYPE_F64};
  for (size_t i = 0; i < sizeof models / sizeof *models; ++i)
    for (int d = 0; d < 2; ++d) test_model(&models[i], dts[d], mesh);
  test_misuse();
  test_two_tapes();
done:
  sg_mesh_destroy(&mesh);
  return sg_test_finish();
}
