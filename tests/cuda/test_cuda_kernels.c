/* The op kernels on CUDA (shardtensor/ops/sg_ops_cuda.h) against the host
 * functions (sg_ops.h, sg_optim.h) on the same random data: activations
 * forward and backward, binary ops, scale, bias forward and backward,
 * average and max pooling forward and backward (2-D, stride and dilation
 * above 1, overlapping windows), nearest and bilinear up-sampling forward
 * and backward (2-D, scales 2 and 3), the channel-wise linear on cuBLAS
 * forward and backward (y, dx, dw +=, db +=), the convolution and the
 * transposed convolution on cuBLAS (2-D, 3-D; y, dx, dw +=, db +=), the
 * layout kernels (concat, split, the FNO-3D time broadcast and window,
 * roll, add_field), the padding kernels (every mode), the loss partials and gradients (all four kinds) in f64 and f32, the
 * distributed loss's masked sums, NaN/Inf count and gradient (and a
 * dist_loss tape, f64 1e-10, f32 2e-5), and AdamW
 * (f32) over three steps; instance, group and layer norm (statistics,
 * forward, backward sums, backward); and the autograd tape on device
 * variables (a linear-norm-gelu-mul-mse tape forward and backward: outputs,
 * saved statistics and gradients on the device, summed there), and a
 * padded conv-concat-mse tape (margins made on the device) and a padded
 * max-pool-mse tape (its -inf margins filled on the device), the first
 * tape with its block checkpointed on the device (activation
 * checkpointing: the replay on the device) against the host tape without
 * it, against the
 * same tapes on the host; the fused attention forward and backward (o,
 * lse, dq, dk, dv; causal with offsets, Nq != Nk) and an attention-mse
 * tape (the layout copies on the device; ring, Ulysses and USP modes, one
 * process) and a window-attention tape (relative position bias) against
 * the host; the spectral_conv and spectral_linear_act tapes (cuFFT, 2-D
 * and 3-D, one process) against the host's FFTW tapes (f64 1e-10, f32
 * 1e-4: the two FFT libraries round differently), and the 2-D FNO's
 * forward and backward with its parameters on the device (f32, 1e-4). The element arithmetic is the same SG_HD code on
 * both sides; what may differ is libm against CUDA's math functions, FMA
 * contraction (nvcc contracts, the host build does not) and the order of
 * the reductions' sums (block trees on the device). Tolerances, relative
 * to max(1, |host value|):
 *   f64  1e-12
 *   f32  2e-5 (the GEMMs and pooling and up-sampling sum in another
 *        order on the
 *        device: their backward gathers per input cell; a few ulp of the activations, whose f32 exponential is a
 *        polynomial on the host and expf on the device; the f32 bias
 *        gradient sums rows in f32 on the host, in f64 on the device)
 * Every op the device table (models/sg_op_device.h) lists on cuda must
 * name launchers this test exercises; the launchers' argument errors are
 * checked first, with or without a device. Built only with the CUDA backend;
 * without a CUDA device it prints "no CUDA device: skipped" and exits 77
 * (CTest's skip), or fails when SG_REQUIRE_GPU is set (tools/test-gpu). */
#include <cuda_runtime_api.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist_loss_inl.h" /* the SG_HD pieces and launchers */
#include "sg_autograd.h"
#include "sg_dist_loss.h"
#include "sg_fno.h"
#include "sg_mesh.h"
#include "sg_op_device.h"
#include "sg_ops.h"
#include "sg_ops_cuda.h"
#include "sg_optim.h"
#include "sg_spectral.h"

#define NB 2
#define NC 3
#define NS 167
#define N (NB * NC * NS)

static int fails;

/* Abort the test on a CUDA runtime or shardgrid error. */
#define CK(call)                                                      \
  do {                                                                \
    long rc_ = (long)(call);                                          \
    if (rc_ != 0) {                                                   \
      printf("FAIL: %s returned %ld (%s:%d)\n", #call, rc_, __FILE__, \
             __LINE__);                                               \
      exit(1);                                                        \
    }                                                                 \
  } while (0)

static uint64_t rng = 88172645463325252ull;
static double urand(double lo, double hi) { /* xorshift64 */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return lo + (hi - lo) * (double)(rng >> 11) / 9007199254740992.0;
}

/* A buffer of n elements of dt on the host (h) and the device (d). */
typedef struct buf {
  sg_dtype dt;
  size_t n, bytes;
  void *h, *d;
} buf;

static buf mk(sg_dtype dt, size_t n, double lo, double hi) {
  buf b = {dt, n, n * sg_dtype_size(dt), NULL, NULL};
  b.h = calloc(n ? n : 1, sg_dtype_size(dt));
  if (!b.h) exit(1);
  for (size_t i = 0; i < n && hi > lo; ++i) {
    double v = urand(lo, hi);
    if (dt == SG_DTYPE_F64)
      ((double *)b.h)[i] = v;
    else
      ((float *)b.h)[i] = (float)v;
  }
  CK(cudaMalloc(&b.d, b.bytes ? b.bytes : 8));
  CK(cudaMemcpy(b.d, b.h, b.bytes, cudaMemcpyHostToDevice));
  return b;
}
static void drop(buf *b) {
  free(b->h);
  cudaFree(b->d);
  b->h = b->d = NULL;
}
static double at(const buf *b, const void *p, size_t i) {
  return b->dt == SG_DTYPE_F64 ? ((const double *)p)[i]
                               : (double)((const float *)p)[i];
}

/* The device result of b against its host result (b->h), after a sync,
 * within tol (relative to max(1, |host value|)). */
static void compare_tol(const char *what, const buf *b, double tol) {
  void *dev = malloc(b->bytes ? b->bytes : 1);
  if (!dev) exit(1);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(dev, b->d, b->bytes, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (size_t i = 0; i < b->n; ++i) {
    double h = at(b, b->h, i), d = at(b, dev, i);
    double e = fabs(d - h) / (fabs(h) > 1 ? fabs(h) : 1);
    if (!(e <= worst)) worst = e; /* NaN counts */
  }
  int ok = worst <= tol;
  printf("%-4s %-30s max rel err %.2e  %s\n", sg_dtype_name(b->dt), what, worst,
         ok ? "ok" : "FAIL");
  fails += !ok;
  free(dev);
}

/* ... within the default tolerances (the header's table) */
static void compare(const char *what, const buf *b) {
  compare_tol(what, b, b->dt == SG_DTYPE_F64 ? 1e-12 : 2e-5);
}

static void check_act(sg_dtype dt) {
  buf x = mk(dt, N, -4, 4), g = mk(dt, N, -1, 1), y = mk(dt, N, 0, 0);
  char what[64];
  for (int a = 0; a < SG_ACT_COUNT; ++a) {
    CK(sg_act_forward((sg_act)a, dt, N, x.h, y.h));
    CK(sg_act_fwd_cuda((sg_act)a, dt, N, x.d, y.d, NULL));
    snprintf(what, sizeof what, "act %s forward", sg_act_name((sg_act)a));
    compare(what, &y);
    CK(sg_act_backward((sg_act)a, dt, N, x.h, g.h, y.h));
    CK(sg_act_bwd_cuda((sg_act)a, dt, N, x.d, g.d, y.d, NULL));
    snprintf(what, sizeof what, "act %s backward", sg_act_name((sg_act)a));
    compare(what, &y);
  }
  drop(&x), drop(&g), drop(&y);
}

static void check_binary_scale(sg_dtype dt) {
  buf a = mk(dt, N, -2, 2), b = mk(dt, N, -2, 2), g = mk(dt, N, -1, 1);
  buf y = mk(dt, N, 0, 0), da = mk(dt, N, 0, 0), db = mk(dt, N, 0, 0);
  static const char *names[] = {"add", "sub", "mul"};
  char what[64];
  for (int op = SG_BINARY_ADD; op <= SG_BINARY_MUL; ++op) {
    CK(sg_binary_forward((sg_binary)op, dt, N, a.h, b.h, y.h));
    CK(sg_binary_fwd_cuda((sg_binary)op, dt, N, a.d, b.d, y.d, NULL));
    snprintf(what, sizeof what, "binary %s forward", names[op]);
    compare(what, &y);
    CK(sg_binary_backward((sg_binary)op, dt, N, a.h, b.h, g.h, da.h, db.h));
    CK(sg_binary_bwd_cuda((sg_binary)op, dt, N, a.d, b.d, g.d, da.d, db.d,
                          NULL));
    snprintf(what, sizeof what, "binary %s backward (da)", names[op]);
    compare(what, &da);
    snprintf(what, sizeof what, "binary %s backward (db)", names[op]);
    compare(what, &db);
  }
  CK(sg_scale(dt, N, -0.3, a.h, y.h));
  CK(sg_scale_cuda(dt, N, -0.3, a.d, y.d, NULL));
  compare("scale", &y);
  drop(&a), drop(&b), drop(&g), drop(&y), drop(&da), drop(&db);
}

static void check_bias(sg_dtype dt) {
  buf x = mk(dt, N, -2, 2), b = mk(dt, NC, -1, 1), y = mk(dt, N, 0, 0);
  buf db = mk(dt, NC, -1, 1); /* accumulated into: starts non-zero */
  CK(sg_bias_forward(dt, NB, NC, NS, x.h, b.h, y.h));
  CK(sg_bias_fwd_cuda(dt, NB, NC, NS, x.d, b.d, y.d, NULL));
  compare("bias forward", &y);
  CK(sg_bias_backward(dt, NB, NC, NS, x.h, db.h));
  CK(sg_bias_bwd_cuda(dt, NB, NC, NS, x.d, db.d, NULL));
  compare("bias backward (db +=)", &db);
  drop(&x), drop(&b), drop(&y), drop(&db);
}

static void check_pool(sg_dtype dt) {
  static const char *names[] = {"avg", "max"};
  sg_conv_desc d = {.nsp = 2, .batch = NB, .cin = NC, .cout = NC};
  const int64_t in[2] = {9, 11}, k[2] = {3, 2}, s[2] = {2, 1}, dl[2] = {1, 2};
  int64_t out[2];
  memcpy(d.in, in, sizeof in), memcpy(d.kernel, k, sizeof k);
  memcpy(d.stride, s, sizeof s), memcpy(d.dilation, dl, sizeof dl);
  CK(sg_pool_out_shape(&d, out));
  const size_t nin = NB * NC * in[0] * in[1], nout = NB * NC * out[0] * out[1];
  buf x = mk(dt, nin, -2, 2), g = mk(dt, nout, -1, 1);
  buf y = mk(dt, nout, 0, 0), dx = mk(dt, nin, 0, 0);
  char what[64];
  for (int kind = SG_POOL_AVG; kind <= SG_POOL_MAX; ++kind) {
    CK(sg_pool_forward((sg_pool_kind)kind, &d, dt, x.h, y.h));
    CK(sg_pool_fwd_cuda((sg_pool_kind)kind, &d, dt, x.d, y.d, NULL));
    snprintf(what, sizeof what, "pool %s forward", names[kind]);
    compare(what, &y);
    CK(sg_pool_backward((sg_pool_kind)kind, &d, dt, x.h, g.h, dx.h));
    CK(sg_pool_bwd_cuda((sg_pool_kind)kind, &d, dt, x.d, g.d, dx.d, NULL));
    snprintf(what, sizeof what, "pool %s backward", names[kind]);
    compare(what, &dx);
  }
  drop(&x), drop(&g), drop(&y), drop(&dx);
}

static void check_upsample(sg_dtype dt) {
  static const char *names[] = {"nearest", "linear"};
  const int64_t scale[2] = {2, 3}, planes = NB * NC;
  char what[64];
  for (int kind = SG_UPSAMPLE_NEAREST; kind <= SG_UPSAMPLE_LINEAR; ++kind) {
    const int m = kind == SG_UPSAMPLE_LINEAR ? 2 : 0; /* margins */
    const int64_t in[2] = {5 + m, 7 + m};
    const size_t nin = (size_t)(planes * in[0] * in[1]);
    const size_t nout = (size_t)(planes * 5 * scale[0] * 7 * scale[1]);
    buf x = mk(dt, nin, -2, 2), g = mk(dt, nout, -1, 1);
    buf y = mk(dt, nout, 0, 0), dx = mk(dt, nin, 0, 0);
    CK(sg_upsample_forward((sg_upsample_kind)kind, 2, planes, in, scale, dt,
                           x.h, y.h));
    CK(sg_upsample_fwd_cuda((sg_upsample_kind)kind, 2, planes, in, scale, dt,
                            x.d, y.d, NULL));
    snprintf(what, sizeof what, "upsample %s forward", names[kind]);
    compare(what, &y);
    CK(sg_upsample_backward((sg_upsample_kind)kind, 2, planes, in, scale, dt,
                            g.h, dx.h));
    CK(sg_upsample_bwd_cuda((sg_upsample_kind)kind, 2, planes, in, scale, dt,
                            g.d, dx.d, NULL));
    snprintf(what, sizeof what, "upsample %s backward", names[kind]);
    compare(what, &dx);
    drop(&x), drop(&g), drop(&y), drop(&dx);
  }
}

static void check_linear(sg_dtype dt) {
  const int64_t k = 4;
  buf x = mk(dt, N, -2, 2), w = mk(dt, (size_t)(k * NC), -1, 1);
  buf b = mk(dt, (size_t)k, -1, 1), g = mk(dt, (size_t)(NB * k * NS), -1, 1);
  buf y = mk(dt, (size_t)(NB * k * NS), 0, 0), dx = mk(dt, N, 0, 0);
  buf dw = mk(dt, (size_t)(k * NC), -1, 1), db = mk(dt, (size_t)k, -1, 1);
  CK(sg_linear_forward(dt, NB, NC, k, NS, x.h, w.h, b.h, y.h));
  CK(sg_linear_fwd_cuda(dt, NB, NC, k, NS, x.d, w.d, b.d, y.d, NULL));
  compare("linear forward (cuBLAS)", &y);
  CK(sg_linear_backward(dt, NB, NC, k, NS, x.h, w.h, g.h, dx.h, dw.h, db.h));
  CK(sg_linear_bwd_cuda(dt, NB, NC, k, NS, x.d, w.d, g.d, dx.d, dw.d, db.d,
                        NULL));
  compare("linear backward (dx)", &dx);
  compare("linear backward (dw +=)", &dw);
  compare("linear backward (db +=)", &db);
  drop(&x), drop(&w), drop(&b), drop(&g), drop(&y), drop(&dx), drop(&dw),
      drop(&db);
}

/* Convolution on cuBLAS (im2col + GEMM, the col2im gather) and the
 * transposed convolution (kernel == stride), 2-D and 3-D, against the
 * host's; dw and db accumulate into non-zero starts. */
static void check_conv_desc(sg_dtype dt, const sg_conv_desc *d, int trans,
                            const char *what) {
  int64_t out[3] = {1, 1, 1}, sin = 1, sout = 1, kk = 1;
  if (!trans) CK(sg_conv_out_shape(d, out));
  for (int i = 0; i < d->nsp; ++i) {
    sin *= d->in[i];
    kk *= d->kernel[i];
    sout *= trans ? d->in[i] * d->kernel[i] : out[i];
  }
  const size_t nx = (size_t)(d->batch * d->cin * sin),
               ny = (size_t)(d->batch * d->cout * sout),
               nw = (size_t)(d->cout * d->cin * kk);
  buf x = mk(dt, nx, -2, 2), w = mk(dt, nw, -1, 1), b = mk(dt, d->cout, -1, 1);
  buf g = mk(dt, ny, -1, 1), y = mk(dt, ny, 0, 0), dx = mk(dt, nx, 0, 0);
  buf dw = mk(dt, nw, -1, 1), db = mk(dt, d->cout, -1, 1);
  char name[64];
  if (trans) {
    CK(sg_convt_forward(d, dt, x.h, w.h, b.h, y.h));
    CK(sg_convt_fwd_cuda(d, dt, x.d, w.d, b.d, y.d, NULL));
  } else {
    CK(sg_conv_forward(d, dt, x.h, w.h, b.h, y.h, NULL));
    CK(sg_conv_fwd_cuda(d, dt, x.d, w.d, b.d, y.d, NULL, NULL));
  }
  snprintf(name, sizeof name, "%s forward", what);
  compare(name, &y);
  if (trans) {
    CK(sg_convt_backward(d, dt, x.h, w.h, g.h, dx.h, dw.h, db.h));
    CK(sg_convt_bwd_cuda(d, dt, x.d, w.d, g.d, dx.d, dw.d, db.d, NULL));
  } else {
    CK(sg_conv_backward(d, dt, x.h, w.h, g.h, dx.h, dw.h, db.h, NULL));
    CK(sg_conv_bwd_cuda(d, dt, x.d, w.d, g.d, dx.d, dw.d, db.d, NULL, NULL));
  }
  snprintf(name, sizeof name, "%s backward (dx)", what);
  compare(name, &dx);
  snprintf(name, sizeof name, "%s backward (dw +=)", what);
  compare(name, &dw);
  snprintf(name, sizeof name, "%s backward (db +=)", what);
  compare(name, &db);
  drop(&x), drop(&w), drop(&b), drop(&g), drop(&y), drop(&dx), drop(&dw),
      drop(&db);
}

static void check_conv(sg_dtype dt) {
  const sg_conv_desc c2 = {.nsp = 2,
                           .batch = NB,
                           .cin = NC,
                           .cout = 4,
                           .in = {9, 11},
                           .kernel = {3, 2},
                           .stride = {2, 1},
                           .dilation = {1, 2}};
  const sg_conv_desc c3 = {.nsp = 3,
                           .batch = NB,
                           .cin = NC,
                           .cout = 2,
                           .in = {5, 7, 6},
                           .kernel = {3, 1, 2},
                           .stride = {1, 3, 2},
                           .dilation = {2, 1, 1}};
  const sg_conv_desc t2 = {.nsp = 2,
                           .batch = NB,
                           .cin = NC,
                           .cout = 5,
                           .in = {5, 3},
                           .kernel = {2, 3}};
  const sg_conv_desc t3 = {.nsp = 3,
                           .batch = NB,
                           .cin = NC,
                           .cout = 2,
                           .in = {3, 5, 1},
                           .kernel = {2, 1, 3}};
  check_conv_desc(dt, &c2, 0, "conv 2-D (cuBLAS)");
  check_conv_desc(dt, &c3, 0, "conv 3-D (cuBLAS)");
  check_conv_desc(dt, &t2, 1, "convt 2-D (cuBLAS)");
  check_conv_desc(dt, &t3, 1, "convt 3-D (cuBLAS)");
}

/* The layout kernels against the host's concat / split and plain loops
 * for the time broadcast and window, roll and add_field (the host ops'
 * own arithmetic: sg_ops_inl.h's maps and sums). */
static void check_layout(sg_dtype dt) {
  const int64_t ch[2] = {1, NC}, ct = 1 + NC, sp = NS;
  buf p0 = mk(dt, (size_t)(NB * ch[0] * sp), -1, 1);
  buf p1 = mk(dt, (size_t)(NB * ch[1] * sp), -1, 1);
  buf whole = mk(dt, (size_t)(NB * ct * sp), 0, 0);
  const void *parts[2] = {p0.h, p1.h};
  CK(sg_concat(dt, NB, sp, 2, ch, parts, whole.h));
  CK(sg_cat_part_cuda(dt, NB, sp, ch[0], ct, 0, 1, p0.d, whole.d, NULL));
  CK(sg_cat_part_cuda(dt, NB, sp, ch[1], ct, ch[0], 1, p1.d, whole.d, NULL));
  compare("concat", &whole);
  void *hp[2] = {p0.h, p1.h};
  CK(sg_split(dt, NB, sp, 2, ch, whole.h, hp));
  CK(sg_cat_part_cuda(dt, NB, sp, ch[1], ct, ch[0], 0, whole.d, p1.d, NULL));
  compare("split", &p1);
  /* broadcast over 4 steps, its adjoint, a window 4 -> 6 steps */
  const int64_t P = NB * NC, nt = 4, t2 = 6;
  buf x = mk(dt, (size_t)(P * sp), -1, 1),
      y = mk(dt, (size_t)(P * nt * sp), 0, 0);
  buf g = mk(dt, (size_t)(P * nt * sp), -1, 1),
      dx = mk(dt, (size_t)(P * sp), 0, 0);
  buf tw = mk(dt, (size_t)(P * t2 * sp), 0, 0);
  for (int64_t j = 0; j < P * nt * sp; ++j) {
    double v = at(&x, x.h, (size_t)((j / (nt * sp)) * sp + j % sp));
    if (dt == SG_DTYPE_F64)
      ((double *)y.h)[j] = v;
    else
      ((float *)y.h)[j] = (float)v;
  }
  for (int64_t e = 0; e < P * sp; ++e) {
    double acc = 0;
    for (int64_t t = 0; t < nt; ++t)
      acc += at(&g, g.h, (size_t)(((e / sp) * nt + t) * sp + e % sp));
    if (dt == SG_DTYPE_F64)
      ((double *)dx.h)[e] = acc;
    else
      ((float *)dx.h)[e] = (float)acc;
  }
  for (int64_t j = 0; j < P * t2 * sp; ++j) {
    const int64_t p = j / (t2 * sp), t = (j / sp) % t2;
    double v = t < nt ? at(&g, g.h, (size_t)((p * nt + t) * sp + j % sp)) : 0;
    if (dt == SG_DTYPE_F64)
      ((double *)tw.h)[j] = v;
    else
      ((float *)tw.h)[j] = (float)v;
  }
  CK(sg_bcast_t_fwd_cuda(dt, P, nt, sp, x.d, y.d, NULL));
  compare("fno3d broadcast over t", &y);
  CK(sg_bcast_t_bwd_cuda(dt, P, nt, sp, g.d, dx.d, NULL));
  compare("fno3d broadcast backward", &dx);
  CK(sg_time_window_cuda(dt, P, sp, nt, t2, g.d, tw.d, NULL));
  compare("fno3d time window", &tw);
  /* roll of (P, 5, 7) planes by (-2, 3) and back */
  const int64_t ext[3] = {1, 5, 7}, sh[3] = {0, -2, 3}, m = 35;
  buf r = mk(dt, (size_t)(P * m), -1, 1), ry = mk(dt, (size_t)(P * m), 0, 0);
  buf rb = mk(dt, (size_t)(P * m), 0, 0);
  for (int64_t j = 0; j < P * m; ++j) {
    const int64_t a = ((j % m) / 7 + sh[1] + 5) % 5,
                  c = (j % 7 + sh[2] + 7) % 7;
    double v = at(&r, r.h, (size_t)((j / m) * m + a * 7 + c));
    if (dt == SG_DTYPE_F64)
      ((double *)ry.h)[j] = v;
    else
      ((float *)ry.h)[j] = (float)v;
  }
  memcpy(rb.h, r.h, rb.bytes);
  CK(sg_roll_cuda(dt, P, ext, sh, 1, r.d, ry.d, NULL));
  compare("roll forward", &ry);
  CK(sg_roll_cuda(dt, P, ext, sh, 0, ry.d, rb.d, NULL));
  compare("roll backward (round trip)", &rb);
  /* add_field over NB samples of NC*NS; dp accumulates */
  const int64_t fm = NC * NS;
  buf fx = mk(dt, N, -1, 1), fp = mk(dt, (size_t)fm, -1, 1),
      fy = mk(dt, N, 0, 0);
  buf fg = mk(dt, N, -1, 1), fdp = mk(dt, (size_t)fm, -1, 1);
  for (int64_t i = 0; i < N; ++i) {
    double v = at(&fx, fx.h, (size_t)i) + at(&fp, fp.h, (size_t)(i % fm));
    if (dt == SG_DTYPE_F64)
      ((double *)fy.h)[i] = v;
    else
      ((float *)fy.h)[i] = (float)v;
  }
  for (int64_t i = 0; i < fm; ++i) {
    double v = at(&fdp, fdp.h, (size_t)i);
    for (int64_t b = 0; b < NB; ++b) v += at(&fg, fg.h, (size_t)(b * fm + i));
    if (dt == SG_DTYPE_F64)
      ((double *)fdp.h)[i] = v;
    else
      ((float *)fdp.h)[i] = (float)v;
  }
  CK(sg_add_field_fwd_cuda(dt, NB, fm, fx.d, fp.d, fy.d, NULL));
  compare("add_field forward", &fy);
  CK(sg_add_field_bwd_cuda(dt, NB, fm, fg.d, fdp.d, NULL));
  compare("add_field backward (dp +=)", &fdp);
  drop(&p0), drop(&p1), drop(&whole), drop(&x), drop(&y), drop(&g), drop(&dx),
      drop(&tw), drop(&r), drop(&ry), drop(&rb), drop(&fx), drop(&fp),
      drop(&fy), drop(&fg), drop(&fdp);
}

static void check_loss(sg_dtype dt) {
  static const char *names[] = {"sum", "mean", "mse", "rel_l2"};
  buf p = mk(dt, N, -2, 2), t = mk(dt, N, -2, 2);
  buf dp = mk(dt, N, 0, 0), dtg = mk(dt, N, 0, 0);
  char what[64];
  for (int k = SG_LOSS_SUM; k <= SG_LOSS_REL_L2; ++k) {
    int64_t np = sg_loss_npartial((sg_loss_kind)k, NB);
    buf part = mk(SG_DTYPE_F64, (size_t)np, 0, 0);
    CK(sg_loss_partial((sg_loss_kind)k, dt, NB, N, p.h, t.h, part.h));
    CK(sg_loss_partial_cuda((sg_loss_kind)k, dt, NB, N, p.d, t.d, part.d,
                            NULL));
    snprintf(what, sizeof what, "loss %s partials", names[k]);
    compare(what, &part);
    /* the gradient from the host's partials (as after their allreduce) */
    CK(cudaMemcpy(part.d, part.h, part.bytes, cudaMemcpyHostToDevice));
    CK(sg_loss_backward((sg_loss_kind)k, dt, NB, N, p.h, t.h, part.h, 0.7, dp.h,
                        dtg.h));
    CK(sg_loss_bwd_cuda((sg_loss_kind)k, dt, NB, N, p.d, t.d, part.d, 0.7, dp.d,
                        dtg.d, NULL));
    snprintf(what, sizeof what, "loss %s backward (dp)", names[k]);
    compare(what, &dp);
    snprintf(what, sizeof what, "loss %s backward (dt)", names[k]);
    compare(what, &dtg);
    drop(&part);
  }
  drop(&p), drop(&t), drop(&dp), drop(&dtg);
}

/* The distributed loss's local part (dist_loss_inl.h): the masked
 * per-sample sums and NaN/Inf count, and the gradient from given global
 * sums, against the host's SG_HD loop (the same functions; f64 1e-12, f32
 * data widened to double: 1e-12 too), with a mask holding zeros and a NaN
 * and an Inf at masked and unmasked points; then a dist_loss tape (MSE and
 * relative L2, masked) on device variables against the host tape. */
static void check_dist_loss(sg_dtype dt) {
  const int f32 = dt == SG_DTYPE_F32;
  const int64_t per = N / NB;
  buf p = mk(dt, N, -2, 2), t = mk(dt, N, -2, 2), m = mk(dt, N, 0, 3);
  buf dp = mk(dt, N, 0, 0);
  char what[64];
  for (int64_t i = 0; i < N; i += 7) { /* zeros in the mask */
    if (f32)
      ((float *)m.h)[i] = 0.0f;
    else
      ((double *)m.h)[i] = 0.0;
  }
  for (int rel = 0; rel < 2; ++rel)
    for (int mk_ = 0; mk_ < 2; ++mk_) {
      /* a NaN (masked) and an Inf (unmasked: counted) */
      if (f32)
        ((float *)p.h)[7] = NAN, ((float *)t.h)[N - 2] = INFINITY;
      else
        ((double *)p.h)[7] = NAN, ((double *)t.h)[N - 2] = INFINITY;
      CK(cudaMemcpy(p.d, p.h, p.bytes, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(t.d, t.h, t.bytes, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(m.d, m.h, m.bytes, cudaMemcpyHostToDevice));
      buf sums = mk(SG_DTYPE_F64, 2 * NB + 1, 0, 0);
      double *s = sums.h;
      s[2 * NB] = 0;
      for (int64_t i = 0; i < NB; ++i)
        s[2 * NB] += sg_dloss_sample_sums(rel, f32, i * per, (i + 1) * per, p.h,
                                          t.h, mk_ ? m.h : NULL, &s[2 * i],
                                          &s[2 * i + 1]);
      CK(sg_dist_loss_sums_cuda(rel, dt, NB, per, p.d, t.d, mk_ ? m.d : NULL,
                                sums.d, NULL));
      snprintf(what, sizeof what, "dist_loss %s sums%s", rel ? "rel" : "mse",
               mk_ ? " masked" : "");
      compare(what, &sums);
      /* the gradient from finite data and the host's sums as global */
      if (f32)
        ((float *)p.h)[7] = 0.5f, ((float *)t.h)[N - 2] = 0.25f;
      else
        ((double *)p.h)[7] = 0.5, ((double *)t.h)[N - 2] = 0.25;
      CK(cudaMemcpy(p.d, p.h, p.bytes, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(t.d, t.h, t.bytes, cudaMemcpyHostToDevice));
      double S = 0, M = 0;
      for (int64_t i = 0; i < NB; ++i) {
        sg_dloss_sample_sums(rel, f32, i * per, (i + 1) * per, p.h, t.h,
                             mk_ ? m.h : NULL, &s[2 * i], &s[2 * i + 1]);
        S += s[2 * i], M += s[2 * i + 1];
      }
      if (!rel) s[0] = S, s[1] = M;
      CK(cudaMemcpy(sums.d, sums.h, sums.bytes, cudaMemcpyHostToDevice));
      for (int64_t j = 0; j < N; ++j) {
        const double c = sg_dloss_coef(rel, j / per, s, 0.7, 5);
        const double v = sg_dloss_grad(c, f32, j, p.h, t.h, mk_ ? m.h : NULL);
        if (f32)
          ((float *)dp.h)[j] = (float)v;
        else
          ((double *)dp.h)[j] = v;
      }
      CK(sg_dist_loss_bwd_cuda(rel, dt, NB, per, p.d, t.d, mk_ ? m.d : NULL,
                               sums.d, 0.7, 5, dp.d, NULL));
      snprintf(what, sizeof what, "dist_loss %s backward%s",
               rel ? "rel" : "mse", mk_ ? " masked" : "");
      compare(what, &dp);
      drop(&sums);
    }
  /* the tape: the loss and dL/dp on cuda:0 against the host */
  const sg_device cu = {SG_DEVICE_CUDA, 0};
  const int64_t shape[3] = {NB, NC, NS};
  for (int rel = 0; rel < 2; ++rel) {
    double l[2] = {0, 0};
    buf g = mk(dt, N, 0, 0);
    for (int dev = 0; dev < 2; ++dev) {
      sg_tape_t tape = NULL;
      sg_var vp, vt, vm, *loss = NULL;
      CK(sg_var_init(&vp, "p", dt, 3, shape, dev ? p.d : p.h, 1));
      CK(sg_var_init(&vt, "t", dt, 3, shape, dev ? t.d : t.h, 0));
      CK(sg_var_init(&vm, "m", dt, 3, shape, dev ? m.d : m.h, 0));
      if (dev) {
        CK(sg_var_set_device(&vp, cu));
        CK(sg_var_set_device(&vt, cu));
        CK(sg_var_set_device(&vm, cu));
      }
      const sg_dist_loss_ctx ctx = {NULL, NULL, NB};
      CK(sg_tape_create(&tape));
      CK(sg_ag_dist_loss(tape, rel ? SG_LOSS_REL_L2 : SG_LOSS_MSE, &vp, &vt,
                         &vm, &ctx, &loss));
      l[dev] = sg_dist_loss_value(loss);
      CK(sg_tape_backward(tape, loss));
      if (dev)
        CK(cudaMemcpy(g.d, vp.grad.data, g.bytes, cudaMemcpyDeviceToDevice));
      else
        memcpy(g.h, vp.grad.data, g.bytes);
      sg_tape_destroy(&tape);
      sg_var_release(&vp), sg_var_release(&vt), sg_var_release(&vm);
    }
    const double tol = dt == SG_DTYPE_F64 ? 1e-10 : 2e-5;
    const int ok = fabs(l[1] - l[0]) <= tol * (fabs(l[0]) > 1 ? fabs(l[0]) : 1);
    printf("%-4s tape dist_loss %s %.12g (host %.12g)  %s\n", sg_dtype_name(dt),
           rel ? "rel" : "mse", l[1], l[0], ok ? "ok" : "FAIL");
    fails += !ok;
    compare_tol(rel ? "tape dist_loss rel (dp)" : "tape dist_loss mse (dp)", &g,
                tol);
    drop(&g);
  }
  drop(&p), drop(&t), drop(&m), drop(&dp);
}

static void check_adamw(void) {
  const sg_dtype f = SG_DTYPE_F32;
  buf p = mk(f, N, -1, 1), g = mk(f, N, -1, 1), m = mk(f, N, 0, 0),
      v = mk(f, N, 0, 0);
  sg_adamw_config cfg = sg_adamw_defaults();
  cfg.weight_decay = 0.01;
  for (int64_t step = 1; step <= 3; ++step) {
    CK(sg_adamw_step_f32(p.h, g.h, m.h, v.h, N, step, 1e-2, 0.5, &cfg));
    CK(sg_adamw_step_f32_cuda(p.d, g.d, m.d, v.d, N, step, 1e-2, 0.5, &cfg,
                              NULL));
  }
  compare("adamw 3 steps (param)", &p);
  compare("adamw 3 steps (m)", &m);
  compare("adamw 3 steps (v)", &v);
  drop(&p), drop(&g), drop(&m), drop(&v);
}

/* Instance, group and layer norm: statistics, forward, backward sums and
 * backward (dx, dgamma +=, dbeta +=), each step from the host's inputs. */
static void check_norm(sg_dtype dt) {
  static const char *names[] = {"batch", "instance", "group", "layer"};
  const int64_t c = 4, n = NB * c * NS;
  buf x = mk(dt, n, -2, 2), g = mk(dt, n, -1, 1), y = mk(dt, n, 0, 0);
  buf gam = mk(dt, c, 0.5, 1.5), bet = mk(dt, c, -1, 1);
  char what[64];
  for (int kind = SG_NORM_INSTANCE; kind <= SG_NORM_LAYER; ++kind) {
    sg_norm_desc d = {.kind = (sg_norm_kind)kind,
                      .batch = NB,
                      .channels = c,
                      .spatial = NS,
                      .groups = 2,
                      .eps = 1e-5};
    int64_t ns = 0;
    CK(sg_norm_nstat(&d, &ns));
    buf st = mk(SG_DTYPE_F64, 3 * ns, 0, 0),
        su = mk(SG_DTYPE_F64, 2 * ns, 0, 0);
    buf dgam = mk(dt, c, -1, 1), dbet = mk(dt, c, -1, 1); /* += */
    CK(sg_norm_stats(&d, dt, x.h, st.h));
    CK(sg_norm_stats_cuda(&d, dt, x.d, st.d, NULL));
    snprintf(what, sizeof what, "norm %s statistics", names[kind]);
    compare(what, &st);
    CK(cudaMemcpy(st.d, st.h, st.bytes, cudaMemcpyHostToDevice));
    CK(sg_norm_forward(&d, dt, x.h, st.h, gam.h, bet.h, y.h));
    CK(sg_norm_fwd_cuda(&d, dt, x.d, st.d, gam.d, bet.d, y.d, NULL));
    snprintf(what, sizeof what, "norm %s forward", names[kind]);
    compare(what, &y);
    CK(sg_norm_backward_sums(&d, dt, x.h, st.h, gam.h, g.h, su.h));
    CK(sg_norm_sums_cuda(&d, dt, x.d, st.d, gam.d, g.d, su.d, NULL));
    snprintf(what, sizeof what, "norm %s backward sums", names[kind]);
    compare(what, &su);
    CK(cudaMemcpy(su.d, su.h, su.bytes, cudaMemcpyHostToDevice));
    CK(sg_norm_backward(&d, dt, x.h, st.h, gam.h, g.h, su.h, y.h, dgam.h,
                        dbet.h));
    CK(sg_norm_bwd_cuda(&d, dt, x.d, st.d, gam.d, g.d, su.d, y.d, dgam.d,
                        dbet.d, NULL));
    snprintf(what, sizeof what, "norm %s backward (dx)", names[kind]);
    compare(what, &y);
    snprintf(what, sizeof what, "norm %s backward (dgamma +=)", names[kind]);
    compare(what, &dgam);
    snprintf(what, sizeof what, "norm %s backward (dbeta +=)", names[kind]);
    compare(what, &dbet);
    drop(&st), drop(&su), drop(&dgam), drop(&dbet);
  }
  drop(&x), drop(&g), drop(&y), drop(&gam), drop(&bet);
}

/* The tape on the device: h = linear(x, w, b), m = norm(instance, h),
 * a = act(gelu, m), y = a * h, loss = mse(y, t) (h used twice: its
 * gradients summed on the device; the norm's statistics and the loss's
 * partials saved there), backward from the loss (its seed written on the
 * device); the loss and the gradients of x, w, b against the same tape on
 * host variables. */
typedef struct tape_run {
  sg_var x, w, b;
} tape_run;

static void tape_vars(tape_run *r, sg_dtype dt, void *x, void *w, void *b,
                      void *dw, void *db, int on_dev) {
  const int64_t xs[3] = {NB, NC, NS}, ws[2] = {4, NC}, bs[1] = {4};
  CK(sg_var_init(&r->x, "x", dt, 3, xs, x, 1));
  CK(sg_var_init_param(&r->w, "w", dt, 2, ws, w, dw));
  CK(sg_var_init_param(&r->b, "b", dt, 1, bs, b, db));
  if (!on_dev) return;
  const sg_device d = {SG_DEVICE_CUDA, 0};
  CK(sg_var_set_device(&r->x, d));
  CK(sg_var_set_device(&r->w, d));
  CK(sg_var_set_device(&r->b, d));
}

/* One step; the loss's value into z (1 element, on the run's side). */
/* y = linear-norm-gelu-mul of in[0] (ctx: the run's w and b) */
static sg_status tape_block(sg_tape_t tape, void *ctx, sg_var *const *in,
                            sg_var **out) {
  tape_run *r = ctx;
  sg_status st = SG_OK;
  sg_var *h = NULL, *m = NULL, *a = NULL;
  const sg_norm_desc nd = {.kind = SG_NORM_INSTANCE, .eps = 1e-5};
  SG_TRY(sg_ag_linear(tape, in[0], &r->w, &r->b, &h));
  SG_TRY(sg_ag_norm(tape, &nd, h, NULL, NULL, &m));
  SG_TRY(sg_ag_act(tape, SG_ACT_GELU, m, &a));
  SG_TRY(sg_ag_binary(tape, SG_BINARY_MUL, a, h, &out[0]));
fail:
  return st;
}

/* ckpt: the block checkpointed (replayed on the device in backward) */
static double tape_step(tape_run *r, const buf *t, const buf *z, int on_dev,
                        int ckpt) {
  sg_tape_t tape = NULL;
  sg_var tv, *y = NULL, *loss = NULL, *xin = &r->x;
  const int64_t ts[3] = {NB, 4, NS};
  CK(sg_var_init(&tv, "t", t->dt, 3, ts, on_dev ? t->d : t->h, 0));
  if (on_dev) CK(sg_var_set_device(&tv, r->x.value.device));
  CK(sg_tape_create(&tape));
  if (ckpt)
    CK(sg_ag_checkpoint(tape, tape_block, r, 1, &xin, 1, &y));
  else
    CK(tape_block(tape, r, &xin, &y));
  CK(sg_ag_loss(tape, SG_LOSS_MSE, y, &tv, &loss));
  if ((loss->value.device.kind == SG_DEVICE_CUDA) != on_dev) {
    printf("FAIL: the tape's loss is on %s\n",
           sg_device_kind_name(loss->value.device.kind));
    ++fails;
  }
  CK(cudaMemcpy(on_dev ? z->d : z->h, loss->value.data, z->bytes,
                on_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToHost));
  const double item = sg_var_item(loss); /* from the device */
  CK(sg_tape_backward(tape, loss));
  sg_tape_destroy(&tape);
  sg_var_release(&tv);
  return item;
}

static void check_tape(sg_dtype dt, int ckpt) {
  buf x = mk(dt, N, -2, 2), w = mk(dt, 4 * NC, -1, 1), b = mk(dt, 4, -1, 1);
  buf t = mk(dt, NB * 4 * NS, -1, 1), z = mk(dt, 1, 0, 0);
  buf dx = mk(dt, N, 0, 0), dw = mk(dt, 4 * NC, 0, 0), db = mk(dt, 4, 0, 0);
  tape_run host, dev;
  tape_vars(&host, dt, x.h, w.h, b.h, dw.h, db.h, 0);
  tape_vars(&dev, dt, x.d, w.d, b.d, dw.d, db.d, 1);
  const double lh = tape_step(&host, &t, &z, 0, 0);
  const double ld = tape_step(&dev, &t, &z, 1, ckpt);
  compare(ckpt ? "tape checkpointed block (loss)"
               : "tape linear-norm-gelu-mul-mse",
          &z);
  if (!(fabs(ld - lh) <=
        (dt == SG_DTYPE_F64 ? 1e-12 : 2e-5) * (fabs(lh) > 1 ? fabs(lh) : 1))) {
    printf("FAIL: sg_var_item of the device loss %.17g, host %.17g\n", ld, lh);
    ++fails;
  }
  memcpy(dx.h, host.x.grad.data, dx.bytes);
  CK(cudaMemcpy(dx.d, dev.x.grad.data, dx.bytes, cudaMemcpyDeviceToDevice));
  compare(ckpt ? "tape checkpointed (dx)" : "tape backward (dx)", &dx);
  compare(ckpt ? "tape checkpointed (dw)" : "tape backward (dw)", &dw);
  compare(ckpt ? "tape checkpointed (db)" : "tape backward (db)", &db);
  sg_var_release(&host.x), sg_var_release(&host.w), sg_var_release(&host.b);
  sg_var_release(&dev.x), sg_var_release(&dev.w), sg_var_release(&dev.b);
  drop(&x), drop(&w), drop(&b), drop(&t), drop(&z), drop(&dx), drop(&dw),
      drop(&db);
}

/* Padding on the device (the tape's window margins) against the host,
 * every mode, 2-D, uneven pads. */
static void check_pad(sg_dtype dt) {
  static const char *names[] = {"zero", "periodic", "reflect", "replicate"};
  const int64_t in[2] = {7, 9}, pad[2][2] = {{1, 2}, {2, 0}}, planes = NB * NC;
  const size_t nin = (size_t)(planes * 7 * 9),
               nout = (size_t)(planes * 10 * 11);
  buf x = mk(dt, nin, -2, 2), g = mk(dt, nout, -1, 1);
  buf y = mk(dt, nout, 0, 0), dx = mk(dt, nin, 0, 0);
  char what[64];
  for (int m = 0; m < 4; ++m) {
    const sg_pad_mode mode[2] = {(sg_pad_mode)m, (sg_pad_mode)m};
    CK(sg_pad_forward(dt, 2, planes, in, pad, mode, x.h, y.h));
    CK(sg_pad_fwd_cuda(dt, 2, planes, in, pad, mode, x.d, y.d, NULL));
    snprintf(what, sizeof what, "pad %s forward", names[m]);
    compare(what, &y);
    CK(sg_pad_backward(dt, 2, planes, in, pad, mode, g.h, dx.h));
    CK(sg_pad_bwd_cuda(dt, 2, planes, in, pad, mode, g.d, dx.d, NULL));
    snprintf(what, sizeof what, "pad %s backward", names[m]);
    compare(what, &dx);
  }
  drop(&x), drop(&g), drop(&y), drop(&dx);
  /* max pooling's -inf margins: a box past both ends of the domain in dim
   * 0 (zero), dim 1 periodic (its margins hold data) */
  const int64_t box[2] = {10, 11}, origin[2] = {-1, -2}, extent[2] = {7, 9};
  const sg_pad_mode fm[2] = {SG_PAD_ZERO, SG_PAD_PERIODIC};
  buf f = mk(dt, nout, -1, 1);
  CK(sg_pad_fill_outside(dt, 2, planes, box, origin, extent, fm, -7.5, f.h));
  CK(sg_pad_fill_outside_cuda(dt, 2, planes, box, origin, extent, fm, -7.5, f.d,
                              NULL));
  compare("pad fill outside (max pool)", &f);
  drop(&f);
}

/* Max pooling with zero-padded margins on the tape (3x3, stride 2, pad 1:
 * the -inf margins filled on the device), loss = mse(y, t): the loss and
 * dx against the same tape on the host. */
static void check_maxpool_tape(sg_dtype dt) {
  const size_t nx = NB * NC * 9 * 11, ny = NB * NC * 5 * 6;
  const int64_t xs[4] = {NB, NC, 9, 11}, ts[4] = {NB, NC, 5, 6};
  const sg_window win[2] = {
      {.kernel = 3, .stride = 2, .dilation = 1, .pad = {1, 1}, .up = 1},
      {.kernel = 3, .stride = 2, .dilation = 1, .pad = {1, 1}, .up = 1}};
  buf x = mk(dt, nx, -2, 2), t = mk(dt, ny, -1, 1), dx = mk(dt, nx, 0, 0);
  double l[2];
  for (int dev = 0; dev < 2; ++dev) {
    sg_tape_t tape = NULL;
    sg_var xv, tv, *y = NULL, *loss = NULL;
    CK(sg_var_init(&xv, "x", dt, 4, xs, dev ? x.d : x.h, 1));
    CK(sg_var_init(&tv, "t", dt, 4, ts, dev ? t.d : t.h, 0));
    if (dev) {
      const sg_device d = {SG_DEVICE_CUDA, 0};
      CK(sg_var_set_device(&xv, d));
      CK(sg_var_set_device(&tv, d));
    }
    CK(sg_tape_create(&tape));
    CK(sg_ag_pool(tape, SG_POOL_MAX, &xv, win, &y));
    CK(sg_ag_loss(tape, SG_LOSS_MSE, y, &tv, &loss));
    l[dev] = sg_var_item(loss);
    CK(sg_tape_backward(tape, loss));
    if (dev)
      CK(cudaMemcpy(dx.d, xv.grad.data, dx.bytes, cudaMemcpyDeviceToDevice));
    else
      memcpy(dx.h, xv.grad.data, dx.bytes);
    sg_tape_destroy(&tape);
    sg_var_release(&xv), sg_var_release(&tv);
  }
  const double tol = dt == SG_DTYPE_F64 ? 1e-12 : 2e-5;
  const int ok = fabs(l[1] - l[0]) <= tol * (fabs(l[0]) > 1 ? fabs(l[0]) : 1);
  printf("%-4s %-30s %.17g vs %.17g  %s\n", sg_dtype_name(dt),
         "tape padded max-pool loss", l[1], l[0], ok ? "ok" : "FAIL");
  fails += !ok;
  compare("tape padded max-pool (dx)", &dx);
  drop(&x), drop(&t), drop(&dx);
}

/* A padded convolution on the tape: h = conv(x, w, b) (3x3, zero padding
 * in dim 0, periodic in dim 1: the margins made on the device), c =
 * concat(h, x) (x used twice: the padded path's gradient added to the
 * concat's on the device), loss = mse(c, t); the loss and the gradients of
 * x, w, b against the same tape on the host. */
static double conv_tape_step(sg_var *x, sg_var *w, sg_var *b, const buf *t,
                             int on_dev) {
  sg_tape_t tape = NULL;
  sg_var tv, *h = NULL, *c = NULL, *loss = NULL;
  const int64_t ts[4] = {NB, 4 + NC, 9, 11};
  const sg_window win[2] = {
      {.kernel = 3, .stride = 1, .dilation = 1, .pad = {1, 1}, .up = 1},
      {.kernel = 3,
       .stride = 1,
       .dilation = 1,
       .pad = {1, 1},
       .up = 1,
       .boundary = SG_BOUNDARY_PERIODIC}};
  CK(sg_var_init(&tv, "t", t->dt, 4, ts, on_dev ? t->d : t->h, 0));
  if (on_dev) CK(sg_var_set_device(&tv, x->value.device));
  CK(sg_tape_create(&tape));
  CK(sg_ag_conv(tape, x, w, b, win, &h));
  CK(sg_ag_concat(tape, 2, (sg_var *[]){h, x}, &c));
  CK(sg_ag_loss(tape, SG_LOSS_MSE, c, &tv, &loss));
  const double item = sg_var_item(loss);
  CK(sg_tape_backward(tape, loss));
  sg_tape_destroy(&tape);
  sg_var_release(&tv);
  return item;
}

static void check_conv_tape(sg_dtype dt) {
  const size_t nx = NB * NC * 9 * 11, nw = 4 * NC * 9;
  buf x = mk(dt, nx, -2, 2), w = mk(dt, nw, -1, 1), b = mk(dt, 4, -1, 1);
  buf t = mk(dt, NB * (4 + NC) * 9 * 11, -1, 1);
  buf dx = mk(dt, nx, 0, 0), dw = mk(dt, nw, 0, 0), db = mk(dt, 4, 0, 0);
  const int64_t xs[4] = {NB, NC, 9, 11}, ws[4] = {4, NC, 3, 3}, bs[1] = {4};
  sg_var hx, hw, hb, gx, gw, gb;
  const sg_device d = {SG_DEVICE_CUDA, 0};
  CK(sg_var_init(&hx, "x", dt, 4, xs, x.h, 1));
  CK(sg_var_init_param(&hw, "w", dt, 4, ws, w.h, dw.h));
  CK(sg_var_init_param(&hb, "b", dt, 1, bs, b.h, db.h));
  CK(sg_var_init(&gx, "x", dt, 4, xs, x.d, 1));
  CK(sg_var_init_param(&gw, "w", dt, 4, ws, w.d, dw.d));
  CK(sg_var_init_param(&gb, "b", dt, 1, bs, b.d, db.d));
  CK(sg_var_set_device(&gx, d));
  CK(sg_var_set_device(&gw, d));
  CK(sg_var_set_device(&gb, d));
  const double lh = conv_tape_step(&hx, &hw, &hb, &t, 0);
  const double ld = conv_tape_step(&gx, &gw, &gb, &t, 1);
  const double tol = dt == SG_DTYPE_F64 ? 1e-12 : 2e-5;
  const int ok = fabs(ld - lh) <= tol * (fabs(lh) > 1 ? fabs(lh) : 1);
  printf("%-4s %-30s %.17g vs %.17g  %s\n", sg_dtype_name(dt),
         "tape padded conv-concat loss", ld, lh, ok ? "ok" : "FAIL");
  fails += !ok;
  memcpy(dx.h, hx.grad.data, dx.bytes);
  CK(cudaMemcpy(dx.d, gx.grad.data, dx.bytes, cudaMemcpyDeviceToDevice));
  compare("tape conv backward (dx)", &dx);
  compare("tape conv backward (dw)", &dw);
  compare("tape conv backward (db)", &db);
  sg_var_release(&hx), sg_var_release(&hw), sg_var_release(&hb);
  sg_var_release(&gx), sg_var_release(&gw), sg_var_release(&gb);
  drop(&x), drop(&w), drop(&b), drop(&t), drop(&dx), drop(&dw), drop(&db);
}

/* The fused attention: o, lse, dq, dk, dv of the device kernels against
 * the host kernel (sg_attention_forward/backward), with the host's o and
 * lse fed to both backwards; causal offsets >= 0 (every row sees a key:
 * no -inf to compare). */
static void check_attention(sg_dtype dt) {
  static const int64_t cfg[][5] = {/* nq, nk, d, causal, offset */
                                   {37, 37, 8, 0, 0},
                                   {29, 45, 5, 1, 16},
                                   {50, 17, 16, 1, 0},
                                   {9, 70, 3, 1, 4}};
  char what[64];
  for (size_t c = 0; c < sizeof cfg / sizeof *cfg; ++c) {
    const sg_attn_desc ad = {.batch = NB,
                             .heads = 2,
                             .nq = cfg[c][0],
                             .nk = cfg[c][1],
                             .head_dim = cfg[c][2],
                             .causal = (int)cfg[c][3],
                             .causal_offset = cfg[c][4]};
    const size_t nq = (size_t)(NB * 2 * ad.nq * ad.head_dim),
                 nk = (size_t)(NB * 2 * ad.nk * ad.head_dim),
                 nr = (size_t)(NB * 2 * ad.nq);
    buf q = mk(dt, nq, -1, 1), k = mk(dt, nk, -1, 1), v = mk(dt, nk, -1, 1);
    buf g = mk(dt, nq, -1, 1), o = mk(dt, nq, 0, 0), lse = mk(dt, nr, 0, 0);
    buf dq = mk(dt, nq, 0, 0), dk = mk(dt, nk, 0, 0), dv = mk(dt, nk, 0, 0);
    CK(sg_attention_forward(&ad, dt, q.h, k.h, v.h, o.h, lse.h, NULL));
    CK(sg_attention_fwd_cuda(&ad, dt, q.d, k.d, v.d, o.d, lse.d, NULL));
    snprintf(what, sizeof what, "attention %lldx%lld d%lld c%d o",
             (long long)ad.nq, (long long)ad.nk, (long long)ad.head_dim,
             ad.causal);
    compare(what, &o);
    snprintf(what, sizeof what, "attention %lldx%lld d%lld c%d lse",
             (long long)ad.nq, (long long)ad.nk, (long long)ad.head_dim,
             ad.causal);
    compare(what, &lse);
    /* both backwards from the host's o and lse */
    CK(cudaMemcpy(o.d, o.h, o.bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(lse.d, lse.h, lse.bytes, cudaMemcpyHostToDevice));
    CK(sg_attention_backward(&ad, dt, q.h, k.h, v.h, o.h, lse.h, g.h, dq.h,
                             dk.h, dv.h, NULL));
    CK(sg_attention_bwd_cuda(&ad, dt, q.d, k.d, v.d, o.d, lse.d, g.d, dq.d,
                             dk.d, dv.d, NULL));
    const buf *gr[3] = {&dq, &dk, &dv};
    static const char *gn[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; ++i) {
      snprintf(what, sizeof what, "attention %lldx%lld d%lld c%d %s",
               (long long)ad.nq, (long long)ad.nk, (long long)ad.head_dim,
               ad.causal, gn[i]);
      compare(what, gr[i]);
    }
    drop(&q), drop(&k), drop(&v), drop(&g), drop(&o), drop(&lse), drop(&dq),
        drop(&dk), drop(&dv);
  }
}

/* The attention ops on the tape: o = attention(q, k, v) (2 heads of 2 over
 * 5 x 7 tokens; the ring op, or Ulysses / USP, which are the same
 * attention in one process), loss = mse(o, t); the loss and dq, dk, dv
 * against the same tape on the host. */
static double attn_tape_step(sg_var *x, const buf *t, int on_dev,
                             sg_sp_mode mode) {
  sg_tape_t tape = NULL;
  sg_var tv, *o = NULL, *loss = NULL;
  const int64_t ts[4] = {NB, 4, 5, 7};
  CK(sg_var_init(&tv, "t", t->dt, 4, ts, on_dev ? t->d : t->h, 0));
  if (on_dev) CK(sg_var_set_device(&tv, x[0].value.device));
  CK(sg_tape_create(&tape));
  CK(sg_ag_attention_sp(tape, mode, 2, &x[0], &x[1], &x[2], &o));
  CK(sg_ag_loss(tape, SG_LOSS_MSE, o, &tv, &loss));
  const double item = sg_var_item(loss);
  CK(sg_tape_backward(tape, loss));
  sg_tape_destroy(&tape);
  sg_var_release(&tv);
  return item;
}

static void check_attn_tape(sg_dtype dt, sg_sp_mode mode) {
  const size_t n = NB * 4 * 5 * 7;
  const int64_t xs[4] = {NB, 4, 5, 7};
  static const char *names[3] = {"q", "k", "v"};
  buf x[3], t = mk(dt, n, -1, 1), dx = mk(dt, n, 0, 0);
  sg_var hv[3], dv[3];
  const sg_device d = {SG_DEVICE_CUDA, 0};
  for (int i = 0; i < 3; ++i) {
    x[i] = mk(dt, n, -1, 1);
    CK(sg_var_init(&hv[i], names[i], dt, 4, xs, x[i].h, 1));
    CK(sg_var_init(&dv[i], names[i], dt, 4, xs, x[i].d, 1));
    CK(sg_var_set_device(&dv[i], d));
  }
  const double lh = attn_tape_step(hv, &t, 0, mode);
  const double ld = attn_tape_step(dv, &t, 1, mode);
  const double tol = dt == SG_DTYPE_F64 ? 1e-12 : 2e-5;
  const int ok = fabs(ld - lh) <= tol * (fabs(lh) > 1 ? fabs(lh) : 1);
  static const char *mn[3] = {"ring", "ulysses", "usp"};
  printf("%-4s tape attention-mse loss (%s) %.17g vs %.17g  %s\n",
         sg_dtype_name(dt), mn[mode], ld, lh, ok ? "ok" : "FAIL");
  fails += !ok;
  char what[64];
  for (int i = 0; i < 3; ++i) {
    memcpy(dx.h, hv[i].grad.data, dx.bytes);
    CK(cudaMemcpy(dx.d, dv[i].grad.data, dx.bytes, cudaMemcpyDeviceToDevice));
    snprintf(what, sizeof what, "tape attention backward (d%s)", names[i]);
    compare(what, &dx);
    sg_var_release(&hv[i]), sg_var_release(&dv[i]);
    drop(&x[i]);
  }
  drop(&t), drop(&dx);
}

/* Window attention on the tape (2 heads of 3 over a 6 x 9 grid of 3 x 3
 * windows, a relative position bias parameter), loss = mse(o, t): the
 * loss and dq, dk, dv, dbias against the same tape on the host. */
static void check_wattn_tape(sg_dtype dt) {
  const size_t n = NB * 6 * 6 * 9, nb = 2 * 25;
  const int64_t xs[4] = {NB, 6, 6, 9}, bs[2] = {2, 25};
  static const char *names[3] = {"q", "k", "v"};
  buf x[3], bias = mk(dt, nb, -1, 1), db = mk(dt, nb, 0, 0);
  buf t = mk(dt, n, -1, 1), dx = mk(dt, n, 0, 0);
  sg_var v[2][3], bv[2];
  double l[2];
  for (int i = 0; i < 3; ++i) x[i] = mk(dt, n, -1, 1);
  for (int dev = 0; dev < 2; ++dev) {
    const sg_device d = {SG_DEVICE_CUDA, 0};
    sg_tape_t tape = NULL;
    sg_var tv, *o = NULL, *loss = NULL;
    for (int i = 0; i < 3; ++i) {
      CK(sg_var_init(&v[dev][i], names[i], dt, 4, xs, dev ? x[i].d : x[i].h,
                     1));
      if (dev) CK(sg_var_set_device(&v[dev][i], d));
    }
    CK(sg_var_init_param(&bv[dev], "bias", dt, 2, bs, dev ? bias.d : bias.h,
                         dev ? db.d : db.h));
    CK(sg_var_init(&tv, "t", dt, 4, xs, dev ? t.d : t.h, 0));
    if (dev) CK(sg_var_set_device(&bv[dev], d));
    if (dev) CK(sg_var_set_device(&tv, d));
    CK(sg_tape_create(&tape));
    CK(sg_ag_window_attention(tape, 2, 3, &v[dev][0], &v[dev][1], &v[dev][2],
                              &bv[dev], &o));
    CK(sg_ag_loss(tape, SG_LOSS_MSE, o, &tv, &loss));
    l[dev] = sg_var_item(loss);
    CK(sg_tape_backward(tape, loss));
    sg_tape_destroy(&tape);
    sg_var_release(&tv);
  }
  const double tol = dt == SG_DTYPE_F64 ? 1e-12 : 2e-5;
  const int ok = fabs(l[1] - l[0]) <= tol * (fabs(l[0]) > 1 ? fabs(l[0]) : 1);
  printf("%-4s %-30s %.17g vs %.17g  %s\n", sg_dtype_name(dt),
         "tape window attention loss", l[1], l[0], ok ? "ok" : "FAIL");
  fails += !ok;
  char what[64];
  for (int i = 0; i < 3; ++i) {
    memcpy(dx.h, v[0][i].grad.data, dx.bytes);
    CK(cudaMemcpy(dx.d, v[1][i].grad.data, dx.bytes, cudaMemcpyDeviceToDevice));
    snprintf(what, sizeof what, "tape window attention (d%s)", names[i]);
    compare(what, &dx);
    sg_var_release(&v[0][i]), sg_var_release(&v[1][i]);
    drop(&x[i]);
  }
  compare("tape window attention (dbias)", &db);
  sg_var_release(&bv[0]), sg_var_release(&bv[1]);
  drop(&bias), drop(&db), drop(&t), drop(&dx);
}

/* The spectral ops on the tape (one process): y = spectral_conv(x; W) and
 * y = gelu(spectral(x; W) + w x + b) (spectral_linear_act), loss =
 * mse(y, t), on odd sizes (7 x 9, modes 2 x 3 not dividing them, cin 3 ->
 * cout 2, batch 2) and 3-D (5 x 6 x 4: an even last length, its Nyquist
 * column kept); the loss and dx, dW, dw, db against the same tapes on the
 * host. cuFFT and FFTW round differently: f64 1e-10, f32 1e-4 (relative to
 * max(1, |host value|); the FFTs of a few ulp times log N, summed over the
 * modes and channels). */
static double spec_tape_step(sg_spectral_conv_t conv, int fused, sg_var *x,
                             sg_var *W, sg_var *w, sg_var *b, sg_var *tv) {
  sg_tape_t tape = NULL;
  sg_var *y = NULL, *loss = NULL;
  CK(sg_tape_create(&tape));
  if (fused)
    CK(sg_ag_spectral_linear_act(tape, conv, x, W, w, b, SG_ACT_GELU, &y));
  else
    CK(sg_ag_spectral_conv(tape, conv, x, W, &y));
  CK(sg_ag_loss(tape, SG_LOSS_MSE, y, tv, &loss));
  const double item = sg_var_item(loss);
  CK(sg_tape_backward(tape, loss));
  sg_tape_destroy(&tape);
  return item;
}

static void check_spectral_tape(sg_dtype dt, int D, int fused) {
  const int64_t n2[2] = {7, 9}, k2[2] = {2, 3}, n3[3] = {5, 6, 4},
                k3[3] = {2, 2, 3};
  const int64_t *n = D == 2 ? n2 : n3, *keep = D == 2 ? k2 : k3;
  const int64_t nb = 2, ci = 3, co = 2;
  int64_t cells = 1, modes = 1;
  sg_fft_desc desc;
  sg_fft_desc_init(&desc);
  desc.dtype = dt;
  desc.ndim = D;
  desc.batch = nb;
  for (int d = 0; d < D; ++d) {
    desc.shape[d] = n[d];
    desc.keep[d] = keep[d];
    cells *= n[d];
    modes *= d == D - 1 ? keep[d] : 2 * keep[d];
  }
  sg_spectral_conv_t conv = NULL;
  CK(sg_spectral_conv_create_comms(MPI_COMM_SELF, 0, NULL, &desc, ci, co,
                                   &conv));
  const size_t nx = (size_t)(nb * ci * cells), ny = (size_t)(nb * co * cells),
               nW = (size_t)(2 * ci * co * modes);
  buf x = mk(dt, nx, -1, 1), W = mk(dt, nW, -0.5, 0.5),
      w = mk(dt, (size_t)(co * ci), -1, 1), b = mk(dt, (size_t)co, -1, 1);
  buf t = mk(dt, ny, -1, 1), dx = mk(dt, nx, 0, 0), dW = mk(dt, nW, 0, 0),
      dw = mk(dt, (size_t)(co * ci), 0, 0), db = mk(dt, (size_t)co, 0, 0);
  int64_t xs[5] = {nb, ci, n[0], n[1], D == 3 ? n[2] : 0}, ts[5];
  memcpy(ts, xs, sizeof ts);
  ts[1] = co;
  const int64_t Ws[1] = {(int64_t)nW}, ws[2] = {co, ci}, bs[1] = {co};
  sg_var vx[2], vW[2], vw[2], vb[2], vt[2];
  double l[2];
  for (int dev = 0; dev < 2; ++dev) {
    CK(sg_var_init(&vx[dev], "x", dt, 2 + D, xs, dev ? x.d : x.h, 1));
    CK(sg_var_init_param(&vW[dev], "W", dt, 1, Ws, dev ? W.d : W.h,
                         dev ? dW.d : dW.h));
    CK(sg_var_init_param(&vw[dev], "w", dt, 2, ws, dev ? w.d : w.h,
                         dev ? dw.d : dw.h));
    CK(sg_var_init_param(&vb[dev], "b", dt, 1, bs, dev ? b.d : b.h,
                         dev ? db.d : db.h));
    CK(sg_var_init(&vt[dev], "t", dt, 2 + D, ts, dev ? t.d : t.h, 0));
    if (dev) {
      const sg_device cu = {SG_DEVICE_CUDA, 0};
      CK(sg_var_set_device(&vx[dev], cu));
      CK(sg_var_set_device(&vW[dev], cu));
      CK(sg_var_set_device(&vw[dev], cu));
      CK(sg_var_set_device(&vb[dev], cu));
      CK(sg_var_set_device(&vt[dev], cu));
    }
    l[dev] = spec_tape_step(conv, fused, &vx[dev], &vW[dev], &vw[dev], &vb[dev],
                            &vt[dev]);
  }
  const double tol = dt == SG_DTYPE_F64 ? 1e-10 : 1e-4;
  char what[64];
  const char *name = fused ? "spectral_linear_act" : "spectral_conv";
  const int ok = fabs(l[1] - l[0]) <= tol * (fabs(l[0]) > 1 ? fabs(l[0]) : 1);
  printf("%-4s tape %s %dD loss %.17g (host %.17g)  %s\n", sg_dtype_name(dt),
         name, D, l[1], l[0], ok ? "ok" : "FAIL");
  fails += !ok;
  memcpy(dx.h, vx[0].grad.data, dx.bytes);
  CK(cudaMemcpy(dx.d, vx[1].grad.data, dx.bytes, cudaMemcpyDeviceToDevice));
  snprintf(what, sizeof what, "tape %s %dD (dx)", name, D);
  compare_tol(what, &dx, tol);
  snprintf(what, sizeof what, "tape %s %dD (dW)", name, D);
  compare_tol(what, &dW, tol);
  if (fused) {
    snprintf(what, sizeof what, "tape %s %dD (dw)", name, D);
    compare_tol(what, &dw, tol);
    snprintf(what, sizeof what, "tape %s %dD (db)", name, D);
    compare_tol(what, &db, tol);
  }
  for (int dev = 0; dev < 2; ++dev) {
    sg_var_release(&vx[dev]), sg_var_release(&vW[dev]);
    sg_var_release(&vw[dev]), sg_var_release(&vb[dev]);
    sg_var_release(&vt[dev]);
  }
  sg_spectral_conv_destroy(&conv);
  drop(&x), drop(&W), drop(&w), drop(&b), drop(&t), drop(&dx), drop(&dW),
      drop(&dw), drop(&db);
}

/* The 2-D FNO on one GPU (f32; lift, two spectral_linear_act layers with
 * GELU, the projection's linear_act and linear; no grid channels: they are
 * host variables of the model): one forward and backward with the
 * parameters and the input on the device against the same model on the
 * host, the loss and every parameter's gradient within 1e-4 (cuFFT and
 * FFTW in f32 through four layers). */
static void check_fno_tape(void) {
  sg_mesh_t mesh = NULL;
  sg_fno_t m[2] = {NULL, NULL};
  CK(sg_mesh_create(MPI_COMM_WORLD, "h=1", &mesh));
  sg_fno_config c = sg_fno_defaults();
  c.cin = 2, c.cout = 1, c.width = 5, c.modes1 = 3, c.modes2 = 2;
  c.layers = 2, c.proj_width = 6, c.add_grid = 0;
  const int64_t ny = 9, nx = 7, nb = 2;
  CK(sg_fno_create(mesh, &c, ny, nx, nb, &m[0]));
  CK(sg_fno_create(mesh, &c, ny, nx, nb, &m[1]));
  const size_t np = (size_t)sg_fno_param_count(m[0]);
  buf p = mk(SG_DTYPE_F32, np, 0, 0), g = mk(SG_DTYPE_F32, np, 0, 0);
  buf x = mk(SG_DTYPE_F32, (size_t)(nb * 2 * ny * nx), -1, 1),
      t = mk(SG_DTYPE_F32, (size_t)(nb * ny * nx), -1, 1);
  CK(sg_fno_bind(m[0], p.h, g.h));
  CK(sg_fno_init(m[0], 11));
  CK(cudaMemcpy(p.d, p.h, p.bytes, cudaMemcpyHostToDevice));
  CK(sg_fno_bind(m[1], p.d, g.d));
  const sg_device cu = {SG_DEVICE_CUDA, 0};
  sg_var **pv = NULL;
  const int npv = sg_fno_params(m[1], &pv);
  for (int i = 0; i < npv; ++i) CK(sg_var_set_device(pv[i], cu));
  const int64_t xs[4] = {nb, 2, ny, nx}, ts[4] = {nb, 1, ny, nx};
  double l[2];
  for (int dev = 0; dev < 2; ++dev) {
    sg_var xv, tv, *y = NULL, *loss = NULL;
    sg_tape_t tape = NULL;
    CK(sg_var_init(&xv, "x", SG_DTYPE_F32, 4, xs, dev ? x.d : x.h, 0));
    CK(sg_var_init(&tv, "t", SG_DTYPE_F32, 4, ts, dev ? t.d : t.h, 0));
    if (dev) {
      CK(sg_var_set_device(&xv, cu));
      CK(sg_var_set_device(&tv, cu));
    }
    CK(sg_tape_create(&tape));
    CK(sg_fno_forward(m[dev], tape, &xv, &y));
    CK(sg_ag_loss(tape, SG_LOSS_MSE, y, &tv, &loss));
    l[dev] = sg_var_item(loss);
    CK(sg_tape_backward(tape, loss));
    sg_tape_destroy(&tape);
    sg_var_release(&xv), sg_var_release(&tv);
  }
  const int ok = fabs(l[1] - l[0]) <= 1e-4 * (fabs(l[0]) > 1 ? fabs(l[0]) : 1);
  printf("f32  tape FNO 2-D loss %.9g (host %.9g)  %s\n", l[1], l[0],
         ok ? "ok" : "FAIL");
  fails += !ok;
  compare_tol("tape FNO 2-D (parameter grads)", &g, 1e-4);
  sg_fno_destroy(&m[1]);
  sg_fno_destroy(&m[0]);
  sg_mesh_destroy(&mesh);
  drop(&p), drop(&g), drop(&x), drop(&t);
}

/* The launchers above; each op the device table puts on cuda must name
 * two of them. An entry "a+b+c" names each part: a launcher tested here,
 * or a copy or collective of the comm layer (the tp ops: the device path
 * of their sums is checked on the host, tests/models/test_tp_device.c). */
static int tested_one(const char *fn, size_t len);
static int tested(const char *fn) {
  if (!fn || !fn[0]) return 0;
  for (const char *p = fn;;) {
    const char *e = strchr(p, '+');
    const size_t len = e ? (size_t)(e - p) : strlen(p);
    if (!tested_one(p, len)) return 0;
    if (!e) return 1;
    p = e + 1;
  }
}

static int tested_one(const char *fn, size_t len) {
  /* the comm layer's; the checkpoint op's are the tape's own (no kernel:
   * check_tape(dt, 1) runs a checkpointed block on the device) */
  static const char *const comm[] = {"cudaMemcpy", "sg_alltoallv",
                                     "sg_allgatherv", "sg_ag_checkpoint",
                                     "ag_ckpt_backward"};
  for (size_t i = 0; i < sizeof comm / sizeof *comm; ++i)
    if (strlen(comm[i]) == len && !strncmp(fn, comm[i], len)) return 1;
  static const char *const names[] = {"sg_act_fwd_cuda",
                                      "sg_act_bwd_cuda",
                                      "sg_binary_fwd_cuda",
                                      "sg_binary_bwd_cuda",
                                      "sg_scale_cuda",
                                      "sg_bias_fwd_cuda",
                                      "sg_bias_bwd_cuda",
                                      "sg_loss_partial_cuda",
                                      "sg_loss_bwd_cuda",
                                      "sg_dist_loss_sums_cuda",
                                      "sg_dist_loss_bwd_cuda",
                                      "sg_pool_fwd_cuda",
                                      "sg_pool_bwd_cuda",
                                      "sg_upsample_fwd_cuda",
                                      "sg_upsample_bwd_cuda",
                                      "sg_linear_fwd_cuda",
                                      "sg_linear_bwd_cuda",
                                      "sg_norm_fwd_cuda",
                                      "sg_norm_bwd_cuda",
                                      "sg_conv_fwd_cuda",
                                      "sg_conv_bwd_cuda",
                                      "sg_convt_fwd_cuda",
                                      "sg_convt_bwd_cuda",
                                      "sg_cat_part_cuda",
                                      "sg_bcast_t_fwd_cuda",
                                      "sg_bcast_t_bwd_cuda",
                                      "sg_time_window_cuda",
                                      "sg_roll_cuda",
                                      "sg_add_field_fwd_cuda",
                                      "sg_add_field_bwd_cuda",
                                      "sg_attention_fwd_cuda",
                                      "sg_attention_bwd_cuda",
                                      "sg_wattn_fwd_cuda",
                                      "sg_wattn_bwd_cuda",
                                      "sg_spectral_conv_forward_cuda",
                                      "sg_spectral_conv_backward_cuda"};
  for (size_t i = 0; i < sizeof names / sizeof *names; ++i)
    if (strlen(names[i]) == len && !strncmp(fn, names[i], len)) return 1;
  return 0;
}

static void check_table(void) {
  for (int i = 0; i < sg_op_device_count(); ++i) {
    const sg_op_device *d = sg_op_device_at(i);
    if (!sg_op_device_on_cuda(d)) continue;
    if (!tested(d->cuda_fwd) || !tested(d->cuda_bwd)) {
      printf("FAIL: op '%s' is on cuda (%s, %s) but not tested here\n", d->op,
             d->cuda_fwd, d->cuda_bwd);
      ++fails;
    }
  }
}

/* The launchers' argument checks run before any CUDA call: tested with or
 * without a device (CI's CUDA build runs these, then skips). */
static void check_arguments(void) {
  sg_adamw_config cfg = sg_adamw_defaults();
  struct {
    const char *what;
    sg_status got, want;
  } c[] = {
      {"act on i32",
       sg_act_fwd_cuda(SG_ACT_RELU, SG_DTYPE_I32, 4, NULL, NULL, NULL),
       SG_ERR_NOT_SUPPORTED},
      {"act on -1 elements",
       sg_act_bwd_cuda(SG_ACT_GELU, SG_DTYPE_F32, -1, NULL, NULL, NULL, NULL),
       SG_ERR_INVALID_ARG},
      {"act on 0 elements (no launch)",
       sg_act_fwd_cuda(SG_ACT_TANH, SG_DTYPE_F64, 0, NULL, NULL, NULL), SG_OK},
      {"loss with 5 elements in 2 items",
       sg_loss_bwd_cuda(SG_LOSS_MSE, SG_DTYPE_F32, 2, 5, NULL, NULL, NULL, 1.0,
                        NULL, NULL, NULL),
       SG_ERR_SHAPE},
      {"dist_loss sums without an output",
       sg_dist_loss_sums_cuda(0, SG_DTYPE_F32, 1, 4, &cfg, &cfg, NULL, NULL,
                              NULL),
       SG_ERR_INVALID_ARG},
      {"dist_loss backward on i32",
       sg_dist_loss_bwd_cuda(1, SG_DTYPE_I32, 1, 4, &cfg, &cfg, NULL,
                             (double *)&cfg, 1.0, 1, &cfg, NULL),
       SG_ERR_NOT_SUPPORTED},
      {"mse loss without a target",
       sg_loss_partial_cuda(SG_LOSS_MSE, SG_DTYPE_F32, 1, 4, &cfg, NULL,
                            (double *)&cfg, NULL),
       SG_ERR_INVALID_ARG},
      {"pool without a descriptor",
       sg_pool_fwd_cuda(SG_POOL_MAX, NULL, SG_DTYPE_F32, NULL, NULL, NULL),
       SG_ERR_INVALID_ARG},
      {"upsample by 0",
       sg_upsample_fwd_cuda(SG_UPSAMPLE_NEAREST, 1, 1, (int64_t[]){4},
                            (int64_t[]){0}, SG_DTYPE_F64, NULL, NULL, NULL),
       SG_ERR_INVALID_ARG},
      {"linear without input channels",
       sg_linear_fwd_cuda(SG_DTYPE_F32, 1, 0, 1, 1, NULL, NULL, NULL, NULL,
                          NULL),
       SG_ERR_SHAPE},
      {"batch norm on the device",
       sg_norm_stats_cuda(&(sg_norm_desc){.kind = SG_NORM_BATCH,
                                          .batch = 1,
                                          .channels = 1,
                                          .spatial = 4,
                                          .groups = 1,
                                          .eps = 1e-5},
                          SG_DTYPE_F32, NULL, NULL, NULL),
       SG_ERR_NOT_SUPPORTED},
      {"norm without a descriptor",
       sg_norm_fwd_cuda(NULL, SG_DTYPE_F32, NULL, NULL, NULL, NULL, NULL, NULL),
       SG_ERR_INVALID_ARG},
      {"conv without a descriptor",
       sg_conv_fwd_cuda(NULL, SG_DTYPE_F32, NULL, NULL, NULL, NULL, NULL, NULL),
       SG_ERR_INVALID_ARG},
      {"conv with round_out (host only)",
       sg_conv_bwd_cuda(&(sg_conv_desc){.nsp = 1,
                                        .batch = 1,
                                        .cin = 1,
                                        .cout = 1,
                                        .in = {4},
                                        .kernel = {3},
                                        .stride = {1},
                                        .dilation = {1},
                                        .round_out = 1},
                        SG_DTYPE_F32, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                        NULL),
       SG_ERR_NOT_SUPPORTED},
      {"concat part past the channels",
       sg_cat_part_cuda(SG_DTYPE_F32, 1, 4, 3, 4, 2, 1, NULL, NULL, NULL),
       SG_ERR_SHAPE},
      {"attention without a descriptor",
       sg_attention_fwd_cuda(NULL, SG_DTYPE_F32, NULL, NULL, NULL, NULL, NULL,
                             NULL),
       SG_ERR_INVALID_ARG},
      {"attention in bf16 (host only)",
       sg_attention_bwd_cuda(
           &(sg_attn_desc){
               .batch = 1, .heads = 1, .nq = 2, .nk = 2, .head_dim = 2},
           SG_DTYPE_BF16, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL),
       SG_ERR_NOT_SUPPORTED},
      {"fill outside without a box",
       sg_pad_fill_outside_cuda(SG_DTYPE_F32, 2, 1, NULL, NULL, NULL, NULL, 0.0,
                                NULL, NULL),
       SG_ERR_INVALID_ARG},
      {"window attention without a geometry",
       sg_wattn_fwd_cuda(SG_DTYPE_F64, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                         NULL),
       SG_ERR_INVALID_ARG},
      {"attention head_dim 0",
       sg_heads_copy_cuda(SG_DTYPE_F32, 1, 1, 4, 0, NULL, NULL, 0, NULL),
       SG_ERR_SHAPE},
      {"spectral conv without a convolution",
       sg_spectral_conv_forward_cuda(NULL, NULL, NULL, NULL, NULL),
       SG_ERR_INVALID_ARG},
      {"adamw at step 0",
       sg_adamw_step_f32_cuda(NULL, NULL, NULL, NULL, 4, 0, 1e-3, 1.0, &cfg,
                              NULL),
       SG_ERR_INVALID_ARG},
  };
  for (size_t i = 0; i < sizeof c / sizeof *c; ++i)
    if (c[i].got != c[i].want) {
      printf("FAIL: %s: status %d, expected %d\n", c[i].what, (int)c[i].got,
             (int)c[i].want);
      ++fails;
    }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  check_arguments();
  check_table(); /* host logic: without a GPU too */
  if (fails) {
    MPI_Finalize();
    return 1;
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    const char *req = getenv("SG_REQUIRE_GPU"); /* tools/test-gpu sets it */
    int fail = req && req[0] && strcmp(req, "0") != 0;
    printf("no CUDA device: %s\n",
           fail ? "FAILED (SG_REQUIRE_GPU)" : "skipped");
    MPI_Finalize();
    return fail ? 1 : 77;
  }
  CK(cudaSetDevice(0));
  const sg_dtype dts[] = {SG_DTYPE_F64, SG_DTYPE_F32};
  for (int k = 0; k < 2; ++k) {
    check_act(dts[k]);
    check_binary_scale(dts[k]);
    check_bias(dts[k]);
    check_pool(dts[k]);
    check_upsample(dts[k]);
    check_linear(dts[k]);
    check_conv(dts[k]);
    check_layout(dts[k]);
    check_loss(dts[k]);
    check_dist_loss(dts[k]);
    check_norm(dts[k]);
    check_tape(dts[k], 0);
    check_tape(dts[k], 1); /* the block checkpointed on the device */
    check_pad(dts[k]);
    check_conv_tape(dts[k]);
    check_maxpool_tape(dts[k]);
    check_attention(dts[k]);
    check_attn_tape(dts[k], SG_SP_RING);
    check_attn_tape(dts[k], SG_SP_ULYSSES);
    check_attn_tape(dts[k], SG_SP_USP);
    check_wattn_tape(dts[k]);
    for (int fused = 0; fused < 2; ++fused) {
      check_spectral_tape(dts[k], 2, fused);
      check_spectral_tape(dts[k], 3, fused);
    }
  }
  check_adamw();
  check_fno_tape();
  printf("%s\n", fails ? "FAILED" : "PASSED");
  MPI_Finalize();
  return fails ? 1 : 0;
}
