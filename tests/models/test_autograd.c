/* Autograd tape: a small graph (conv -> bias -> relu -> pool -> mse) whose
 * backward equals central finite differences in double precision; a wider
 * graph through every recorded op; accumulation over two backwards,
 * zero-grad, no-grad mode, hooks, and activation memory released after
 * backward. Single rank. */
#include "sg_autograd.h"
#include "sg_device.h"
#include "sg_test.h"

#include <math.h>
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
static void fill(double *p, int64_t n, double scale) {
  for (int64_t i = 0; i < n; ++i) p[i] = scale * urand();
}

/* ---- model 1: conv -> bias -> relu -> pool -> mse ------------------------ */

enum { N = 2, C = 2, K = 3, H = 9, W = 7 };
typedef struct model1 {
  double x[N * C * H * W], w[K * C * 3 * 3], b[K], t[N * K * 4 * 3];
  double gw[K * C * 9], gb[K];
  sg_var vx, vw, vb, vt;
} model1;

static sg_status model1_forward(sg_tape_t tape, model1 *m, sg_var **loss) {
  sg_status st = SG_OK;
  sg_var *h1, *h2, *h3, *h4;
  sg_window ca[2] = {{.pad = {1, 1}, .boundary = SG_PAD_ZERO},
                     {.pad = {1, 1}, .boundary = SG_PAD_PERIODIC}};
  SG_TRY(sg_ag_conv(tape, &m->vx, &m->vw, NULL, ca, &h1)); /* (2, 3, 9, 7) */
  SG_TRY(sg_ag_bias(tape, h1, &m->vb, &h2));
  SG_TRY(sg_ag_act(tape, SG_ACT_RELU, h2, &h3));
  int64_t pk[2] = {3, 3};
  sg_window pa[2] = {{.kernel = pk[0], .stride = 2},
                     {.kernel = pk[1], .stride = 2}};
  SG_TRY(sg_ag_pool(tape, SG_POOL_MAX, h3, pa, &h4)); /* (2, 3, 4, 3) */
  SG_TRY(sg_ag_loss(tape, SG_LOSS_MSE, h4, &m->vt, loss));
fail:
  return st;
}

static double model1_value(sg_tape_t tape, model1 *m) {
  int prev = sg_tape_set_grad_enabled(tape, 0);
  sg_var *loss = NULL;
  double v = NAN;
  if (model1_forward(tape, m, &loss) == SG_OK) v = sg_var_item(loss);
  sg_tape_clear(tape);
  sg_tape_set_grad_enabled(tape, prev);
  return v;
}

typedef struct hook_log {
  int pre_use, grad_ready, post;
  int ready_w, ready_b;
  double w_at_ready[K * C * 9];
} hook_log;

static sg_status on_pre_use(sg_var *p, void *u) {
  (void)p;
  ((hook_log *)u)->pre_use++;
  return SG_OK;
}
static sg_status on_ready(sg_var *p, void *u) {
  hook_log *l = u;
  l->grad_ready++;
  if (!strcmp(p->name, "w")) {
    l->ready_w++;
    memcpy(l->w_at_ready, p->grad.data, sizeof l->w_at_ready);
  }
  if (!strcmp(p->name, "b")) l->ready_b++;
  return SG_OK;
}
static sg_status on_post(sg_tape_t t, void *u) {
  (void)t;
  ((hook_log *)u)->post++;
  return SG_OK;
}

static void fd_check(const char *what, sg_tape_t tape, model1 *m, double *p,
                     const double *g, int64_t n) {
  const double h = 1e-6;
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    double s = p[i];
    p[i] = s + h;
    double lp = model1_value(tape, m);
    p[i] = s - h;
    double lm = model1_value(tape, m);
    p[i] = s;
    double fd = (lp - lm) / (2 * h);
    if (!(fabs(fd - g[i]) <= 1e-6 * (1 + fabs(fd)))) {
      if (!bad)
        sg_test_fail_at(__FILE__, __LINE__,
                        "%s[%lld]: fd %.10g, backward %.10g", what,
                        (long long)i, fd, g[i]);
      bad++;
    }
  }
  SG_CHECK(bad == 0, "%s: %d entries differ from finite differences", what,
           bad);
}

static void test_model1(void) {
  model1 *m = calloc(1, sizeof *m);
  sg_tape_t tape = NULL;
  hook_log log;
  memset(&log, 0, sizeof log);
  fill(m->x, N * C * H * W, 1);
  fill(m->w, K * C * 9, 0.5);
  fill(m->b, K, 0.3);
  fill(m->t, N * K * 12, 1);
  const int64_t xs[4] = {N, C, H, W}, ws[4] = {K, C, 3, 3}, bs[1] = {K},
                ts[4] = {N, K, 4, 3};
  SG_REQUIRE_OK(sg_var_init(&m->vx, "x", SG_DTYPE_F64, 4, xs, m->x, 1));
  SG_REQUIRE_OK(
      sg_var_init_param(&m->vw, "w", SG_DTYPE_F64, 4, ws, m->w, m->gw));
  SG_REQUIRE_OK(
      sg_var_init_param(&m->vb, "b", SG_DTYPE_F64, 1, bs, m->b, m->gb));
  SG_REQUIRE_OK(sg_var_init(&m->vt, "t", SG_DTYPE_F64, 4, ts, m->t, 0));
  SG_REQUIRE_OK(sg_tape_create(&tape));
  sg_hooks hooks = {.pre_use = on_pre_use,
                    .grad_ready = on_ready,
                    .post_backward = on_post,
                    .user = &log};
  sg_tape_set_hooks(tape, &hooks);

  sg_mem_info before, after;
  sg_mem_get_info(sg_device_host(), &before);
  sg_var *loss = NULL;
  SG_REQUIRE_OK(model1_forward(tape, m, &loss));
  SG_CHECK(sg_tape_size(tape) == 5, "5 ops recorded, got %d",
           sg_tape_size(tape));
  SG_CHECK(sg_tape_bytes(tape) > 0, "activations held");
  double l1 = sg_var_item(loss);
  SG_CHECK(isfinite(l1) && l1 > 0, "loss %g", l1);
  SG_CHECK_OK(sg_tape_backward(tape, loss));
  SG_CHECK(sg_tape_size(tape) == 0 && sg_tape_bytes(tape) == 0,
           "tape empty after backward");
  sg_mem_get_info(sg_device_host(), &after);
  /* the input x owns a gradient now (it requires one); nothing else stays */
  SG_CHECK(after.current_bytes == before.current_bytes + sizeof m->x,
           "activation memory released: %zu -> %zu bytes", before.current_bytes,
           after.current_bytes);
  SG_CHECK(log.pre_use == 2 && log.ready_w == 1 && log.ready_b == 1 &&
               log.post == 1,
           "hooks: pre_use %d, ready w %d b %d, post %d", log.pre_use,
           log.ready_w, log.ready_b, log.post);
  SG_CHECK(memcmp(log.w_at_ready, m->gw, sizeof m->gw) == 0,
           "w gradient final when its hook fired");

  double gw1[K * C * 9], gb1[K], gx1[N * C * H * W];
  memcpy(gw1, m->gw, sizeof gw1);
  memcpy(gb1, m->gb, sizeof gb1);
  memcpy(gx1, m->vx.grad.data, sizeof gx1);
  fd_check("dL/dw", tape, m, m->w, gw1, K * C * 9);
  fd_check("dL/db", tape, m, m->b, gb1, K);
  fd_check("dL/dx", tape, m, m->x, gx1, N * C * H * W);

  /* accumulation over a second backward */
  SG_REQUIRE_OK(model1_forward(tape, m, &loss));
  SG_CHECK(sg_var_item(loss) == l1, "same loss on the second forward");
  SG_CHECK_OK(sg_tape_backward(tape, loss));
  int ok = 1;
  for (int i = 0; i < K * C * 9; ++i) ok &= m->gw[i] == 2 * gw1[i];
  for (int i = 0; i < K; ++i) ok &= m->gb[i] == 2 * gb1[i];
  for (int i = 0; i < N * C * H * W; ++i)
    ok &= ((double *)m->vx.grad.data)[i] == 2 * gx1[i];
  SG_CHECK(ok, "gradients accumulate over two backwards");

  /* zero-grad */
  sg_var *params[3] = {&m->vw, &m->vb, &m->vx};
  SG_CHECK_OK(sg_tape_zero_grad(params, 3));
  ok = 1;
  for (int i = 0; i < K * C * 9; ++i) ok &= m->gw[i] == 0;
  for (int i = 0; i < N * C * H * W; ++i)
    ok &= ((double *)m->vx.grad.data)[i] == 0;
  SG_CHECK(ok, "zero-grad");

  /* no-grad: nothing recorded, same value, backward refused */
  sg_tape_set_grad_enabled(tape, 0);
  SG_REQUIRE_OK(model1_forward(tape, m, &loss));
  SG_CHECK(sg_tape_size(tape) == 0, "no-grad records nothing");
  SG_CHECK(sg_var_item(loss) == l1, "no-grad value equals the recorded one");
  SG_CHECK_STATUS(sg_tape_backward(tape, loss), SG_ERR_INVALID_ARG);
  sg_tape_set_grad_enabled(tape, 1);
  for (int i = 0; i < K * C * 9; ++i) ok &= m->gw[i] == 0;
  SG_CHECK(ok, "no gradient from no-grad mode");

  /* bad input: clear errors */
  sg_var *y = NULL;
  sg_window ca1[2] = {{.kernel = 5}, {0}}; /* a kernel unlike the weight's */
  SG_CHECK_STATUS(sg_ag_conv(tape, &m->vx, &m->vw, NULL, ca1, &y),
                  SG_ERR_SHAPE);
  SG_CHECK_STATUS(sg_ag_binary(tape, SG_BINARY_ADD, &m->vx, &m->vt, &y),
                  SG_ERR_SHAPE);
  sg_window big[2] = {{.kernel = 11}, {.kernel = 3}};
  SG_CHECK_STATUS(sg_ag_pool(tape, SG_POOL_AVG, &m->vx, big, &y), SG_ERR_SHAPE);
  sg_tape_clear(tape);
done:
  sg_tape_destroy(&tape);
  sg_var_release(&m->vx);
  sg_var_release(&m->vw);
  sg_var_release(&m->vb);
  sg_var_release(&m->vt);
  free(m);
}

/* ---- model 2: every recorded op ------------------------------------------- */
/* x (1, 2, 5, 6) -> conv 3x3 reflect/replicate (w1, b1) -> groupnorm (g, be)
 * -> gelu -> split (1 + 3) -> [a: upsample bilinear x2 -> avgpool 2],
 * [c: tanh] -> concat -> linear (w2, b2) -> mul by itself -> silu -> scale
 * -> convt 2x2 (w3) -> maxpool 2 -> add x-branch -> rel_l2 against t. */
enum { P1 = 0, P2, P3, P4, P5, P6, P7, NP };
typedef struct model2 {
  double x[1 * 2 * 5 * 6], t[1 * 2 * 5 * 6];
  double *p[NP], *g[NP];
  int64_t n[NP];
  sg_var vx, vt, vp[NP];
} model2;

static sg_status model2_forward(sg_tape_t tape, model2 *m, sg_var **loss) {
  sg_status st = SG_OK;
  sg_var *a, *b, *c, *d, *parts[2], *e, *f, *g, *h, *i, *j, *k, *l, *o, *q;
  sg_window ca[2] = {{.pad = {1, 1}, .boundary = SG_PAD_REFLECT},
                     {.pad = {1, 1}, .boundary = SG_PAD_REPLICATE}};
  SG_TRY(sg_ag_conv(tape, &m->vx, &m->vp[P1], &m->vp[P2], ca,
                    &a)); /* (1, 4, 5, 6) */
  sg_norm_desc nd = {.kind = SG_NORM_GROUP, .groups = 2, .eps = 1e-5};
  SG_TRY(sg_ag_norm(tape, &nd, a, &m->vp[P3], &m->vp[P4], &b));
  SG_TRY(sg_ag_act(tape, SG_ACT_GELU, b, &c));
  int64_t ch[2] = {1, 3};
  SG_TRY(sg_ag_split(tape, c, 2, ch, parts));
  int64_t sc[2] = {2, 2}, pk[2] = {2, 2};
  SG_TRY(sg_ag_upsample(tape, SG_UPSAMPLE_LINEAR, parts[0], sc,
                        &d)); /* (1,1,10,12) */
  sg_window pa[2] = {{.kernel = pk[0], .stride = 2},
                     {.kernel = pk[1], .stride = 2}};
  SG_TRY(sg_ag_pool(tape, SG_POOL_AVG, d, pa, &e)); /* (1,1,5,6) */
  SG_TRY(sg_ag_act(tape, SG_ACT_TANH, parts[1], &f));
  sg_var *cat[2] = {e, f};
  SG_TRY(sg_ag_concat(tape, 2, cat, &g));                    /* (1,4,5,6) */
  SG_TRY(sg_ag_linear(tape, g, &m->vp[P5], &m->vp[P6], &h)); /* (1,2,5,6) */
  SG_TRY(sg_ag_binary(tape, SG_BINARY_MUL, h, h, &i));
  SG_TRY(sg_ag_act(tape, SG_ACT_SILU, i, &j));
  SG_TRY(sg_ag_scale(tape, 0.75, j, &k));
  SG_TRY(sg_ag_convt(tape, k, &m->vp[P7], NULL, &l)); /* (1,2,10,12) */
  sg_window pm[2] = {{.kernel = pk[0], .stride = 2},
                     {.kernel = pk[1], .stride = 2}};
  SG_TRY(sg_ag_pool(tape, SG_POOL_MAX, l, pm, &o)); /* (1,2,5,6) */
  SG_TRY(sg_ag_binary(tape, SG_BINARY_ADD, o, &m->vx, &q));
  SG_TRY(sg_ag_loss(tape, SG_LOSS_REL_L2, q, &m->vt, loss));
fail:
  return st;
}

static double model2_value(sg_tape_t tape, model2 *m) {
  int prev = sg_tape_set_grad_enabled(tape, 0);
  sg_var *loss = NULL;
  double v = NAN;
  if (model2_forward(tape, m, &loss) == SG_OK) v = sg_var_item(loss);
  sg_tape_clear(tape);
  sg_tape_set_grad_enabled(tape, prev);
  return v;
}

static void test_model2(void) {
  model2 *m = calloc(1, sizeof *m);
  sg_tape_t tape = NULL;
  const int64_t shapes[NP][4] = {{4, 2, 3, 3}, {4}, {4},         {4},
                                 {2, 4},       {2}, {2, 2, 2, 2}};
  const int nd[NP] = {4, 1, 1, 1, 2, 1, 4};
  fill(m->x, 60, 1);
  fill(m->t, 60, 1);
  const int64_t xs[4] = {1, 2, 5, 6};
  SG_REQUIRE_OK(sg_var_init(&m->vx, "x", SG_DTYPE_F64, 4, xs, m->x, 0));
  SG_REQUIRE_OK(sg_var_init(&m->vt, "t", SG_DTYPE_F64, 4, xs, m->t, 0));
  for (int k = 0; k < NP; ++k) {
    m->n[k] = 1;
    for (int d = 0; d < nd[k]; ++d) m->n[k] *= shapes[k][d];
    m->p[k] = malloc((size_t)m->n[k] * sizeof(double));
    fill(m->p[k], m->n[k], 0.6);
    if (k == P3)
      for (int64_t i = 0; i < m->n[k]; ++i) m->p[k][i] += 1.0;
    SG_REQUIRE_OK(sg_var_init_param(&m->vp[k], "p", SG_DTYPE_F64, nd[k],
                                    shapes[k], m->p[k], NULL));
    m->g[k] = m->vp[k].grad.data;
  }
  SG_REQUIRE_OK(sg_tape_create(&tape));
  sg_var *loss = NULL;
  SG_REQUIRE_OK(model2_forward(tape, m, &loss));
  SG_CHECK(isfinite(sg_var_item(loss)), "loss finite");
  SG_REQUIRE_OK(sg_tape_backward(tape, loss));
  const double h = 1e-6;
  for (int k = 0; k < NP; ++k) {
    int bad = 0;
    for (int64_t i = 0; i < m->n[k]; ++i) {
      double s = m->p[k][i];
      m->p[k][i] = s + h;
      double lp = model2_value(tape, m);
      m->p[k][i] = s - h;
      double lm = model2_value(tape, m);
      m->p[k][i] = s;
      double fd = (lp - lm) / (2 * h);
      if (!(fabs(fd - m->g[k][i]) <= 1e-5 * (1 + fabs(fd)))) {
        if (!bad)
          sg_test_fail_at(__FILE__, __LINE__,
                          "param %d [%lld]: fd %.10g, backward %.10g", k,
                          (long long)i, fd, m->g[k][i]);
        bad++;
      }
    }
    SG_CHECK(bad == 0,
             "model2 param %d: %d entries differ from finite differences", k,
             bad);
  }
done:
  sg_tape_destroy(&tape);
  for (int k = 0; k < NP; ++k) {
    sg_var_release(&m->vp[k]);
    free(m->p[k]);
  }
  sg_var_release(&m->vx);
  sg_var_release(&m->vt);
  free(m);
}

/* f32 through the same tape machinery */
static void test_f32(void) {
  float x[2 * 3 * 8], w[4 * 3], gw[4 * 3];
  for (int i = 0; i < 48; ++i) x[i] = (float)urand();
  for (int i = 0; i < 12; ++i) w[i] = (float)urand();
  memset(gw, 0, sizeof gw);
  sg_var vx, vw;
  sg_tape_t tape = NULL;
  const int64_t xs[3] = {2, 3, 8}, ws[2] = {4, 3};
  SG_REQUIRE_OK(sg_var_init(&vx, "x", SG_DTYPE_F32, 3, xs, x, 0));
  SG_REQUIRE_OK(sg_var_init_param(&vw, "w", SG_DTYPE_F32, 2, ws, w, gw));
  SG_REQUIRE_OK(sg_tape_create(&tape));
  sg_var *y, *l;
  SG_REQUIRE_OK(sg_ag_linear(tape, &vx, &vw, NULL, &y));
  SG_REQUIRE_OK(sg_ag_loss(tape, SG_LOSS_SUM, y, NULL, &l));
  SG_REQUIRE_OK(sg_tape_backward(tape, l));
  /* d sum(W x)/dW[k][c] = sum_{n,s} x[n,c,s] */
  int ok = 1;
  for (int k = 0; k < 4; ++k)
    for (int c = 0; c < 3; ++c) {
      double s = 0;
      for (int n = 0; n < 2; ++n)
        for (int j = 0; j < 8; ++j) s += x[(n * 3 + c) * 8 + j];
      ok &= fabs(gw[k * 3 + c] - s) <= 1e-5 * (1 + fabs(s));
    }
  SG_CHECK(ok, "f32 linear weight gradient");
  /* mixing dtypes is an error */
  double xd[48] = {0};
  sg_var vxd;
  SG_REQUIRE_OK(sg_var_init(&vxd, "xd", SG_DTYPE_F64, 3, xs, xd, 0));
  SG_CHECK_STATUS(sg_ag_linear(tape, &vxd, &vw, NULL, &y), SG_ERR_SHAPE);
  sg_var_release(&vxd);
done:
  sg_tape_destroy(&tape);
  sg_var_release(&vx);
  sg_var_release(&vw);
}

/* ---- additions: the tape routes both input gradients itself ------------ */
/* a = linear(x); s = a + a (one variable twice); u = tanh(a) (a used
 * again); q = s + u (s takes q's gradient buffer, u a copy); r = q + x (x
 * without gradient); loss rel_l2(r, t). */
typedef struct model3 {
  double x[1 * 2 * 3 * 3], t[1 * 2 * 3 * 3], w[4], b[2];
  sg_var vx, vt, vw, vb;
} model3;

static sg_status model3_forward(sg_tape_t tape, model3 *m, sg_var **loss) {
  sg_status st = SG_OK;
  sg_var *a, *s, *u, *q, *r;
  SG_TRY(sg_ag_linear(tape, &m->vx, &m->vw, &m->vb, &a));
  SG_TRY(sg_ag_binary(tape, SG_BINARY_ADD, a, a, &s));
  SG_TRY(sg_ag_act(tape, SG_ACT_TANH, a, &u));
  SG_TRY(sg_ag_binary(tape, SG_BINARY_ADD, s, u, &q));
  SG_TRY(sg_ag_binary(tape, SG_BINARY_ADD, q, &m->vx, &r));
  SG_TRY(sg_ag_loss(tape, SG_LOSS_REL_L2, r, &m->vt, loss));
fail:
  return st;
}

static void test_model3(void) {
  model3 *m = calloc(1, sizeof *m);
  sg_tape_t tape = NULL;
  fill(m->x, 18, 1);
  fill(m->t, 18, 1);
  fill(m->w, 4, 0.7);
  fill(m->b, 2, 0.3);
  const int64_t xs[4] = {1, 2, 3, 3}, ws[2] = {2, 2}, bs[1] = {2};
  SG_REQUIRE_OK(sg_var_init(&m->vx, "x", SG_DTYPE_F64, 4, xs, m->x, 0));
  SG_REQUIRE_OK(sg_var_init(&m->vt, "t", SG_DTYPE_F64, 4, xs, m->t, 0));
  SG_REQUIRE_OK(
      sg_var_init_param(&m->vw, "w", SG_DTYPE_F64, 2, ws, m->w, NULL));
  SG_REQUIRE_OK(
      sg_var_init_param(&m->vb, "b", SG_DTYPE_F64, 1, bs, m->b, NULL));
  SG_REQUIRE_OK(sg_tape_create(&tape));
  sg_var *loss = NULL;
  SG_REQUIRE_OK(model3_forward(tape, m, &loss));
  SG_REQUIRE_OK(sg_tape_backward(tape, loss));
  double *ps[2] = {m->w, m->b}, *gs[2] = {m->vw.grad.data, m->vb.grad.data};
  const int np[2] = {4, 2};
  for (int k = 0; k < 2; ++k) {
    int bad = 0;
    for (int i = 0; i < np[k]; ++i) {
      const double h = 1e-6, s0 = ps[k][i];
      double v[2];
      for (int side = 0; side < 2; ++side) {
        ps[k][i] = s0 + (side ? -h : h);
        int prev = sg_tape_set_grad_enabled(tape, 0);
        sg_var *l = NULL;
        v[side] = model3_forward(tape, m, &l) == SG_OK ? sg_var_item(l) : NAN;
        sg_tape_clear(tape);
        sg_tape_set_grad_enabled(tape, prev);
      }
      ps[k][i] = s0;
      const double fd = (v[0] - v[1]) / (2 * h);
      if (!(fabs(fd - gs[k][i]) <= 1e-6 * (1 + fabs(fd)))) {
        if (!bad)
          sg_test_fail_at(__FILE__, __LINE__,
                          "model3 param %d [%d]: fd %.10g, backward %.10g", k,
                          i, fd, gs[k][i]);
        bad++;
      }
    }
    SG_CHECK(bad == 0,
             "model3 param %d: %d entries differ from finite differences", k,
             bad);
  }
done:
  sg_tape_destroy(&tape);
  sg_var_release(&m->vw);
  sg_var_release(&m->vb);
  sg_var_release(&m->vx);
  sg_var_release(&m->vt);
  free(m);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  test_model1();
  test_model2();
  test_model3();
  test_f32();
  return sg_test_finish();
}
