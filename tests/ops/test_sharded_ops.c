/* Sharded ops against one process, in f32 AND f64: every rank computes the
 * one-process result with the local kernels on the global tensor (padding by
 * sg_pad_forward), then the sharded op runs on the mesh and its outputs and
 * gradients are gathered and compared (f32: relative 1e-5, f64: 1e-11;
 * pointwise: bit for bit). Every op runs forward and backward in both dtypes
 * (the f64 backward once created its gradient in f32: issue 20). Meshes per
 * rank count: 1; 2 both orientations; 3 uneven, both orientations; 4 as 2x2
 * and as batch x space. Odd grid sizes, stride 2, dilation 2, every boundary
 * mode, periodic across ranks; max pooling pads zero boundaries with -inf
 * (all-negative inputs: no zero appears) and pooling takes dilation 2,
 * checked against loops by hand as well; up-sampling and the transposed
 * convolution on extents that do not split evenly (the API is a layer over
 * the tape, which has no such limit); bad input gives the same error on
 * every rank. */
#include "sg_mesh.h"
#include "sg_ops.h"
#include "sg_sharded_ops.h"
#include "sg_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The dtype of this pass; every buffer below holds elements of it. */
static sg_dtype dt = SG_DTYPE_F32;
static size_t esz(void) { return sg_dtype_size(dt); }
static const char *dtn(void) { return sg_dtype_name(dt); }
static double tol(void) { return dt == SG_DTYPE_F32 ? 1e-5 : 1e-11; }

static double get(const void *p, int64_t i) {
  return dt == SG_DTYPE_F32 ? (double)((const float *)p)[i]
                            : ((const double *)p)[i];
}
static void put(void *p, int64_t i, double v) {
  if (dt == SG_DTYPE_F32)
    ((float *)p)[i] = (float)v;
  else
    ((double *)p)[i] = v;
}

static uint64_t rs;
static double urand(void) {
  rs ^= rs >> 12;
  rs ^= rs << 25;
  rs ^= rs >> 27;
  return (double)((rs * 2685821657736338717ull) >> 11) / 4503599627370496.0 -
         1.0;
}
/* n zeroed elements of dt (at least one, so that n = 0 is a valid buffer) */
static void *zal(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), esz()); }
/* n uniform values in [-1, 1) */
static void *rnd(int64_t n, uint64_t seed) {
  rs = seed * 0x9E3779B97F4A7C15ull + 1;
  void *p = zal(n);
  for (int64_t i = 0; i < n; ++i) put(p, i, urand());
  return p;
}
static int64_t prod(const int64_t *v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= v[i];
  return p;
}
static int64_t cmpv(const char *what, const void *a, const void *b, int64_t n) {
  return dt == SG_DTYPE_F32 ? sg_test_cmp_f32(what, a, b, n, tol(), tol())
                            : sg_test_cmp_f64(what, a, b, n, tol(), tol());
}

typedef struct mesh_case {
  const char *spec;
  int shard_dim[3]; /* tensor dim split by each mesh dim (-1: none) */
} mesh_case;

static sg_mesh_t mesh;
static const mesh_case *mc;
static sg_placement mesh_pl[SG_MESH_MAX_DIMS];

static sg_tensor wrap(void *p, int nd, const int64_t *shape) {
  return sg_tensor_wrap(p, dt, sg_device_host(), nd, shape);
}

/* Scatter a global array (same on every rank) into a new ShardTensor. */
static sg_status scatter(const void *g, int nd, const int64_t *shape,
                         sg_shardtensor *x) {
  sg_status st = sg_shardtensor_create(x, mesh, dt, nd, shape, mesh_pl, NULL);
  if (st != SG_OK) return st;
  sg_tensor t = wrap((void *)g, nd, shape);
  return sg_shardtensor_scatter(x, sg_test_rank == 0 ? &t : NULL, 0);
}

static void *gather(const sg_shardtensor *x) {
  int64_t n = prod(x->global_shape, x->ndim);
  void *g = zal(n);
  sg_tensor t = wrap(g, x->ndim, x->global_shape);
  SG_CHECK_OK(sg_shardtensor_gather(x, &t, -1));
  return g;
}

static void cmp(const char *what, const sg_shardtensor *x, const void *ref,
                int bitwise) {
  SG_CHECK(x->local.dtype == dt, "%s on %s: result is %s, expected %s", what,
           mc->spec, sg_dtype_name(x->local.dtype), dtn());
  if (x->local.dtype != dt) return;
  void *g = gather(x);
  int64_t n = prod(x->global_shape, x->ndim);
  if (bitwise)
    SG_CHECK(sg_test_cmp_bytes(what, g, ref, (size_t)n * esz()) == 0,
             "%s on %s, %s (bit for bit)", what, mc->spec, dtn());
  else
    SG_CHECK(cmpv(what, g, ref, n) == 0, "%s on %s, %s", what, mc->spec, dtn());
  free(g);
}

/* A parameter gradient: the partial sums summed over the ranks, then
 * compared. */
static void cmp_param(const char *what, void *v, const void *ref, int64_t n) {
  MPI_Allreduce(MPI_IN_PLACE, v, (int)n,
                dt == SG_DTYPE_F32 ? MPI_FLOAT : MPI_DOUBLE, MPI_SUM,
                MPI_COMM_WORLD);
  SG_CHECK(cmpv(what, v, ref, n) == 0, "%s on %s, %s", what, mc->spec, dtn());
}

/* ---- window ops --------------------------------------------------------- */

typedef struct win_case {
  const char *name;
  int64_t n, c, k, h, w;
  int nsp;
  sg_window win[3]; /* per spatial dim, boundary included */
  int pool;         /* 0 conv, 1 max, 2 avg */
  int64_t d3;       /* 3-D: the outermost spatial extent (h, w follow) */
  int negative;     /* inputs in [-3, -1) (max pooling must not see a zero) */
} win_case;

/* The padding of max pooling: -inf in the margins of zero-boundary dims
 * (test-local, independent of the library's fill). */
static void fill_neg_inf(int nsp, int64_t planes, const int64_t *in,
                         const int64_t (*pad)[2], const sg_pad_mode *modes,
                         void *xp) {
  int64_t ext[3], n = planes;
  for (int d = 0; d < nsp; ++d) n *= ext[d] = in[d] + pad[d][0] + pad[d][1];
  for (int64_t i = 0; i < n; ++i) {
    int64_t r = i;
    int outside = 0;
    for (int d = nsp - 1; d >= 0; --d) {
      int64_t c = r % ext[d];
      r /= ext[d];
      outside |= modes[d] == SG_PAD_ZERO &&
                 (c < pad[d][0] || c >= pad[d][0] + in[d]);
    }
    if (outside) put(xp, i, -INFINITY);
  }
}

/* 2-D pooling with zero boundaries by hand: the window cells o*s - p + j*d
 * inside the input (max: the others are -inf; avg: they count as 0). */
static void pool_direct(const win_case *wc, const void *x, int64_t oh,
                        int64_t ow, void *y) {
  const sg_window *a = &wc->win[0], *b = &wc->win[1];
  for (int64_t p = 0; p < wc->n * wc->c; ++p)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        double acc = wc->pool == 1 ? -INFINITY : 0;
        for (int64_t u = 0; u < a->kernel; ++u)
          for (int64_t v = 0; v < b->kernel; ++v) {
            int64_t r = i * a->stride - a->pad[0] + u * a->dilation;
            int64_t q = j * b->stride - b->pad[0] + v * b->dilation;
            if (r < 0 || r >= wc->h || q < 0 || q >= wc->w) continue;
            double e = get(x, (p * wc->h + r) * wc->w + q);
            acc = wc->pool == 1 ? fmax(acc, e) : acc + e;
          }
        put(y, (p * oh + i) * ow + j,
            wc->pool == 1 ? acc : acc / (double)(a->kernel * b->kernel));
      }
}

static void run_window(const win_case *wc) {
  const int nsp = wc->nsp;
  int64_t xs[5] = {wc->n, wc->c, wc->h, wc->w, wc->d3};
  if (nsp == 3) {
    xs[2] = wc->d3;
    xs[3] = wc->h;
    xs[4] = wc->w;
  }
  const int nd = 2 + nsp;
  const int64_t nx = prod(xs, nd);
  void *x = rnd(nx, 1), *w = NULL, *b = rnd(wc->k, 3);
  if (wc->negative)
    for (int64_t i = 0; i < nx; ++i) put(x, i, get(x, i) - 2);
  int64_t ksz = 1;
  for (int d = 0; d < nsp; ++d) ksz *= wc->win[d].kernel;
  int64_t nw = wc->k * wc->c * ksz;
  if (!wc->pool) w = rnd(nw, 2);
  /* one process: pad, kernel, backward, pad adjoint */
  int64_t pad[3][2], padded[3], out[3], npad = wc->n * wc->c;
  sg_pad_mode modes[3];
  sg_conv_desc cd = {.nsp = nsp,
                     .batch = wc->n,
                     .cin = wc->c,
                     .cout = wc->pool ? wc->c : wc->k};
  for (int d = 0; d < nsp; ++d) {
    modes[d] = wc->win[d].boundary;
    pad[d][0] = pad[d][1] = wc->win[d].pad[0];
    padded[d] = xs[2 + d] + 2 * pad[d][0];
    npad *= padded[d];
    cd.in[d] = padded[d];
    cd.kernel[d] = wc->win[d].kernel;
    cd.stride[d] = wc->win[d].stride;
    cd.dilation[d] = wc->win[d].dilation;
  }
  void *xp = zal(npad);
  SG_CHECK_OK(sg_pad_forward(dt, nsp, wc->n * wc->c, xs + 2,
                             (const int64_t(*)[2])pad, modes, x, xp));
  if (wc->pool == 1)
    fill_neg_inf(nsp, wc->n * wc->c, xs + 2, (const int64_t(*)[2])pad, modes,
                 xp);
  SG_CHECK_OK(sg_conv_out_shape(&cd, out));
  int64_t ys[5] = {wc->n, cd.cout, out[0], out[1], out[2]}, ny = prod(ys, nd);
  void *y = zal(ny), *dy = rnd(ny, 4), *dxp = zal(npad), *dx = zal(nx),
       *dw = zal(nw), *db = zal(wc->k);
  sg_pool_kind pk = wc->pool == 1 ? SG_POOL_MAX : SG_POOL_AVG;
  if (wc->pool) {
    SG_CHECK_OK(sg_pool_forward(pk, &cd, dt, xp, y));
    SG_CHECK_OK(sg_pool_backward(pk, &cd, dt, xp, dy, dxp));
  } else {
    SG_CHECK_OK(sg_conv_forward(&cd, dt, xp, w, b, y, NULL));
    SG_CHECK_OK(sg_conv_backward(&cd, dt, xp, w, dy, dxp, dw, db, NULL));
  }
  SG_CHECK_OK(sg_pad_backward(dt, nsp, wc->n * wc->c, xs + 2,
                              (const int64_t(*)[2])pad, modes, dxp, dx));
  if (wc->pool && nsp == 2 && modes[0] == SG_PAD_ZERO &&
      modes[1] == SG_PAD_ZERO) {
    /* the one-process kernels against the loops by hand */
    void *yd = zal(ny);
    pool_direct(wc, x, out[0], out[1], yd);
    SG_CHECK(cmpv(wc->name, y, yd, ny) == 0,
             "%s (one process, %s) against the direct loops", wc->name, dtn());
    free(yd);
  }
  /* sharded */
  sg_shardtensor sx = {0}, sy = {0}, sdy = {0}, sdx = {0};
  sg_sharded_ctx_t ctx = NULL;
  void *dw_s = zal(nw), *db_s = zal(wc->k);
  SG_REQUIRE_OK(scatter(x, nd, xs, &sx));
  if (wc->pool)
    SG_REQUIRE_OK(sg_sharded_pool_forward(pk, &sx, wc->win, &sy, &ctx));
  else
    SG_REQUIRE_OK(
        sg_sharded_conv_forward(&sx, wc->win, wc->k, w, b, &sy, &ctx));
  SG_CHECK(sy.global_shape[2] == out[0] &&
               sy.global_shape[nd - 1] == out[nsp - 1],
           "%s: output shape", wc->name);
  cmp(wc->name, &sy, y, 0);
  if (wc->negative && wc->pool == 1) {
    sg_tensor yi = sg_shardtensor_interior(&sy);
    int64_t zeros = 0, nl = prod(sy.local_shape, nd);
    for (int64_t i = 0; i < nl; ++i)
      zeros += get(yi.data, i) == 0; /* interior is contiguous */
    SG_CHECK(zeros == 0,
             "%s on %s, %s: %lld zeros (padding) in the max of negative inputs",
             wc->name, mc->spec, dtn(), (long long)zeros);
  }
  SG_REQUIRE_OK(scatter(dy, nd, ys, &sdy));
  if (wc->pool)
    SG_REQUIRE_OK(sg_sharded_pool_backward(ctx, &sdy, &sdx));
  else
    SG_REQUIRE_OK(sg_sharded_conv_backward(ctx, w, &sdy, &sdx, dw_s, db_s));
  cmp(wc->name, &sdx, dx, 0);
  if (!wc->pool) {
    cmp_param("dw", dw_s, dw, nw);
    cmp_param("db", db_s, db, wc->k);
  }
done:
  sg_sharded_ctx_destroy(&ctx);
  sg_shardtensor_destroy(&sdx);
  sg_shardtensor_destroy(&sdy);
  sg_shardtensor_destroy(&sy);
  sg_shardtensor_destroy(&sx);
  free(x);
  free(w);
  free(b);
  free(xp);
  free(y);
  free(dy);
  free(dxp);
  free(dx);
  free(dw);
  free(db);
  free(dw_s);
  free(db_s);
}

static sg_window win1(int64_t k, int64_t s, int64_t p, int64_t d,
                      sg_boundary b) {
  sg_window w = {
      .kernel = k, .stride = s, .dilation = d, .pad = {p, p}, .boundary = b};
  return w;
}

static void test_windows(void) {
  win_case cases[] = {
      {"conv 3x3 zero",
       2,
       3,
       4,
       13,
       11,
       2,
       {win1(3, 1, 1, 1, SG_BOUNDARY_ZERO), win1(3, 1, 1, 1, SG_BOUNDARY_ZERO)},
       0,
       0,
       0},
      {"conv s2 d2 reflect/periodic",
       2,
       2,
       3,
       15,
       13,
       2,
       {win1(3, 2, 2, 2, SG_BOUNDARY_REFLECT),
        win1(3, 2, 2, 2, SG_BOUNDARY_PERIODIC)},
       0,
       0,
       0},
      {"conv 5x3 replicate/periodic",
       1,
       2,
       2,
       12,
       9,
       2,
       {win1(5, 1, 2, 1, SG_BOUNDARY_REPLICATE),
        win1(3, 1, 1, 1, SG_BOUNDARY_PERIODIC)},
       0,
       0,
       0},
      {"conv s2 valid",
       2,
       3,
       2,
       17,
       14,
       2,
       {win1(3, 2, 0, 1, SG_BOUNDARY_ZERO), win1(2, 2, 0, 1, SG_BOUNDARY_ZERO)},
       0,
       0,
       0},
      {"maxpool k3 s2 p1",
       2,
       3,
       0,
       13,
       12,
       2,
       {win1(3, 2, 1, 1, SG_BOUNDARY_REPLICATE),
        win1(3, 2, 1, 1, SG_BOUNDARY_PERIODIC)},
       1,
       0,
       0},
      {"avgpool k2 s2",
       2,
       2,
       0,
       12,
       10,
       2,
       {win1(2, 2, 0, 1, SG_BOUNDARY_ZERO), win1(2, 2, 0, 1, SG_BOUNDARY_ZERO)},
       2,
       0,
       0},
      {"conv3d s2 d2 periodic/reflect/zero",
       2,
       2,
       3,
       9,
       5,
       3,
       {win1(3, 2, 1, 1, SG_BOUNDARY_PERIODIC),
        win1(3, 1, 2, 2, SG_BOUNDARY_REFLECT),
        win1(2, 1, 0, 1, SG_BOUNDARY_ZERO)},
       0,
       11,
       0},
      {"maxpool3d k3 s2",
       1,
       2,
       0,
       8,
       6,
       3,
       {win1(3, 2, 1, 1, SG_BOUNDARY_REPLICATE),
        win1(3, 2, 1, 1, SG_BOUNDARY_ZERO), win1(2, 2, 0, 1, SG_BOUNDARY_ZERO)},
       1,
       9,
       0},
      /* zero padding of max pooling is -inf; dilation 2 (issue 20) */
      {"maxpool k3 s1 p1 zero, negative",
       2,
       2,
       0,
       13,
       11,
       2,
       {win1(3, 1, 1, 1, SG_BOUNDARY_ZERO), win1(3, 1, 1, 1, SG_BOUNDARY_ZERO)},
       1,
       0,
       1},
      {"maxpool k3 s1 p2 d2 zero, negative",
       2,
       2,
       0,
       13,
       11,
       2,
       {win1(3, 1, 2, 2, SG_BOUNDARY_ZERO), win1(3, 2, 2, 2, SG_BOUNDARY_ZERO)},
       1,
       0,
       1},
      {"maxpool k2 s2 p1 d2 zero/periodic",
       1,
       3,
       0,
       14,
       12,
       2,
       {win1(2, 2, 1, 2, SG_BOUNDARY_ZERO),
        win1(3, 1, 2, 2, SG_BOUNDARY_PERIODIC)},
       1,
       0,
       1},
      {"avgpool k3 s2 p2 d2 zero",
       2,
       2,
       0,
       13,
       11,
       2,
       {win1(3, 2, 2, 2, SG_BOUNDARY_ZERO), win1(3, 1, 1, 2, SG_BOUNDARY_ZERO)},
       2,
       0,
       1},
      {"maxpool3d k2 d2 p1 zero",
       1,
       2,
       0,
       7,
       6,
       3,
       {win1(2, 1, 1, 2, SG_BOUNDARY_ZERO),
        win1(2, 2, 1, 2, SG_BOUNDARY_REFLECT),
        win1(3, 1, 1, 1, SG_BOUNDARY_ZERO)},
       1,
       9,
       1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    run_window(&cases[i]);
}

/* ---- pointwise, norm, loss ------------------------------------------------ */

static void test_pointwise(void) {
  const int64_t xs[4] = {2, 3, 11, 9}, n = prod(xs, 4);
  void *x = rnd(n, 5), *b = rnd(n, 6), *dy = rnd(n, 7);
  void *y = zal(n), *dx = zal(n), *da = zal(n), *dbb = zal(n);
  sg_shardtensor sx = {0}, sb = {0}, sdy = {0}, sy = {0}, sdx = {0}, sda = {0},
                 sdb = {0};
  SG_REQUIRE_OK(scatter(x, 4, xs, &sx));
  SG_REQUIRE_OK(scatter(b, 4, xs, &sb));
  SG_REQUIRE_OK(scatter(dy, 4, xs, &sdy));
  for (int act = 0; act < SG_ACT_COUNT; ++act) {
    SG_CHECK_OK(sg_act_forward((sg_act)act, dt, n, x, y));
    SG_CHECK_OK(sg_act_backward((sg_act)act, dt, n, x, dy, dx));
    SG_REQUIRE_OK(sg_sharded_act_forward((sg_act)act, &sx, &sy));
    SG_REQUIRE_OK(sg_sharded_act_backward((sg_act)act, &sx, &sdy, &sdx));
    cmp(sg_act_name((sg_act)act), &sy, y, 1);
    cmp(sg_act_name((sg_act)act), &sdx, dx, 1);
    sg_shardtensor_destroy(&sy);
    sg_shardtensor_destroy(&sdx);
  }
  SG_CHECK_OK(sg_binary_forward(SG_BINARY_MUL, dt, n, x, b, y));
  SG_CHECK_OK(sg_binary_backward(SG_BINARY_MUL, dt, n, x, b, dy, da, dbb));
  SG_REQUIRE_OK(sg_sharded_binary_forward(SG_BINARY_MUL, &sx, &sb, &sy));
  SG_REQUIRE_OK(
      sg_sharded_binary_backward(SG_BINARY_MUL, &sx, &sb, &sdy, &sda, &sdb));
  cmp("mul", &sy, y, 1);
  cmp("mul da", &sda, da, 1);
  cmp("mul db", &sdb, dbb, 1);
  /* channel-wise linear and bias-add */
  {
    void *w = rnd(5 * 3, 60), *bb = rnd(5, 61), *bc = rnd(3, 62);
    const int64_t ls[4] = {2, 5, 11, 9}, nl = prod(ls, 4);
    void *yl = zal(nl), *dyl = rnd(nl, 63), *dxl = zal(n);
    void *dw = zal(15), *dbl = zal(5), *dws = zal(15), *dbs = zal(5),
         *dbc = zal(3), *dbcs = zal(3);
    SG_CHECK_OK(sg_linear_forward(dt, 2, 3, 5, 99, x, w, bb, yl));
    SG_CHECK_OK(sg_linear_backward(dt, 2, 3, 5, 99, x, w, dyl, dxl, dw, dbl));
    sg_shardtensor sl = {0}, sdl = {0}, sdxl = {0};
    SG_CHECK_OK(sg_sharded_linear_forward(&sx, 5, w, bb, &sl));
    cmp("linear", &sl, yl, 0);
    SG_CHECK_OK(scatter(dyl, 4, ls, &sdl));
    SG_CHECK_OK(sg_sharded_linear_backward(&sx, w, &sdl, &sdxl, dws, dbs));
    cmp("linear dx", &sdxl, dxl, 0);
    cmp_param("linear dw", dws, dw, 15);
    cmp_param("linear db", dbs, dbl, 5);
    SG_CHECK_OK(sg_bias_forward(dt, 2, 3, 99, x, bc, y));
    SG_CHECK_OK(sg_bias_backward(dt, 2, 3, 99, dy, dbc));
    sg_shardtensor_destroy(&sy);
    SG_CHECK_OK(sg_sharded_bias_forward(&sx, bc, &sy));
    cmp("bias", &sy, y, 1);
    SG_CHECK_OK(sg_sharded_bias_backward(&sdy, dbcs));
    cmp_param("bias db", dbcs, dbc, 3);
    sg_shardtensor_destroy(&sl);
    sg_shardtensor_destroy(&sdl);
    sg_shardtensor_destroy(&sdxl);
    free(w);
    free(bb);
    free(bc);
    free(yl);
    free(dyl);
    free(dxl);
    free(dw);
    free(dbl);
    free(dws);
    free(dbs);
    free(dbc);
    free(dbcs);
  }
  /* shape mismatch: the same error everywhere */
  sg_shardtensor small = {0}, tmp = {0};
  const int64_t ss[4] = {2, 3, 11, 8};
  void *z = rnd(prod(ss, 4), 8);
  SG_REQUIRE_OK(scatter(z, 4, ss, &small));
  SG_CHECK_STATUS(sg_sharded_binary_forward(SG_BINARY_ADD, &sx, &small, &tmp),
                  SG_ERR_SHAPE);
  sg_shardtensor_destroy(&small);
  free(z);
done:
  sg_shardtensor_destroy(&sx);
  sg_shardtensor_destroy(&sb);
  sg_shardtensor_destroy(&sdy);
  sg_shardtensor_destroy(&sy);
  sg_shardtensor_destroy(&sdx);
  sg_shardtensor_destroy(&sda);
  sg_shardtensor_destroy(&sdb);
  free(x);
  free(b);
  free(dy);
  free(y);
  free(dx);
  free(da);
  free(dbb);
}

static void test_norm(void) {
  const int64_t xs[4] = {2, 6, 9, 7}, n = prod(xs, 4);
  const char *names[] = {"batchnorm", "instancenorm", "groupnorm", "layernorm"};
  for (int kind = 0; kind < 4; ++kind) {
    void *x = rnd(n, 10 + kind), *g = rnd(6, 20), *be = rnd(6, 21),
         *dy = rnd(n, 22);
    for (int64_t i = 0; i < n; ++i) put(x, i, 2 * get(x, i) + 0.5);
    sg_norm_desc d = {.kind = (sg_norm_kind)kind,
                      .batch = 2,
                      .channels = 6,
                      .spatial = 63,
                      .groups = 3,
                      .eps = 1e-5};
    int64_t nstat = 0;
    sg_norm_nstat(&d, &nstat);
    sg_moments *stv = calloc((size_t)nstat, sizeof *stv);
    double *sums = calloc((size_t)(2 * nstat), sizeof *sums);
    void *y = zal(n), *dx = zal(n), *dg = zal(6), *db = zal(6), *dgs = zal(6),
         *dbs = zal(6);
    SG_CHECK_OK(sg_norm_stats(&d, dt, x, stv));
    SG_CHECK_OK(sg_norm_forward(&d, dt, x, stv, g, be, y));
    SG_CHECK_OK(sg_norm_backward_sums(&d, dt, x, stv, g, dy, sums));
    SG_CHECK_OK(sg_norm_backward(&d, dt, x, stv, g, dy, sums, dx, dg, db));
    sg_shardtensor sx = {0}, sy = {0}, sdy = {0}, sdx = {0};
    sg_sharded_ctx_t ctx = NULL;
    SG_REQUIRE_OK(scatter(x, 4, xs, &sx));
    SG_REQUIRE_OK(scatter(dy, 4, xs, &sdy));
    SG_REQUIRE_OK(sg_sharded_norm_forward(&d, &sx, g, be, &sy, &ctx));
    SG_REQUIRE_OK(sg_sharded_norm_backward(ctx, g, &sdy, &sdx, dgs, dbs));
    cmp(names[kind], &sy, y, 0);
    cmp(names[kind], &sdx, dx, 0);
    cmp_param("dgamma", dgs, dg, 6);
    cmp_param("dbeta", dbs, db, 6);
  done:
    sg_sharded_ctx_destroy(&ctx);
    sg_shardtensor_destroy(&sx);
    sg_shardtensor_destroy(&sy);
    sg_shardtensor_destroy(&sdy);
    sg_shardtensor_destroy(&sdx);
    free(x);
    free(g);
    free(be);
    free(dy);
    free(stv);
    free(sums);
    free(y);
    free(dx);
    free(dg);
    free(db);
    free(dgs);
    free(dbs);
  }
}

static void test_loss(void) {
  const int64_t xs[4] = {3, 2, 9, 11}, n = prod(xs, 4);
  const char *names[] = {"sum", "mean", "mse", "rel_l2"};
  void *p = rnd(n, 30), *t = rnd(n, 31);
  for (int kind = 0; kind < 4; ++kind) {
    double part[8], v = 0, vs = 0;
    void *dp = zal(n), *dt_ = zal(n);
    SG_CHECK_OK(sg_loss_partial((sg_loss_kind)kind, dt, 3, n, p, t, part));
    SG_CHECK_OK(sg_loss_finish((sg_loss_kind)kind, 3, part, &v));
    SG_CHECK_OK(sg_loss_backward((sg_loss_kind)kind, dt, 3, n, p, t, part, 0.5,
                                 dp, kind >= 2 ? dt_ : NULL));
    sg_shardtensor sp = {0}, st = {0}, sdp = {0}, sdt = {0};
    sg_sharded_ctx_t ctx = NULL;
    SG_REQUIRE_OK(scatter(p, 4, xs, &sp));
    SG_REQUIRE_OK(scatter(t, 4, xs, &st));
    SG_REQUIRE_OK(
        sg_sharded_loss_forward((sg_loss_kind)kind, &sp, &st, &vs, &ctx));
    /* the tape's loss is in the dtype of p: f32 rounds it */
    SG_CHECK(
        fabs(vs - v) <= (dt == SG_DTYPE_F32 ? 1e-6 : 1e-12) * (1 + fabs(v)),
        "%s on %s, %s: %.17g vs %.17g", names[kind], mc->spec, dtn(), vs, v);
    double vmax = vs, vmin = vs;
    MPI_Allreduce(MPI_IN_PLACE, &vmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &vmin, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    SG_CHECK(vmax == vmin, "%s: the same bits on every rank", names[kind]);
    SG_REQUIRE_OK(
        sg_sharded_loss_backward(ctx, 0.5, &sdp, kind >= 2 ? &sdt : NULL));
    cmp(names[kind], &sdp, dp, 0);
    if (kind >= 2) cmp(names[kind], &sdt, dt_, 0);
  done:
    sg_sharded_ctx_destroy(&ctx);
    sg_shardtensor_destroy(&sp);
    sg_shardtensor_destroy(&st);
    sg_shardtensor_destroy(&sdp);
    sg_shardtensor_destroy(&sdt);
    free(dp);
    free(dt_);
  }
  free(p);
  free(t);
}

/* ---- up-sampling and transposed convolution ---------------------------------- */

static int splits_evenly(const int64_t *xs) {
  for (int m = 0; m < sg_mesh_ndims(mesh); ++m)
    if (mesh_pl[m].kind == SG_PLACEMENT_SHARD && mesh_pl[m].dim >= 2 &&
        xs[mesh_pl[m].dim] % sg_mesh_dim_size(mesh, m))
      return 0;
  return 1;
}

static void test_scaled(void) {
  const int64_t xs[4] = {2, 3, 11, 10}, nx = prod(xs, 4),
                planes = 6; /* 11: uneven on 2 and 4 */
  const int even = splits_evenly(xs);
  void *x = rnd(nx, 50);
  sg_shardtensor sx = {0};
  SG_REQUIRE_OK(scatter(x, 4, xs, &sx));
  for (int kind = 0; kind < 3; ++kind) { /* nearest, linear, convt */
    const char *name = kind == 0   ? "upsample nearest"
                       : kind == 1 ? "upsample bilinear"
                                   : "convt 2x2";
    const int64_t sc[2] = {kind == 0 ? 3 : 2, 2};
    const int64_t cout = 4;
    int64_t ys[4] = {2, kind == 2 ? cout : 3, xs[2] * sc[0], xs[3] * sc[1]},
            ny = prod(ys, 4);
    void *y = zal(ny), *dy = rnd(ny, 51), *dx = zal(nx);
    void *w = rnd(3 * cout * 4, 52), *b = rnd(cout, 53);
    void *dw = zal(48), *db = zal(4), *dws = zal(48), *dbs = zal(4);
    if (kind == 0) {
      SG_CHECK_OK(sg_upsample_forward(SG_UPSAMPLE_NEAREST, 2, planes, xs + 2,
                                      sc, dt, x, y));
      SG_CHECK_OK(sg_upsample_backward(SG_UPSAMPLE_NEAREST, 2, planes, xs + 2,
                                       sc, dt, dy, dx));
    } else if (kind == 1) {
      int64_t pad[2][2] = {{1, 1}, {1, 1}}, in[2] = {xs[2] + 2, xs[3] + 2};
      sg_pad_mode m[2] = {SG_PAD_REPLICATE, SG_PAD_REPLICATE};
      void *xp = zal(planes * in[0] * in[1]),
           *dxp = zal(planes * in[0] * in[1]);
      SG_CHECK_OK(sg_pad_forward(dt, 2, planes, xs + 2,
                                 (const int64_t(*)[2])pad, m, x, xp));
      SG_CHECK_OK(sg_upsample_forward(SG_UPSAMPLE_LINEAR, 2, planes, in, sc, dt,
                                      xp, y));
      SG_CHECK_OK(sg_upsample_backward(SG_UPSAMPLE_LINEAR, 2, planes, in, sc,
                                       dt, dy, dxp));
      SG_CHECK_OK(sg_pad_backward(dt, 2, planes, xs + 2,
                                  (const int64_t(*)[2])pad, m, dxp, dx));
      free(xp);
      free(dxp);
    } else {
      sg_conv_desc cd = {.nsp = 2,
                         .batch = 2,
                         .cin = 3,
                         .cout = cout,
                         .in = {xs[2], xs[3]},
                         .kernel = {2, 2}};
      SG_CHECK_OK(sg_convt_forward(&cd, dt, x, w, b, y));
      SG_CHECK_OK(sg_convt_backward(&cd, dt, x, w, dy, dx, dw, db));
    }
    sg_shardtensor sy = {0}, sdy = {0}, sdx = {0};
    sg_sharded_ctx_t ctx = NULL;
    sg_status st = kind == 2
                       ? sg_sharded_convt_forward(&sx, sc, cout, w, b, &sy,
                                                  &ctx)
                       : sg_sharded_upsample_forward(kind == 0
                                                         ? SG_UPSAMPLE_NEAREST
                                                         : SG_UPSAMPLE_LINEAR,
                                                     &sx, sc, &sy, &ctx);
    /* uneven splits too (the tape's output partition; the old API refused
     * them with NOT_SUPPORTED: issue 20) */
    SG_CHECK(st == SG_OK, "%s on %s%s, %s: %s", name, mc->spec,
             even ? "" : " (uneven)", dtn(), sg_last_error());
    if (st == SG_OK) {
      cmp(name, &sy, y, 0);
      SG_CHECK_OK(scatter(dy, 4, ys, &sdy));
      st = kind == 2 ? sg_sharded_convt_backward(ctx, w, &sdy, &sdx, dws, dbs)
                     : sg_sharded_upsample_backward(ctx, &sdy, &sdx);
      SG_CHECK(st == SG_OK, "%s backward on %s, %s: %s", name, mc->spec, dtn(),
               sg_last_error());
      if (st == SG_OK) cmp(name, &sdx, dx, 0);
      if (kind == 2) {
        cmp_param("convt dw", dws, dw, 48);
        cmp_param("convt db", dbs, db, 4);
      }
    }
    sg_sharded_ctx_destroy(&ctx);
    sg_shardtensor_destroy(&sy);
    sg_shardtensor_destroy(&sdy);
    sg_shardtensor_destroy(&sdx);
    free(y);
    free(dy);
    free(dx);
    free(w);
    free(b);
    free(dw);
    free(db);
    free(dws);
    free(dbs);
  }
done:
  sg_shardtensor_destroy(&sx);
  free(x);
}

/* ---- errors ---------------------------------------------------------------- */

static void test_errors(void) {
  /* a shard thinner than the halo: H = ranks along h, kernel 5 (halo 2) */
  int ph = 1;
  for (int m = 0; m < sg_mesh_ndims(mesh); ++m)
    if (mesh_pl[m].kind == SG_PLACEMENT_SHARD && mesh_pl[m].dim == 2)
      ph = sg_mesh_dim_size(mesh, m);
  sg_shardtensor sx = {0}, sy = {0};
  sg_sharded_ctx_t ctx = NULL;
  if (ph > 1) {
    const int64_t xs[4] = {1, 1, ph, 6};
    void *x = rnd(prod(xs, 4), 40), *w = zal(25);
    for (int i = 0; i < 25; ++i) put(w, i, 1);
    SG_REQUIRE_OK(scatter(x, 4, xs, &sx));
    sg_window win[2] = {win1(5, 1, 2, 1, SG_BOUNDARY_ZERO),
                        win1(5, 1, 2, 1, SG_BOUNDARY_ZERO)};
    SG_CHECK_STATUS(sg_sharded_conv_forward(&sx, win, 1, w, NULL, &sy, &ctx),
                    SG_ERR_HALO);
    SG_CHECK(ctx == NULL, "no context after an error");
    sg_shardtensor_destroy(&sx);
    free(x);
    free(w);
  }
  /* a placement the op does not accept: channels split */
  sg_placement pl[SG_MESH_MAX_DIMS];
  for (int m = 0; m < SG_MESH_MAX_DIMS; ++m)
    pl[m] = m ? sg_replicate() : sg_shard(1);
  const int64_t xs[4] = {1, 4, 5, 5};
  SG_REQUIRE_OK(sg_shardtensor_create(&sx, mesh, dt, 4, xs, pl, NULL));
  double w[4 * 4 * 9] = {0};
  sg_window win[2] = {win1(3, 1, 1, 1, SG_BOUNDARY_ZERO),
                      win1(3, 1, 1, 1, SG_BOUNDARY_ZERO)};
  SG_CHECK_STATUS(sg_sharded_conv_forward(&sx, win, 4, w, NULL, &sy, &ctx),
                  SG_ERR_INVALID_ARG);
  sg_norm_desc nd = {.kind = SG_NORM_BATCH, .eps = 1e-5};
  SG_CHECK_STATUS(sg_sharded_norm_forward(&nd, &sx, NULL, NULL, &sy, &ctx),
                  SG_ERR_INVALID_ARG);
  /* no input at all (nothing to agree over: a local error, not a crash) */
  SG_CHECK_STATUS(sg_sharded_conv_forward(NULL, win, 4, w, NULL, &sy, &ctx),
                  SG_ERR_INVALID_ARG);
  SG_CHECK_STATUS(sg_sharded_pool_forward(SG_POOL_MAX, NULL, win, &sy, &ctx),
                  SG_ERR_INVALID_ARG);
  SG_CHECK(ctx == NULL, "no context after an error");
  /* an upstream gradient of the other dtype: refused on every rank */
  {
    sg_shardtensor sr = {0}, sp = {0}, sdy = {0}, sdx = {0};
    const sg_dtype other = dt == SG_DTYPE_F32 ? SG_DTYPE_F64 : SG_DTYPE_F32;
    const int64_t rsh[4] = {1, 2, 6, 6}, psh[4] = {1, 2, 3, 3};
    sg_window pw[2] = {win1(2, 2, 0, 1, SG_BOUNDARY_ZERO),
                       win1(2, 2, 0, 1, SG_BOUNDARY_ZERO)};
    SG_CHECK_OK(sg_shardtensor_create(&sr, mesh, dt, 4, rsh, mesh_pl, NULL));
    sg_status st = sg_sharded_pool_forward(SG_POOL_AVG, &sr, pw, &sp, &ctx);
    SG_CHECK(st == SG_OK, "pool forward: %s", sg_last_error());
    if (st == SG_OK) {
      SG_CHECK_OK(
          sg_shardtensor_create(&sdy, mesh, other, 4, psh, mesh_pl, NULL));
      SG_CHECK_STATUS(sg_sharded_pool_backward(ctx, &sdy, &sdx),
                      SG_ERR_INVALID_ARG);
    }
    sg_sharded_ctx_destroy(&ctx);
    sg_shardtensor_destroy(&sr);
    sg_shardtensor_destroy(&sp);
    sg_shardtensor_destroy(&sdy);
    sg_shardtensor_destroy(&sdx);
  }
done:
  sg_shardtensor_destroy(&sx);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  static const mesh_case m1[] = {{"h=1,w=1", {2, 3, -1}}};
  static const mesh_case m2[] = {{"h=2,w=1", {2, 3, -1}},
                                 {"h=1,w=2", {2, 3, -1}},
                                 {"dp=2", {0, -1, -1}}};
  static const mesh_case m3[] = {{"h=3,w=1", {2, 3, -1}},
                                 {"h=1,w=3", {2, 3, -1}}};
  /* dp=2,fsdp=2: the batch split by two mesh dims (HSDP), nested; batch
   * norm statistics summed over both */
  static const mesh_case m4[] = {{"h=2,w=2", {2, 3, -1}},
                                 {"dp=2,h=2", {0, 2, -1}},
                                 {"dp=2,fsdp=2", {0, 0, -1}}};
  const mesh_case *list = m1;
  int count = 1;
  if (sg_test_size == 2) {
    list = m2;
    count = 3;
  }
  if (sg_test_size == 3) {
    list = m3;
    count = 2;
  }
  if (sg_test_size == 4) {
    list = m4;
    count = 3;
  }
  if (sg_test_size > 4) {
    sg_test_skip("meshes are defined for 1..4 ranks");
    count = 0;
  }
  for (int i = 0; i < count; ++i) {
    mc = &list[i];
    mesh = NULL;
    sg_status st = sg_mesh_create(MPI_COMM_WORLD, mc->spec, &mesh);
    SG_CHECK_OK(st);
    if (st != SG_OK) continue;
    for (int m = 0; m < SG_MESH_MAX_DIMS; ++m)
      mesh_pl[m] = m < 3 && mc->shard_dim[m] >= 0 ? sg_shard(mc->shard_dim[m])
                                                  : sg_replicate();
    for (int k = 0; k < 2; ++k) {
      dt = k ? SG_DTYPE_F64 : SG_DTYPE_F32;
      test_windows();
      test_pointwise();
      test_scaled();
      test_norm();
      test_loss();
      test_errors();
    }
    sg_mesh_destroy(&mesh);
  }
  return sg_test_finish();
}
