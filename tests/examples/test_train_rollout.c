/* sg-train's multi-step loss (models/rollout_train.c) in double
 * precision on one process: a small step model (periodic 3x3 convolution,
 * bias, tanh) rolled K steps through the history window, the gradient of
 * the K-step loss (the mean of the steps' losses) equal to central finite
 * differences — with history 2 and a mask (split/concat and the masked
 * feedback, rel_l2) and with history 1 (mse); K = 1 the same bits as the
 * one-step loss; checkpointing each step the same bits as without; the
 * host feedback (the rollout's) the same values as the recorded one. */
#include "sg_test.h"
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N = 2, NY = 6, NX = 5, K = 3, P = 2 * 9 + 1 };

static uint64_t rs = 0x2545F4914F6CDD1Dull;
static double urand(void) {
  rs ^= rs >> 12;
  rs ^= rs << 25;
  rs ^= rs >> 27;
  return (double)((rs * 2685821657736338717ull) >> 11) / 4503599627370496.0 -
         1.0;
}

/* The step model: pred = tanh(conv(x, w) + b), x (N, H, NY, NX). */
typedef struct step_model {
  int64_t h;         /* history frames (1 variable) */
  double p[P], g[P]; /* w (1, h, 3, 3) then b (1) */
  sg_var w, b;
} step_model;

static sg_status step(sg_tape_t t, void *ctx, sg_var *const *in, sg_var **out) {
  sg_status st = SG_OK;
  step_model *m = ctx;
  sg_var *c = NULL, *cb = NULL;
  sg_window win[2] = {{.pad = {1, 1}, .boundary = SG_PAD_PERIODIC},
                      {.pad = {1, 1}, .boundary = SG_PAD_PERIODIC}};
  SG_TRY(sg_ag_conv(t, in[0], &m->w, NULL, win, &c));
  SG_TRY(sg_ag_bias(t, c, &m->b, &cb));
  SG_TRY(sg_ag_act(t, SG_ACT_TANH, cb, out));
fail:
  return st;
}

typedef struct problem {
  step_model m;
  sg_train_ar a;
  double x[N * 2 * NY * NX], y[K * N * NY * NX], mk[K * N * NY * NX];
  sg_var leaves[1 + 2 * K];
} problem;

static void setup(problem *q, int64_t h, int masked, sg_loss_kind loss) {
  memset(q, 0, sizeof *q);
  q->m.h = h;
  for (int i = 0; i < P; ++i) q->m.p[i] = 0.4 * urand();
  const int64_t ws[4] = {1, h, 3, 3}, bs[1] = {1};
  sg_var_init_param(&q->m.w, "w", SG_DTYPE_F64, 4, ws, q->m.p, q->m.g);
  sg_var_init_param(&q->m.b, "b", SG_DTYPE_F64, 1, bs, q->m.p + 9 * h,
                    q->m.g + 9 * h);
  for (int64_t i = 0; i < N * h * NY * NX; ++i) q->x[i] = urand();
  for (int64_t i = 0; i < K * N * NY * NX; ++i) {
    q->mk[i] = !masked || (i % 7) != 2;
    q->y[i] = 0.8 * urand() * q->mk[i];
  }
  q->a = (sg_train_ar){.step = step,
                       .step_ctx = &q->m,
                       .dtype = SG_DTYPE_F64,
                       .n = N,
                       .nvars = 1,
                       .history = h,
                       .ny = NY,
                       .nx = NX,
                       .steps = K,
                       .masked = masked,
                       .loss = loss,
                       .lc = {NULL, NULL, N},
                       .div = 1,
                       .x = q->x,
                       .y = q->y,
                       .m = q->mk};
}

/* The loss and (grad) its gradient in m.g. */
static double value(sg_tape_t t, problem *q, int grad) {
  sg_var *loss = NULL;
  double lv = NAN;
  int prev = sg_tape_set_grad_enabled(t, grad);
  q->a.tape = t;
  memset(q->m.g, 0, sizeof q->m.g);
  sg_status st = sg_train_ar_loss(&q->a, q->leaves, &loss, &lv);
  if (st == SG_OK && grad) st = sg_tape_backward(t, loss);
  SG_CHECK_OK(st);
  sg_tape_clear(t);
  sg_tape_set_grad_enabled(t, prev);
  sg_train_ar_release(q->leaves, q->a.steps);
  return lv;
}

static void fd_check(const char *what, sg_tape_t t, problem *q) {
  double g[P];
  const int np = (int)(9 * q->m.h + 1);
  const double l0 = value(t, q, 1), h = 1e-6;
  memcpy(g, q->m.g, sizeof g);
  SG_CHECK(isfinite(l0) && l0 > 0, "%s: loss %g", what, l0);
  int bad = 0;
  for (int i = 0; i < np; ++i) {
    const double s = q->m.p[i];
    q->m.p[i] = s + h;
    const double lp = value(t, q, 0);
    q->m.p[i] = s - h;
    const double lm = value(t, q, 0);
    q->m.p[i] = s;
    const double fd = (lp - lm) / (2 * h);
    if (!(fabs(fd - g[i]) <= 1e-6 * (1 + fabs(fd)))) {
      if (!bad)
        sg_test_fail_at(__FILE__, __LINE__,
                        "%s: parameter %d: fd %.10g, backward %.10g", what, i,
                        fd, g[i]);
      ++bad;
    }
  }
  SG_CHECK(bad == 0, "%s: %d of %d entries differ from finite differences",
           what, bad, np);
}

/* Central finite differences of the K-step loss. */
static void test_gradients(sg_tape_t t) {
  problem *q = malloc(sizeof *q);
  setup(q, 2, 1, SG_LOSS_REL_L2);
  fd_check("history 2, masked, rel_l2, K 3", t, q);
  double g[P];
  value(t, q, 1);
  memcpy(g, q->m.g, sizeof g);
  q->a.ckpt = 1; /* every step checkpointed: the same bits */
  value(t, q, 1);
  double worst = 0;
  for (int i = 0; i < P; ++i)
    worst = fmax(worst, fabs(g[i] - q->m.g[i]) / (1e-300 + fabs(g[i])));
  SG_CHECK(memcmp(g, q->m.g, sizeof g) == 0,
           "checkpointed steps: the gradient differs (worst relative %g)",
           worst);
  setup(q, 1, 0, SG_LOSS_MSE);
  fd_check("history 1, mse, K 3", t, q);
  free(q);
}

/* K = 1: the one-step loss of sg_ag_dist_loss, the same bits. */
static void test_one_step(sg_tape_t t) {
  problem *q = malloc(sizeof *q);
  setup(q, 2, 1, SG_LOSS_REL_L2);
  q->a.steps = 1;
  const double l1 = value(t, q, 1);
  double g[P];
  memcpy(g, q->m.g, sizeof g);
  sg_var x, y, mk, *pred = NULL, *loss = NULL;
  const int64_t xs[4] = {N, 2, NY, NX}, ys[4] = {N, 1, NY, NX};
  memset(q->m.g, 0, sizeof q->m.g);
  SG_CHECK_OK(sg_var_init(&x, "x", SG_DTYPE_F64, 4, xs, q->x, 0));
  SG_CHECK_OK(sg_var_init(&y, "y", SG_DTYPE_F64, 4, ys, q->y, 0));
  SG_CHECK_OK(sg_var_init(&mk, "m", SG_DTYPE_F64, 4, ys, q->mk, 0));
  SG_CHECK_OK(step(t, &q->m, (sg_var *const[]){&x}, &pred));
  SG_CHECK_OK(
      sg_ag_dist_loss(t, SG_LOSS_REL_L2, pred, &y, &mk, &q->a.lc, &loss));
  const double l2 = sg_dist_loss_value(loss);
  SG_CHECK_OK(sg_tape_backward(t, loss));
  SG_CHECK(l1 == l2 && memcmp(g, q->m.g, sizeof g) == 0,
           "K = 1: loss %.17g vs %.17g, or the gradients differ", l1, l2);
  sg_var_release(&x);
  sg_var_release(&y);
  sg_var_release(&mk);
  free(q);
}

/* The rollout's host feedback: the window shifted, the masked prediction
 * appended. */
static void test_feed_back(void) {
  enum { H = 3, FR = 4 };
  float x[2 * H * FR], p[2 * FR], m[2 * FR], want[2 * H * FR];
  for (int i = 0; i < 2 * H * FR; ++i) x[i] = (float)i;
  for (int i = 0; i < 2 * FR; ++i) p[i] = 100.0f + (float)i, m[i] = i % 3 != 0;
  for (int j = 0; j < 2; ++j)
    for (int i = 0; i < H * FR; ++i)
      want[j * H * FR + i] = i < (H - 1) * FR
                                 ? x[j * H * FR + FR + i]
                                 : p[j * FR + i - (H - 1) * FR] *
                                       m[j * FR + i - (H - 1) * FR];
  sg_train_feed_back(x, p, m, 2, H, FR);
  SG_CHECK(memcmp(x, want, sizeof x) == 0, "feedback: wrong window");
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  sg_tape_t t = NULL;
  SG_CHECK_OK(sg_tape_create(&t));
  test_gradients(t);
  test_one_step(t);
  test_feed_back();
  sg_tape_destroy(&t);
  return sg_test_finish();
}
