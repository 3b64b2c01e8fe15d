/* shardgrid — multi-step (autoregressive) training: the loss over K steps
 * of the model fed its own predictions (sg_rollout_train.h; sg-train's
 * rollout_train, rollout_grad), and the feedback a rollout shares with it. */
#include "sg_rollout_train.h"

#include <stdlib.h>
#include <string.h>

#include "autograd_impl.h" /* ag_mem_copy: the tests' faked device too */

void sg_train_feed_back(float *x, const float *pred, const float *mask,
                        int64_t n, int64_t history, int64_t frame) {
  for (int64_t j = 0; j < n; ++j) {
    float *xj = x + j * history * frame, *dst = xj + (history - 1) * frame;
    const float *p = pred + j * frame, *m = mask ? mask + j * frame : NULL;
    memmove(xj, xj + frame, (size_t)((history - 1) * frame) * sizeof *xj);
    for (int64_t i = 0; i < frame; ++i) dst[i] = m ? p[i] * m[i] : p[i];
  }
}

int64_t sg_train_ar_steps_at(int64_t steps, int64_t curriculum, int64_t step) {
  if (curriculum <= 0 || steps <= 1) return steps > 1 ? steps : 1;
  const int64_t k = 1 + (step - 1) / curriculum;
  return k < steps ? k : steps;
}

/* One step's block (for activation checkpointing): the model. */
static sg_status model_block(sg_tape_t tape, void *ctx, sg_var *const *in,
                             sg_var **out) {
  return sg_model_forward((sg_model_t)ctx, tape, in[0], &out[0]);
}

static sg_status step_forward(const sg_train_ar *a, sg_var *x, sg_var **pred) {
  sg_block_fn fn = a->step ? a->step : model_block;
  void *ctx = a->step ? a->step_ctx : (void *)a->model;
  if (a->ckpt) /* keep only the step's input and output */
    return sg_ag_checkpoint(a->tape, fn, ctx, 1, &x, 1, pred);
  return fn(a->tape, ctx, &x, pred);
}

static sg_status mark(const sg_train_ar *a, sg_var *v) {
  return a->model ? sg_model_mark(a->model, v) : SG_OK;
}

/* Element e of buffer p (of a->dtype). */
static void *at(const sg_train_ar *a, void *p, int64_t e) {
  return (char *)p + (size_t)e * sg_dtype_size(a->dtype);
}

/* The next step's input, recorded: the history window of x shifted by one
 * frame with the (masked) prediction as its newest frame — the layout of
 * sg_dataset_fill, the values sg_train_feed_back makes. */
static sg_status next_input(const sg_train_ar *a, sg_var *x, sg_var *pred,
                            sg_var *mask, sg_var **next) {
  sg_status st = SG_OK;
  sg_var *fb = pred, *parts[2] = {NULL, NULL};
  if (mask) SG_TRY(sg_ag_binary(a->tape, SG_BINARY_MUL, pred, mask, &fb));
  if (a->history == 1) {
    *next = fb;
    return SG_OK;
  }
  const int64_t ch[2] = {a->nvars, (a->history - 1) * a->nvars};
  SG_TRY(sg_ag_split(a->tape, x, 2, ch, parts));
  sg_var *cat[2] = {parts[1], fb};
  SG_TRY(sg_ag_concat(a->tape, 2, cat, next));
fail:
  return st;
}

/* The weights of a step's loss: its mask m (NULL: none) times a->weight. */
static sg_status loss_weights(const sg_train_ar *a, sg_var *m, sg_var **w) {
  if (!a->weight || !m) {
    *w = a->weight ? a->weight : m;
    return SG_OK;
  }
  return sg_ag_binary(a->tape, SG_BINARY_MUL, m, a->weight, w);
}

static int64_t frame_of(const sg_train_ar *a) {
  return a->nvars * a->ny * a->nx;
}

sg_status sg_train_ar_detached(const sg_train_ar *a) {
  sg_status st = SG_OK;
  if (!a->pushforward) return SG_OK;
  if (a->dtype != SG_DTYPE_F32)
    return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                        "rollout_grad = pushforward: f32 data only");
  const int64_t fr = frame_of(a);
  int64_t xs[4] = {a->n, a->history * a->nvars, a->ny, a->nx};
  int prev = sg_tape_set_grad_enabled(a->tape, 0);
  for (int64_t k = 0; k + 1 < a->steps && st == SG_OK; ++k) {
    sg_var x, *pred = NULL;
    memset(&x, 0, sizeof x);
    st = sg_var_init(&x, "x", SG_DTYPE_F32, 4, xs, a->x, 0);
    if (st == SG_OK) st = step_forward(a, &x, &pred);
    if (st == SG_OK)
      sg_train_feed_back(a->x, pred->value.data,
                         a->masked ? at(a, a->m, k * a->n * fr) : NULL, a->n,
                         a->history, fr);
    sg_tape_clear(a->tape);
    sg_var_release(&x);
  }
  sg_tape_set_grad_enabled(a->tape, prev);
  return st;
}

/* What a device step cannot do yet (issue 22), else SG_OK. */
static sg_status device_check(const sg_train_ar *a) {
  const char *why = NULL, *dn = sg_device_kind_name(a->device.kind);
  if (a->masked)
    why = "masked data (the masked loss is the host's distributed loss)";
  else if (a->weight)
    why = "loss weights (loss_weighting = latitude)";
  else if (a->pushforward)
    why = "rollout_grad = pushforward (its feedback runs on the host)";
  else if (!a->dx || !a->dy)
    why = "no device buffers for the batch (dx, dy)";
  if (!why) return SG_OK;
  return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                      "training on %s:%d: %s is not supported on devices yet",
                      dn, a->device.index, why);
}

/* The step's loss of pred against y: the distributed loss on the host and
 * on a device over a split domain or batch (the tape runs it there or
 * refuses it by name: the op device table), the plain loss op on a device
 * in one process (the same sums; rel_l2 over the global batch). *v its
 * value in double. */
static sg_status step_loss(const sg_train_ar *a, sg_var *pred, sg_var *y,
                           sg_var *lm, sg_var **lk, double *v) {
  sg_status st = SG_OK;
  const int split = (a->lc.domain && sg_group_size(a->lc.domain) > 1) ||
                    (a->lc.data && sg_group_size(a->lc.data) > 1);
  if (a->device.kind == SG_DEVICE_HOST || split) {
    SG_TRY(sg_ag_dist_loss(a->tape, a->loss, pred, y, lm, &a->lc, lk));
    *v = sg_dist_loss_value(*lk);
    goto fail;
  }
  SG_TRY(sg_ag_loss(a->tape, a->loss, pred, y, lk));
  *v = sg_var_item(*lk);
  if (a->loss == SG_LOSS_REL_L2 && a->lc.global_batch > 0 &&
      a->lc.global_batch != a->n) {
    const double f = (double)a->n / (double)a->lc.global_batch;
    SG_TRY(sg_ag_scale(a->tape, f, *lk, lk));
    *v *= f;
  }
fail:
  return st;
}

/* A leaf of the step on the device: the host data (elements) copied to
 * dev_buf, the variable there. */
static sg_status device_leaf(const sg_train_ar *a, sg_var *v, const char *name,
                             const int64_t *shape, const void *host,
                             void *dev_buf) {
  sg_status st = SG_OK;
  const size_t nb = (size_t)(shape[0] * shape[1] * shape[2] * shape[3]) *
                    sg_dtype_size(a->dtype);
  SG_TRY(ag_mem_copy(a->device, dev_buf, sg_device_host(), host, nb));
  SG_TRY(sg_var_init(v, name, a->dtype, 4, shape, dev_buf, 0));
  SG_TRY(sg_var_set_device(v, a->device));
fail:
  return st;
}

sg_status sg_train_ar_loss(const sg_train_ar *a, sg_var *leaves, sg_var **loss,
                           double *lval) {
  sg_status st = SG_OK;
  const int64_t fr = frame_of(a), K = a->steps,
                first = a->pushforward ? K - 1 : 0, graded = K - first;
  int64_t xs[4] = {a->n, a->history * a->nvars, a->ny, a->nx},
          ys[4] = {a->n, a->cout > 0 ? a->cout : a->nvars, a->ny, a->nx};
  sg_var *x = &leaves[0], *total = NULL, *pred = NULL, *lk = NULL, *lm = NULL;
  double sum = 0.0;
  if (a->cout > 0 && a->cout != a->nvars && K > 1)
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "multi-step training feeds one frame back: the model's output "
             "(%lld channels) must be one frame (%lld variables)",
             (long long)a->cout, (long long)a->nvars);
  const int dev = a->device.kind != SG_DEVICE_HOST;
  if (dev) {
    SG_TRY(device_check(a));
    SG_TRY(device_leaf(a, x, "x", xs, a->x, a->dx));
  } else
    SG_TRY(sg_var_init(x, "x", a->dtype, 4, xs, a->x, 0));
  /* marked here, not only by the model: a checkpointed step's output takes
   * its placement from its input */
  SG_TRY(mark(a, x));
  if (a->weight) SG_TRY(mark(a, a->weight));
  for (int64_t k = first; k < K; ++k) {
    sg_var *y = &leaves[1 + 2 * k], *m = &leaves[2 + 2 * k];
    if (dev) /* no mask on a device (device_check) */
      SG_TRY(device_leaf(a, y, "y", ys, at(a, a->y, k * a->n * fr),
                         at(a, a->dy, k * a->n * fr)));
    else {
      SG_TRY(
          sg_var_init(y, "y", a->dtype, 4, ys, at(a, a->y, k * a->n * fr), 0));
      SG_TRY(sg_var_init(m, "mask", a->dtype, 4, ys, at(a, a->m, k * a->n * fr),
                         0));
    }
    SG_TRY(mark(a, y));
    if (a->masked) SG_TRY(mark(a, m));
    if (k > first)
      SG_TRY(next_input(a, x, pred, a->masked ? &leaves[2 * k] : NULL, &x));
    SG_TRY(step_forward(a, x, &pred));
    SG_TRY(loss_weights(a, a->masked ? m : NULL, &lm));
    double v = 0.0;
    SG_TRY(step_loss(a, pred, y, lm, &lk, &v));
    sum += v;
    if (total)
      SG_TRY(sg_ag_binary(a->tape, SG_BINARY_ADD, total, lk, &total));
    else
      total = lk;
  }
  /* the mean over the graded steps; mse over micro-batches: 1/micro each
   * (rel_l2 sums over samples / global batch: micro-batch losses add up) */
  const int64_t div = graded * a->div;
  if (div > 1) SG_TRY(sg_ag_scale(a->tape, 1.0 / (double)div, total, &total));
  *loss = total;
  *lval = div > 1 ? sum / (double)div : sum;
fail:
  return st;
}

void sg_train_ar_release(sg_var *leaves, int64_t steps) {
  for (int64_t i = 0; i < 1 + 2 * steps; ++i) sg_var_release(&leaves[i]);
}
