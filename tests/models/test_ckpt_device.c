/* Activation checkpointing on device variables (issue 22), proven on the
 * host with the tape's faked device (ag_fake_cuda: "CUDA" tensors are host
 * memory). A model of user ops whose "CUDA" entries are their host code (so
 * only the tape's device path differs) and the built-in dist_loss (its
 * device body: host loops on host memory):
 *   h = block(x) = lin(tanh(lin(x, W1)), W2)      (checkpointed or not)
 *   p = tanh(h + lin(x, W3)); loss = dist_loss(p, t, m) (MSE, masked)
 * (x used inside the block and after it), in three modes: no checkpoint, the block
 * checkpointed, the block checkpointed inside a checkpointed block that
 * also makes h + lin(x, W3) (nested). On host variables and on faked cuda:0 variables, f64 and f32:
 * the loss and dx, dW1, dW2, dW3 are the same bits in all six runs, the
 * device runs called the device entries only and left the outputs and
 * gradients on cuda:0. Then the parallel plan: a host plan and a plan moved
 * to faked cuda:0 (sg_parallel_to_device), each attached to its tape (the
 * gradient hooks fire at the checkpoint node), three steps of the
 * checkpointed model (norm, clipping, AdamW): the norms and parameters the
 * same bits as the host plan's without the checkpoint. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd_impl.h" /* ag_fake_cuda */
#include "sg_autograd.h"
#include "sg_dist_loss.h"
#include "sg_mesh.h"
#include "sg_parallel.h"
#include "sg_test.h"
#include "sg_test_uops.h"

enum { N = 2, C = 3, H = 5, S = 7, NX = N * C * S };
enum { NW1 = H * C, NW2 = C * H, NW3 = C * C, NL = NW1 + NW2 + NW3 };

static sg_status op2(sg_tape_t t, const sg_op_def *op, sg_var *a, sg_var *b,
                     sg_var **y) {
  sg_var *in[2] = {a, b};
  return sg_tape_apply(t, op, b ? 2 : 1, in, 1, NULL, NULL, 0, y);
}

/* The weights of the blocks (their ctx). */
typedef struct wts {
  sg_var *w[3];
  int nested;
} wts;

/* h = lin(tanh(lin(x, W1)), W2) */
static sg_status inner(sg_tape_t t, void *ctx, sg_var *const *in,
                       sg_var **out) {
  sg_status st = SG_OK;
  const wts *w = ctx;
  sg_var *a = NULL, *b = NULL;
  SG_TRY(op2(t, sg_uop_lin(), in[0], w->w[0], &a));
  SG_TRY(op2(t, sg_uop_tanh(), a, NULL, &b));
  SG_TRY(op2(t, sg_uop_lin(), b, w->w[1], &out[0]));
fail:
  return st;
}

/* nested: the inner block checkpointed inside this one, then + lin(x, W3) */
static sg_status outer(sg_tape_t t, void *ctx, sg_var *const *in,
                       sg_var **out) {
  sg_status st = SG_OK;
  const wts *w = ctx;
  sg_var *h = NULL, *r = NULL;
  SG_TRY(sg_ag_checkpoint(t, inner, ctx, 1, in, 1, &h));
  SG_TRY(op2(t, sg_uop_lin(), in[0], w->w[2], &r));
  SG_TRY(op2(t, sg_uop_add(), h, r, &out[0]));
fail:
  return st;
}

/* One forward and backward in mode 0 (no checkpoint), 1 (the inner block
 * checkpointed, x reused after it), 2 (nested). */
static sg_status model(sg_tape_t t, int mode, wts *w, sg_var *x, sg_var *tv,
                       sg_var *mv, double *value) {
  sg_status st = SG_OK;
  sg_var *h = NULL, *r = NULL, *s = NULL, *p = NULL, *loss = NULL;
  const sg_dist_loss_ctx lc = {NULL, NULL, N};
  if (mode == 2) {
    SG_TRY(sg_ag_checkpoint(t, outer, w, 1, &x, 1, &s));
  } else {
    if (mode == 1)
      SG_TRY(sg_ag_checkpoint(t, inner, w, 1, &x, 1, &h));
    else
      SG_TRY(inner(t, w, &x, &h));
    SG_TRY(op2(t, sg_uop_lin(), x, w->w[2], &r));
    SG_TRY(op2(t, sg_uop_add(), h, r, &s));
  }
  SG_TRY(op2(t, sg_uop_tanh(), s, NULL, &p));
  SG_TRY(sg_ag_dist_loss(t, SG_LOSS_MSE, p, tv, mv, &lc, &loss));
  *value = sg_dist_loss_value(loss);
  SG_TRY(sg_tape_backward(t, loss));
fail:
  return st;
}

static double xval(int64_t i, int k) { return sin(0.37 * (double)i + k); }

static void fill(sg_dtype dt, void *p, int64_t n, int k) {
  for (int64_t i = 0; i < n; ++i) sg_uop_st(p, dt, i, 0.6 * xval(i, k));
}

/* One run: its loss and gradients (as f64), whether everything stayed on
 * the device. */
typedef struct res {
  double loss, g[NX + NL];
  int on_dev;
} res;

static void run(sg_dtype dt, int dev, int mode, res *out) {
  const size_t es = sg_dtype_size(dt);
  const int64_t xs[3] = {N, C, S}, s1[2] = {H, C}, s2[2] = {C, H},
                s3[2] = {C, C};
  const int64_t *ws[3] = {s1, s2, s3}, wn[3] = {NW1, NW2, NW3};
  void *xb = calloc(NX, es), *tb = calloc(NX, es), *mb = calloc(NX, es);
  void *wb[3], *gb[3];
  sg_var x, tv, mv, w[3];
  wts W = {.nested = mode == 2};
  sg_tape_t tape = NULL;
  memset(out, 0, sizeof *out);
  fill(dt, xb, NX, 1), fill(dt, tb, NX, 2);
  for (int64_t i = 0; i < NX; ++i) sg_uop_st(mb, dt, i, i % 5 == 3 ? 0.0 : 1.0);
  const sg_device cu = {SG_DEVICE_CUDA, 0};
  ag_fake_cuda = dev;
  sg_uop_calls[0] = sg_uop_calls[1] = 0;
  SG_CHECK_OK(sg_var_init(&x, "x", dt, 3, xs, xb, 1));
  SG_CHECK_OK(sg_var_init(&tv, "t", dt, 3, xs, tb, 0));
  SG_CHECK_OK(sg_var_init(&mv, "m", dt, 3, xs, mb, 0));
  for (int k = 0; k < 3; ++k) {
    wb[k] = calloc((size_t)wn[k], es), gb[k] = calloc((size_t)wn[k], es);
    fill(dt, wb[k], wn[k], 3 + k);
    SG_CHECK_OK(sg_var_init_param(&w[k], "w", dt, 2, ws[k], wb[k], gb[k]));
    W.w[k] = &w[k];
  }
  if (dev) {
    SG_CHECK_OK(sg_var_set_device(&x, cu));
    SG_CHECK_OK(sg_var_set_device(&tv, cu));
    SG_CHECK_OK(sg_var_set_device(&mv, cu));
    for (int k = 0; k < 3; ++k) SG_CHECK_OK(sg_var_set_device(&w[k], cu));
  }
  SG_CHECK_OK(sg_tape_create(&tape));
  SG_CHECK_OK(model(tape, mode, &W, &x, &tv, &mv, &out->loss));
  out->on_dev = x.grad.data &&
                x.grad.device.kind == (dev ? SG_DEVICE_CUDA : SG_DEVICE_HOST);
  out->on_dev &= sg_uop_calls[!dev] == 0 && sg_uop_calls[dev] > 0;
  for (int64_t i = 0; x.grad.data && i < NX; ++i)
    out->g[i] = sg_uop_ld(x.grad.data, dt, i);
  int64_t o = NX;
  for (int k = 0; k < 3; ++k)
    for (int64_t i = 0; i < wn[k]; ++i) out->g[o++] = sg_uop_ld(gb[k], dt, i);
  sg_tape_destroy(&tape);
  sg_var_release(&x), sg_var_release(&tv), sg_var_release(&mv);
  for (int k = 0; k < 3; ++k) sg_var_release(&w[k]), free(wb[k]), free(gb[k]);
  free(xb), free(tb), free(mb);
  ag_fake_cuda = 0;
}

static void tape_cases(void) {
  for (int d = 0; d < 2; ++d) {
    const sg_dtype dt = d ? SG_DTYPE_F32 : SG_DTYPE_F64;
    res ref, r;
    run(dt, 0, 0, &ref);
    SG_CHECK(ref.on_dev && isfinite(ref.loss) && ref.loss > 0,
             "%s host run: loss %g", sg_dtype_name(dt), ref.loss);
    for (int dev = 0; dev < 2; ++dev)
      for (int mode = 0; mode < 3; ++mode) {
        if (!dev && !mode) continue;
        run(dt, dev, mode, &r);
        SG_CHECK(r.on_dev,
                 "%s %s mode %d: the kernels or the gradient on "
                 "the wrong device",
                 sg_dtype_name(dt), dev ? "cuda" : "host", mode);
        SG_CHECK(r.loss == ref.loss && !memcmp(r.g, ref.g, sizeof r.g),
                 "%s %s mode %d: loss %.17g (host, no checkpoint %.17g), "
                 "gradients %s",
                 sg_dtype_name(dt), dev ? "faked cuda:0" : "host", mode, r.loss,
                 ref.loss, memcmp(r.g, ref.g, sizeof r.g) ? "differ" : "equal");
      }
  }
}

/* The plan: three steps of the checkpointed model on a plan moved to faked
 * cuda:0 against the host plan without the checkpoint. */
static void plan_case(void) {
  sg_mesh_t mesh = NULL;
  sg_parallel_t P[2] = {NULL, NULL};
  sg_tape_t T[2] = {NULL, NULL};
  sg_param_info info[3];
  const char *names[3] = {"w1", "w2", "w3"};
  const int64_t wn[3] = {NW1, NW2, NW3}, rows[3] = {H, C, C},
                cols[3] = {C, H, C};
  const sg_device cu = {SG_DEVICE_CUDA, 0};
  sg_var w[2][3], *wp[2][3], x[2], tv[2], mv[2];
  float xb[NX], tb[NX], mb[NX], *xd = NULL, *td = NULL, *md = NULL;
  memset(info, 0, sizeof info);
  fill(SG_DTYPE_F32, xb, NX, 1), fill(SG_DTYPE_F32, tb, NX, 2);
  for (int64_t i = 0; i < NX; ++i) mb[i] = i % 5 == 3 ? 0.0f : 1.0f;
  for (int k = 0, off = 0; k < 3; off += (int)wn[k], ++k) {
    info[k].name = names[k], info[k].ndim = 2, info[k].numel = wn[k];
    info[k].global_shape[0] = info[k].count[0] = rows[k];
    info[k].global_shape[1] = info[k].count[1] = cols[k];
    info[k].offset = off;
  }
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, "h=1", &mesh));
  ag_fake_cuda = 1;
  for (int p = 0; p < 2; ++p) {
    sg_parallel_config c = sg_parallel_defaults();
    SG_REQUIRE_OK(sg_parallel_create(mesh, &c, 3, info, NL, &P[p]));
    fill(SG_DTYPE_F32, sg_parallel_params(P[p]), NL, 3);
    if (p) SG_REQUIRE_OK(sg_parallel_to_device(P[p], cu));
    float *wv = sg_parallel_params(P[p]), *gv = sg_parallel_grads(P[p]);
    for (int k = 0; k < 3; ++k) {
      const int64_t sh[2] = {rows[k], cols[k]};
      SG_REQUIRE_OK(sg_var_init_param(&w[p][k], names[k], SG_DTYPE_F32, 2, sh,
                                      wv + info[k].offset,
                                      gv + info[k].offset));
      SG_REQUIRE_OK(sg_var_set_device(&w[p][k], sg_parallel_device(P[p])));
      wp[p][k] = &w[p][k];
    }
    SG_REQUIRE_OK(sg_tape_create(&T[p]));
    SG_REQUIRE_OK(sg_parallel_attach(P[p], T[p], wp[p]));
  }
  /* the batch on the "device" (host memory: faked) */
  xd = malloc(sizeof xb), td = malloc(sizeof tb), md = malloc(sizeof mb);
  memcpy(xd, xb, sizeof xb), memcpy(td, tb, sizeof tb),
      memcpy(md, mb, sizeof mb);
  const int64_t xs[3] = {N, C, S};
  for (int64_t step = 1; step <= 3; ++step) {
    double loss[2], norm[2];
    for (int p = 0; p < 2; ++p) {
      wts W = {.w = {wp[p][0], wp[p][1], wp[p][2]}};
      SG_CHECK_OK(sg_var_init(&x[p], "x", SG_DTYPE_F32, 3, xs, p ? xd : xb, 0));
      SG_CHECK_OK(
          sg_var_init(&tv[p], "t", SG_DTYPE_F32, 3, xs, p ? td : tb, 0));
      SG_CHECK_OK(
          sg_var_init(&mv[p], "m", SG_DTYPE_F32, 3, xs, p ? md : mb, 0));
      if (p) {
        SG_CHECK_OK(sg_var_set_device(&x[p], cu));
        SG_CHECK_OK(sg_var_set_device(&tv[p], cu));
        SG_CHECK_OK(sg_var_set_device(&mv[p], cu));
      }
      SG_CHECK_OK(sg_parallel_begin_micro(P[p], 0, 1));
      SG_CHECK_OK(model(T[p], p ? 2 : 0, &W, &x[p], &tv[p], &mv[p], &loss[p]));
      SG_CHECK_OK(sg_parallel_reduce(P[p], &norm[p]));
      SG_CHECK_OK(
          sg_parallel_step(P[p], step, 1e-2, sg_clip_scale(norm[p], 0.5)));
      sg_tape_clear(T[p]);
      sg_var_release(&x[p]), sg_var_release(&tv[p]), sg_var_release(&mv[p]);
    }
    SG_CHECK(loss[1] == loss[0] && norm[1] == norm[0] &&
                 !memcmp(sg_parallel_params(P[1]), sg_parallel_params(P[0]),
                         NL * sizeof(float)),
             "step %lld: the checkpointed device plan: loss %.9g norm %.9g, "
             "the host plan: loss %.9g norm %.9g; parameters %s",
             (long long)step, loss[1], norm[1], loss[0], norm[0],
             memcmp(sg_parallel_params(P[1]), sg_parallel_params(P[0]),
                    NL * sizeof(float))
                 ? "differ"
                 : "equal");
  }
done:
  for (int p = 0; p < 2; ++p) {
    sg_tape_destroy(&T[p]);
    sg_parallel_destroy(&P[p]);
  }
  ag_fake_cuda = 0;
  free(xd), free(td), free(md);
  sg_mesh_destroy(&mesh);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  tape_cases();
  plan_case();
  return sg_test_finish();
}
