/* The window exchange of a sharded windowed op on device variables
 * (models/ag_halo.c: issue 22), proven on the host with the faked device
 * (ag_fake_cuda: "CUDA" tensors are host memory, the comm layer moves them
 * through MPI; on a GPU NCCL takes the device buffers by their pointer).
 *
 * A user op with a window (a fixed 2-D stencil with up-sampling: y[i, j] =
 * sum_ab c_ab x[s0 (i / u0) + d0 a, s1 (j / u1) + d1 b] over the box the
 * tape gives it, its backward the transpose) whose "CUDA" entries are its
 * host code and count their calls, so only the tape's exchange differs
 * between the runs. x (2, 2, 9, 5) split over a mesh "h=H,w=W" (P = 1..4:
 * 1x1, 2x1, 3x1, 4x1 and 2x2: corners; uneven shards; and the batch over
 * 3 or 4 ranks: empty shards), windows with every
 * boundary kind (zero, reflect, replicate, periodic over the mesh and the
 * local wrap), asymmetric padding, stride 2 (negative halos), up-sampling 2
 * (a cropped output). Each case on host variables and on faked cuda:0
 * variables: y and dx the same bits (f64 and f32), the device run on the
 * device entries only with y and dx on cuda:0; and the adjoint identity
 * sum <y, dy> = sum <x, dx> over the ranks (f64, 1e-12): the device halo's
 * adjoint is the transpose of its forward. The verdict is reduced over
 * the ranks (sg_test_finish). --gpu: conv on a split domain on real
 * device buffers over NCCL against host variables (gpu_case;
 * tools/test-gpu). */
#include "autograd_impl.h" /* ag_fake_cuda */
#include "sg_autograd.h"
#include "sg_decomp.h"
#include "sg_mesh.h"
#include "sg_shardtensor.h"
#include "sg_test.h"
#include "sg_threads.h" /* sg_cuda_device_local */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ND = 4 };
static const int64_t G[ND] = {2, 2, 9, 5};
static int ncalls[2]; /* user-op kernel calls: [on cuda] */

static double ld(const void *p, sg_dtype dt, int64_t i) {
  return dt == SG_DTYPE_F32 ? (double)((const float *)p)[i]
                            : ((const double *)p)[i];
}
static void stv(void *p, sg_dtype dt, int64_t i, double v) {
  if (dt == SG_DTYPE_F32)
    ((float *)p)[i] = (float)v;
  else
    ((double *)p)[i] = v;
}

static double cw(int64_t a, int64_t b) {
  return 0.125 * (double)(3 * a + b + 1) - 0.3;
}

/* The stencil's geometry on the box xb (n, c, b0, b1): natural outputs. */
static void geom(const sg_node *node, const sg_tensor *xb, int64_t *no) {
  for (int d = 0; d < 2; ++d) {
    const sg_window w = node->win[d];
    no[d] = w.up *
            ((xb->shape[2 + d] - w.dilation * (w.kernel - 1) - 1) / w.stride +
             1);
  }
}

static int64_t src(const sg_window *w, int64_t i, int64_t a) {
  return w->stride * (i / w->up) + w->dilation * a;
}

static sg_status st_fwd(sg_node *node) {
  const sg_tensor *x = &node->xin;
  const sg_dtype dt = x->dtype;
  ncalls[node->device.kind == SG_DEVICE_CUDA]++;
  int64_t no[2], shape[ND] = {x->shape[0], x->shape[1], 0, 0};
  geom(node, x, no);
  shape[2] = no[0], shape[3] = no[1];
  sg_status st = sg_node_alloc_out_uninit(node, 0, ND, shape);
  if (st != SG_OK) return st;
  const sg_window *w = node->win;
  const int64_t B0 = x->shape[2], B1 = x->shape[3];
  void *y = node->out[0]->value.data;
  for (int64_t p = 0; p < x->shape[0] * x->shape[1]; ++p)
    for (int64_t i = 0; i < no[0]; ++i)
      for (int64_t j = 0; j < no[1]; ++j) {
        double s = 0;
        for (int64_t a = 0; a < w[0].kernel; ++a)
          for (int64_t b = 0; b < w[1].kernel; ++b)
            s += cw(a, b) *
                 ld(x->data, dt,
                    (p * B0 + src(&w[0], i, a)) * B1 + src(&w[1], j, b));
        stv(y, dt, (p * no[0] + i) * no[1] + j, s);
      }
  return SG_OK;
}

/* gin (the box's gradient, zeroed by the tape) += the transpose */
static sg_status st_bwd(sg_node *node) {
  const sg_tensor *x = &node->xin, *dy = &node->out[0]->grad;
  const sg_dtype dt = x->dtype;
  ncalls[node->device.kind == SG_DEVICE_CUDA]++;
  void *gx = node->gin[0];
  if (!gx) return SG_OK;
  int64_t no[2];
  geom(node, x, no);
  const sg_window *w = node->win;
  const int64_t B0 = x->shape[2], B1 = x->shape[3];
  for (int64_t p = 0; p < x->shape[0] * x->shape[1]; ++p)
    for (int64_t i = 0; i < no[0]; ++i)
      for (int64_t j = 0; j < no[1]; ++j) {
        const double g = ld(dy->data, dt, (p * no[0] + i) * no[1] + j);
        for (int64_t a = 0; a < w[0].kernel; ++a)
          for (int64_t b = 0; b < w[1].kernel; ++b) {
            const int64_t k = (p * B0 + src(&w[0], i, a)) * B1 +
                              src(&w[1], j, b);
            stv(gx, dt, k, ld(gx, dt, k) + cw(a, b) * g);
          }
      }
  return SG_OK;
}

static const sg_op_def stencil_op = {
    .name = "test_stencil",
    .slots = {SG_SLOT_ACT},
    .forward = st_fwd,
    .backward = st_bwd,
    .rule = {.windowed_input = 0,
             .accepts = SG_ACCEPT_REPLICATE | SG_ACCEPT_SHARD_BATCH |
                        SG_ACCEPT_SHARD_SPATIAL,
             .out = SG_OUT_LIKE_INPUT},
    .forward_cuda = st_fwd,
    .backward_cuda = st_bwd};

typedef struct ctx {
  sg_mesh_t mesh;
  sg_placement pl[SG_MESH_MAX_DIMS];
  int64_t off[ND], shape[ND], nx;
} ctx;

typedef struct result {
  double y[512], dx[512], ydy, xdx;
  int64_t ny;
  int on_cuda;
} result;

static int64_t gidx(const ctx *c, int64_t l) {
  int64_t g = 0, r = l, st = 1;
  for (int d = ND - 1; d >= 0; --d) {
    g += (r % c->shape[d] + c->off[d]) * st;
    r /= c->shape[d];
    st *= G[d];
  }
  return g;
}

static sg_status run(const ctx *c, sg_dtype dt, int cuda, const sg_window *win,
                     result *r) {
  sg_status st = SG_OK;
  const sg_device dev = {cuda ? SG_DEVICE_CUDA : SG_DEVICE_HOST, 0};
  sg_tape_t tape = NULL;
  sg_var x, *y = NULL;
  memset(&x, 0, sizeof x);
  const size_t es = sg_dtype_size(dt);
  void *xb = calloc((size_t)c->nx + 1, es), *gy = calloc(512, es);
  if (!xb || !gy) SG_RAISE(SG_ERR_ALLOC, "run");
  for (int64_t l = 0; l < c->nx; ++l)
    stv(xb, dt, l, 0.07 * (double)(gidx(c, l) % 17) - 0.5);
  ag_fake_cuda = cuda;
  SG_TRY(sg_var_init(&x, "x", dt, ND, c->shape, xb, 1));
  SG_TRY(sg_var_set_sharding(&x, c->mesh, c->pl, G));
  if (cuda) SG_TRY(sg_var_set_device(&x, dev));
  SG_TRY(sg_tape_create(&tape));
  SG_TRY(sg_tape_apply(tape, &stencil_op, 1, (sg_var *[]){&x}, 1, win, NULL, 0,
                       &y));
  r->ny = sg_tensor_numel(&y->value);
  if (r->ny > 512)
    SG_RAISE(SG_ERR_SHAPE, "test: %lld outputs", (long long)r->ny);
  r->ydy = r->xdx = 0;
  for (int64_t l = 0; l < r->ny; ++l) {
    r->y[l] = ld(y->value.data, dt, l);
    stv(gy, dt, l,
        0.03 * (double)((l * 7 + sg_mesh_rank(c->mesh) * 5) % 11) - 0.1);
    r->ydy += r->y[l] * ld(gy, dt, l);
  }
  r->on_cuda = y->value.device.kind == SG_DEVICE_CUDA;
  const sg_tensor seed = sg_tensor_wrap(gy, dt, dev, y->value.ndim,
                                        y->value.shape);
  SG_TRY(sg_tape_backward_from(tape, 1, &y, &seed));
  r->on_cuda &= x.grad.device.kind == SG_DEVICE_CUDA;
  for (int64_t l = 0; l < c->nx; ++l) {
    r->dx[l] = ld(x.grad.data, dt, l);
    r->xdx += ld(xb, dt, l) * r->dx[l];
  }
fail:
  sg_tape_destroy(&tape);
  sg_var_release(&x);
  ag_fake_cuda = 0;
  free(xb), free(gy);
  return st;
}

static void test_case(const ctx *c, const char *name, const sg_window *win) {
  static result hr, dr;
  for (int k = 0; k < 2; ++k) {
    const sg_dtype dt = k ? SG_DTYPE_F32 : SG_DTYPE_F64;
    const char *dts = sg_dtype_name(dt);
    memset(&hr, 0, sizeof hr), memset(&dr, 0, sizeof dr);
    SG_CHECK_OK(run(c, dt, 0, win, &hr));
    const int before[2] = {ncalls[0], ncalls[1]};
    SG_CHECK_OK(run(c, dt, 1, win, &dr));
    SG_CHECK(ncalls[0] == before[0] && ncalls[1] - before[1] == 2,
             "%s %s: device run: %d host and %d cuda calls (want 0, 2)", name,
             dts, ncalls[0] - before[0], ncalls[1] - before[1]);
    SG_CHECK(dr.on_cuda && !hr.on_cuda && dr.ny == hr.ny &&
                 (hr.ny > 0) == (c->nx > 0),
             "%s %s: y and dx on cuda:0 in the device run only", name, dts);
    for (int64_t i = 0; i < hr.ny; ++i)
      SG_CHECK(!memcmp(&dr.y[i], &hr.y[i], 8),
               "%s %s y[%lld]: device %.17g, host %.17g", name, dts,
               (long long)i, dr.y[i], hr.y[i]);
    for (int64_t i = 0; i < c->nx; ++i)
      SG_CHECK(!memcmp(&dr.dx[i], &hr.dx[i], 8),
               "%s %s dx[%lld]: device %.17g, host %.17g", name, dts,
               (long long)i, dr.dx[i], hr.dx[i]);
    if (dt == SG_DTYPE_F64) {
      double s[2] = {dr.ydy, dr.xdx};
      MPI_Allreduce(MPI_IN_PLACE, s, 2, MPI_DOUBLE, MPI_SUM,
                    sg_mesh_comm(c->mesh));
      SG_CHECK(fabs(s[0] - s[1]) <= 1e-12 * (fabs(s[0]) + 1),
               "%s: adjoint identity: <y, dy> = %.17g, <x, dx> = %.17g", name,
               s[0], s[1]);
    }
  }
  if (sg_test_rank == 0)
    printf("%s: faked cuda:0 = host, bit for bit (f64, f32); adjoint ok\n",
           name);
}

/* H x W ranks over the spatial dims; B > 0: B ranks over the batch (2
 * samples: an empty shard at B = 3, 4), the spatial dims not split. */
static void test_mesh(int H, int W, int B) {
  ctx c;
  memset(&c, 0, sizeof c);
  char spec[32];
  if (B)
    snprintf(spec, sizeof spec, "b=%d", B);
  else
    snprintf(spec, sizeof spec, "h=%d,w=%d", H, W);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &c.mesh));
  if (B)
    c.pl[0] = sg_shard(0);
  else
    c.pl[0] = sg_shard(2), c.pl[1] = sg_shard(3);
  SG_REQUIRE_OK(sg_shardtensor_box(c.mesh, ND, G, c.pl, sg_mesh_rank(c.mesh),
                                   c.off, c.shape));
  c.nx = c.shape[0] * c.shape[1] * c.shape[2] * c.shape[3];
  if (sg_test_rank == 0) printf("mesh %s\n", spec);
  const sg_boundary Z = SG_BOUNDARY_ZERO, R = SG_BOUNDARY_REFLECT,
                    E = SG_BOUNDARY_REPLICATE, P = SG_BOUNDARY_PERIODIC;
  const struct {
    const char *name;
    sg_window w[2];
  } cases[] = {
      {"k3 zero x periodic",
       {{.kernel = 3, .pad = {1, 1}, .boundary = Z},
        {.kernel = 3, .pad = {1, 1}, .boundary = P}}},
      {"k3 reflect x replicate",
       {{.kernel = 3, .pad = {1, 1}, .boundary = R},
        {.kernel = 3, .pad = {1, 1}, .boundary = E}}},
      {"k3 periodic x k3 pad (2, 0) zero",
       {{.kernel = 3, .pad = {1, 1}, .boundary = P},
        {.kernel = 3, .pad = {2, 0}, .boundary = Z}}},
      {"up 2 replicate (cropped) x k2 dilation 2 reflect",
       {{.kernel = 3, .pad = {1, 1}, .up = 2, .boundary = E},
        {.kernel = 2, .dilation = 2, .pad = {1, 1}, .boundary = R}}},
      {"k2 stride 2 x k2 stride 2 (pool)",
       {{.kernel = 2, .stride = 2, .boundary = Z},
        {.kernel = 2, .stride = 2, .boundary = Z}}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; ++i)
    test_case(&c, cases[i].name, cases[i].w);
done:
  sg_mesh_destroy(&c.mesh);
}

/* --gpu (tools/test-gpu: one rank per GPU, 1-4 ranks): conv (f64, 3x3,
 * pad 1, reflect x zero) and instance norm (its statistics merged over
 * the split) on x (2, 3, 9, 6) split over "h=P" on real device buffers,
 * NCCL on the mesh, against the same on host variables:
 * y, dx and dw within 1e-10 (cuBLAS vs the host kernels). Compile-verified
 * until a GPU machine runs it. */
static void gpu_case(void) {
  enum { NX = 2 * 3 * 9 * 6, NW = 3 * 3 * 9 };
  static const int64_t XG[ND] = {2, 3, 9, 6}, WS[4] = {3, 3, 3, 3};
  sg_mesh_t mesh = NULL;
  sg_placement pl[SG_MESH_MAX_DIMS] = {sg_shard(2)};
  int64_t off[ND], shape[ND];
  int di = -1;
  static double xh[NX], wh[NW], gh[NX], res[2][3][NX]; /* [cuda][y,dx,dw] */
  SG_REQUIRE_OK(sg_cuda_device_local(MPI_COMM_WORLD, &di));
  SG_CHECK(di >= 0, "--gpu: no CUDA device on rank %d", sg_test_rank);
  if (di < 0) goto done;
  char spec[32];
  snprintf(spec, sizeof spec, "h=%d", sg_test_size);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(sg_mesh_enable_nccl(mesh));
  SG_REQUIRE_OK(
      sg_shardtensor_box(mesh, ND, XG, pl, sg_mesh_rank(mesh), off, shape));
  const int64_t nx = shape[0] * shape[1] * shape[2] * shape[3];
  for (int64_t l = 0; l < nx; ++l)
    xh[l] = 0.01 * (double)((l + 31 * off[2]) % 23) - 0.1, gh[l] = 0.5;
  for (int i = 0; i < NW; ++i) wh[i] = 0.02 * (i % 7) - 0.05;
  const sg_window win[2] = {
      {.kernel = 3, .pad = {1, 1}, .boundary = SG_BOUNDARY_REFLECT},
      {.kernel = 3, .pad = {1, 1}}};
  int64_t ny = 0;
  for (int cuda = 0; cuda < 2; ++cuda) {
    const sg_device host = sg_device_host(),
                    d = cuda ? (sg_device){SG_DEVICE_CUDA, di} : host;
    void *xd = xh, *gd = gh, *wd = wh, *gw = NULL;
    double gwh[NW] = {0};
    sg_tape_t tape = NULL;
    sg_var x, w, *y = NULL;
    memset(&x, 0, sizeof x), memset(&w, 0, sizeof w);
    sg_status st = SG_OK;
    gw = gwh;
    if (cuda) {
      xd = gd = wd = gw = NULL;
      st = sg_malloc(d, sizeof xh, &xd);
      if (st == SG_OK) st = sg_malloc(d, sizeof gh, &gd);
      if (st == SG_OK) st = sg_malloc(d, sizeof wh, &wd);
      if (st == SG_OK) st = sg_calloc(d, sizeof wh, &gw);
      if (st == SG_OK) st = sg_memcpy(d, xd, host, xh, sizeof xh);
      if (st == SG_OK) st = sg_memcpy(d, gd, host, gh, sizeof gh);
      if (st == SG_OK) st = sg_memcpy(d, wd, host, wh, sizeof wh);
    }
    if (st == SG_OK) st = sg_var_init(&x, "x", SG_DTYPE_F64, ND, shape, xd, 1);
    if (st == SG_OK) st = sg_var_set_sharding(&x, mesh, pl, XG);
    if (st == SG_OK)
      st = sg_var_init_param(&w, "w", SG_DTYPE_F64, 4, WS, wd, gw);
    if (st == SG_OK && cuda) st = sg_var_set_device(&x, d);
    if (st == SG_OK && cuda) st = sg_var_set_device(&w, d);
    if (st == SG_OK) st = sg_tape_create(&tape);
    if (st == SG_OK) st = sg_ag_conv(tape, &x, &w, NULL, win, &y);
    const sg_norm_desc nd = {.kind = SG_NORM_INSTANCE, .eps = 1e-5};
    if (st == SG_OK) st = sg_ag_norm(tape, &nd, y, NULL, NULL, &y);
    if (st == SG_OK) {
      ny = sg_tensor_numel(&y->value);
      st = ny <= NX ? sg_memcpy(host, res[cuda][0], d, y->value.data,
                                (size_t)ny * sizeof(double))
                    : SG_ERR_SHAPE;
    }
    const sg_tensor seed = sg_tensor_wrap(gd, SG_DTYPE_F64, d, ND,
                                          y ? y->value.shape : shape);
    if (st == SG_OK) st = sg_tape_backward_from(tape, 1, &y, &seed);
    if (st == SG_OK)
      st = sg_memcpy(host, res[cuda][1], d, x.grad.data,
                     (size_t)nx * sizeof(double));
    if (st == SG_OK) st = sg_memcpy(host, res[cuda][2], d, gw, sizeof wh);
    SG_CHECK_OK(st);
    sg_tape_destroy(&tape);
    sg_var_release(&x);
    sg_var_release(&w);
    if (cuda)
      sg_free(d, &xd), sg_free(d, &gd), sg_free(d, &wd), sg_free(d, &gw);
  }
  const int64_t n[3] = {ny, nx, NW};
  for (int k = 0; k < 3; ++k)
    for (int64_t i = 0; i < n[k]; ++i)
      SG_CHECK(fabs(res[0][k][i] - res[1][k][i]) <= 1e-10,
               "--gpu: conv %s[%lld]: device %.17g, host %.17g",
               k == 0   ? "y"
               : k == 1 ? "dx"
                        : "dw",
               (long long)i, res[1][k][i], res[0][k][i]);
  if (sg_test_rank == 0)
    printf("--gpu: conv + instance norm on a split domain (%d ranks) = host\n",
           sg_test_size);
done:
  sg_mesh_destroy(&mesh);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  for (int i = 1; i < argc; ++i)
    if (!strcmp(argv[i], "--gpu")) {
      gpu_case();
      return sg_test_finish();
    }
  const int P = sg_test_size;
  test_mesh(P, 1, 0);
  if (P == 4) test_mesh(2, 2, 0);
  if (P >= 3) test_mesh(1, 1, P);
  return sg_test_finish();
}
