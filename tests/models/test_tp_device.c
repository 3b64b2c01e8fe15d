/* The tape's tensor-parallel collectives on sharded device variables
 * (models/ag_tp.c, ag_device.c: issue 22), proven on the host with the
 * faked device (ag_fake_cuda: "CUDA" tensors are host memory; the comm
 * layer sends them through MPI as host buffers, NCCL takes real device
 * buffers by their pointer).
 *
 * A mesh "dom=D,tp=T" over the P = 1..4 ranks (1x1, 1x2, 1x3, 2x2); x
 * (2, 3, 3, 5) is split over dom along dim 2 (2+1 at D = 2: uneven) and
 * replicated over tp. The TP MLP
 *   y = tp_reduce(lin(tanh(lin(tp_copy(x), W1)), sp_share(W2)))
 * with the hidden width 7 split over tp (4+3, 3+2+2, 4+3: uneven), lin and
 * tanh user ops whose "CUDA" entries are their host code (so only the tape's
 * device path and the tp ops' device entries differ), sp_share over dom;
 * backward from a seed dy. Run twice, on host variables and on faked
 * cuda:0 variables (every variable, the parameters and their gradient
 * buffers included): y, dx, dW1 and dW2 must be the same bits, in f64 and
 * f32, and the device run must have run the device entries only, with its
 * outputs and x's gradient on cuda:0. Likewise the sequence-parallel block
 * (run: tp_seq_scatter, tp_seq_allgather, tp_seq_reduce_scatter,
 * tp_seq_gather, sp_scatter on uneven token slices). A tiny tp_copy/tp_reduce pair (2
 * elements, fewer than the tp ranks: empty blocks in the fixed-order sum;
 * an empty dom shard at D = 2) likewise, and against the exact sum.
 * Then the refusals on a sharded device input: moe (host-only)
 * returns
 * SG_ERR_NOT_SUPPORTED naming the op on every rank, and nothing hangs;
 * a real device over several ranks without NCCL on the mesh (nor a
 * CUDA-aware MPI) is refused (ag_dev_comm_ok).
 * The verdict is reduced over the ranks (sg_test_finish). --gpu: the tp
 * pair on real device buffers over NCCL (gpu_case; tools/test-gpu). */
#include "autograd_impl.h" /* ag_fake_cuda */
#include "sg_autograd.h"
#include "sg_comm.h"
#include "sg_decomp.h"
#include "sg_mesh.h"
#include "sg_shardtensor.h"
#include "sg_test.h"
#include "sg_test_uops.h"
#include "sg_threads.h" /* sg_cuda_device_local */

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N = 2, C = 3, H = 7, ND = 4 };
static const int64_t G[ND] = {N, C, 3, 5};

static sg_status lin(sg_tape_t t, sg_var *x, sg_var *w, sg_var **y) {
  sg_var *in[2] = {x, w};
  return sg_tape_apply(t, sg_uop_lin(), 2, in, 1, NULL, NULL, 0, y);
}

/* The mesh and this rank's pieces. */
typedef struct ctx {
  sg_mesh_t mesh;
  sg_group_t dom, tp;
  sg_placement pl[SG_MESH_MAX_DIMS];
  int64_t off[ND], shape[ND], nx; /* x's box and its size */
  int64_t h0, hl;                 /* this tp rank's hidden rows */
  int tp_rank, tp_size;
} ctx;

/* A run's results (host memory: the device is faked). */
typedef struct result {
  double *y, *dx, *dw1, *dw2; /* ny, nx, hl * C, C * hl elements (as f64) */
  int64_t ny;
  int y_cuda, dx_cuda;
} result;

static double xv(int64_t g) { return 0.07 * (double)(g % 17) - 0.5; }

/* The global linear index of local element l of the box. */
static int64_t gidx(const int64_t *off, const int64_t *shape, int64_t l) {
  int64_t g = 0, r = l, st = 1;
  for (int d = ND - 1; d >= 0; --d) {
    const int64_t i = r % shape[d] + off[d];
    r /= shape[d];
    g += i * st;
    st *= G[d];
  }
  return g;
}

static void *buf(sg_dtype dt, int64_t n) {
  return calloc((size_t)(n > 0 ? n : 1), sg_dtype_size(dt));
}

/* The block on host (cuda = 0) or faked cuda:0 variables: the TP MLP, or
 * (sp) the sequence-parallel block
 *   y = sp_scatter(seq_gather(seq_reduce_scatter(lin(tanh(lin(
 *         seq_allgather(tanh(seq_scatter(x))), W1)), W2))))
 * over tp, the token slices of the T local tokens split unevenly (15:
 * 8+7, 5+5+5; at D = 2, 10 and 5 tokens: 5+5, 3+2). */
static sg_status run(const ctx *c, sg_dtype dt, int cuda, int sp, result *r) {
  sg_status st = SG_OK;
  const sg_device dev = {cuda ? SG_DEVICE_CUDA : SG_DEVICE_HOST, 0};
  const int64_t nw = c->hl * C, s1[2] = {c->hl, C}, s2[2] = {C, c->hl};
  sg_tape_t tape = NULL;
  sg_var x, w1, w2, *h = NULL, *y = NULL, *w2s = NULL;
  memset(&x, 0, sizeof x), memset(&w1, 0, sizeof w1), memset(&w2, 0, sizeof w2);
  void *xb = buf(dt, c->nx), *w1b = buf(dt, nw), *w2b = buf(dt, nw),
       *g1 = buf(dt, nw), *g2 = buf(dt, nw), *gy = buf(dt, c->nx);
  if (!xb || !w1b || !w2b || !g1 || !g2 || !gy) SG_RAISE(SG_ERR_ALLOC, "mlp");
  for (int64_t l = 0; l < c->nx; ++l) {
    const int64_t g = gidx(c->off, c->shape, l);
    sg_uop_st(xb, dt, l, xv(g));
    sg_uop_st(gy, dt, l, 0.03 * (double)(g % 11) - 0.1);
  }
  for (int64_t k = 0; k < c->hl; ++k)
    for (int64_t i = 0; i < C; ++i) {
      sg_uop_st(w1b, dt, k * C + i,
                0.4 * sin(1.0 + (double)((c->h0 + k) * C + i)));
      sg_uop_st(w2b, dt, i * c->hl + k,
                0.3 * cos(2.0 + (double)(i * H + c->h0 + k)));
    }
  ag_fake_cuda = cuda;
  SG_TRY(sg_var_init(&x, "x", dt, ND, c->shape, xb, 1));
  SG_TRY(sg_var_set_sharding(&x, c->mesh, c->pl, G));
  SG_TRY(sg_var_init_param(&w1, "w1", dt, 2, s1, w1b, g1));
  SG_TRY(sg_var_init_param(&w2, "w2", dt, 2, s2, w2b, g2));
  if (cuda) {
    SG_TRY(sg_var_set_device(&x, dev));
    SG_TRY(sg_var_set_device(&w1, dev));
    SG_TRY(sg_var_set_device(&w2, dev));
  }
  SG_TRY(sg_tape_create(&tape));
  if (sp) {
    SG_TRY(sg_ag_tp_seq_scatter(tape, c->tp, &x, &h));
    SG_TRY(sg_tape_apply(tape, sg_uop_tanh(), 1, &h, 1, NULL, NULL, 0, &h));
    SG_TRY(sg_ag_tp_seq_allgather(tape, c->tp, h, &x, &h));
    SG_TRY(lin(tape, h, &w1, &h));
    SG_TRY(sg_tape_apply(tape, sg_uop_tanh(), 1, &h, 1, NULL, NULL, 0, &h));
    SG_TRY(lin(tape, h, &w2, &h));
    SG_TRY(sg_ag_tp_seq_reduce_scatter(tape, c->tp, h, &h));
    SG_TRY(sg_ag_tp_seq_gather(tape, c->tp, h, &x, &h));
    SG_TRY(sg_ag_sp_scatter(tape, c->tp, h, &y));
  } else {
    SG_TRY(sg_ag_tp_copy(tape, c->tp, &x, &h));
    SG_TRY(lin(tape, h, &w1, &h));
    SG_TRY(sg_tape_apply(tape, sg_uop_tanh(), 1, &h, 1, NULL, NULL, 0, &h));
    SG_TRY(sg_ag_sp_share(tape, c->dom, &w2, &w2s));
    SG_TRY(lin(tape, h, w2s, &h));
    SG_TRY(sg_ag_tp_reduce(tape, c->tp, h, &y));
  }
  r->y_cuda = y->value.device.kind == SG_DEVICE_CUDA &&
              (sp || y->mesh == c->mesh);
  r->ny = sg_tensor_numel(&y->value);
  for (int64_t l = 0; l < r->ny; ++l) r->y[l] = sg_uop_ld(y->value.data, dt, l);
  const sg_tensor seed = sg_tensor_wrap(gy, dt, dev, y->value.ndim,
                                        y->value.shape);
  SG_TRY(sg_tape_backward_from(tape, 1, &y, &seed));
  r->dx_cuda = x.grad.device.kind == SG_DEVICE_CUDA;
  for (int64_t l = 0; l < c->nx; ++l) r->dx[l] = sg_uop_ld(x.grad.data, dt, l);
  for (int64_t i = 0; i < nw; ++i)
    r->dw1[i] = sg_uop_ld(g1, dt, i), r->dw2[i] = sg_uop_ld(g2, dt, i);
fail:
  sg_tape_destroy(&tape);
  sg_var_release(&x); /* its gradient: on the faked device in that run */
  sg_var_release(&w1);
  sg_var_release(&w2);
  ag_fake_cuda = 0;
  free(xb), free(w1b), free(w2b), free(g1), free(g2), free(gy);
  return st;
}

static void same_bits(const char *what, const char *dts, const double *a,
                      const double *b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    SG_CHECK(memcmp(&a[i], &b[i], sizeof *a) == 0,
             "%s %s[%lld]: device %.17g, host %.17g", dts, what, (long long)i,
             a[i], b[i]);
}

static int64_t alloc_result(result *r, const ctx *c) {
  const int64_t nw = c->hl * C > 0 ? c->hl * C : 1, nx = c->nx > 0 ? c->nx : 1;
  r->y = calloc((size_t)nx, 8), r->dx = calloc((size_t)nx, 8);
  r->dw1 = calloc((size_t)nw, 8), r->dw2 = calloc((size_t)nw, 8);
  return r->y && r->dx && r->dw1 && r->dw2;
}

static void free_result(result *r) {
  free(r->y), free(r->dx), free(r->dw1), free(r->dw2);
}

static void test_block(const ctx *c, sg_dtype dt, int sp) {
  result hr = {0}, dr = {0};
  const char *dts = sg_dtype_name(dt);
  const int want = sp ? 8 : 6;
  SG_CHECK(alloc_result(&hr, c) && alloc_result(&dr, c), "alloc");
  SG_CHECK_OK(run(c, dt, 0, sp, &hr));
  const int before[2] = {sg_uop_calls[0], sg_uop_calls[1]};
  SG_CHECK_OK(run(c, dt, 1, sp, &dr));
  SG_CHECK(sg_uop_calls[0] == before[0] && sg_uop_calls[1] - before[1] == want,
           "%s: device run: %d host and %d cuda kernel calls (want 0, %d)", dts,
           sg_uop_calls[0] - before[0], sg_uop_calls[1] - before[1], want);
  SG_CHECK(dr.y_cuda && dr.dx_cuda && !hr.y_cuda && dr.ny == hr.ny,
           "%s: y and dx on cuda:0 in the device run only", dts);
  same_bits("y", dts, dr.y, hr.y, hr.ny);
  same_bits("dx", dts, dr.dx, hr.dx, c->nx);
  same_bits("dW1", dts, dr.dw1, hr.dw1, c->hl * C);
  same_bits("dW2", dts, dr.dw2, hr.dw2, c->hl * C);
  if (sg_test_rank == 0)
    printf("%s %s: faked cuda:0 = host, bit for bit (y, dx, dW1, dW2)\n",
           sp ? "sp block" : "tp mlp", dts);
  free_result(&hr);
  free_result(&dr);
}

/* y = tp_reduce(lin(tp_copy(x), w_r)), w_r = r + 1 on tp rank r: y = sum_r
 * (r + 1) x, dx = sum_r (r + 1) dy (dy = 1), on 2 elements a rank (fewer
 * than the tp ranks at T = 3: empty blocks), an empty shard at D = 2. */
static void test_tiny(const ctx *c, sg_dtype dt) {
  static const int64_t TG[ND] = {1, 1, 1, 2};
  int64_t off[ND], shape[ND];
  SG_CHECK_OK(sg_shardtensor_box(c->mesh, ND, TG, c->pl, sg_mesh_rank(c->mesh),
                                 off, shape));
  const int64_t n = shape[0] * shape[1] * shape[2] * shape[3], one[2] = {1, 1};
  const double tot = c->tp_size * (c->tp_size + 1) / 2.0;
  double got[2][2][2] = {{{0}}}; /* [cuda][y, dx][i] */
  for (int cuda = 0; cuda < 2; ++cuda) {
    const sg_device dev = {cuda ? SG_DEVICE_CUDA : SG_DEVICE_HOST, 0};
    void *xb = buf(dt, 2), *wb = buf(dt, 1), *gw = buf(dt, 1), *gy = buf(dt, 2);
    sg_tape_t tape = NULL;
    sg_var x, w, *h = NULL, *y = NULL;
    memset(&x, 0, sizeof x), memset(&w, 0, sizeof w);
    sg_uop_st(xb, dt, 0, 1.25), sg_uop_st(xb, dt, 1, -0.5),
        sg_uop_st(wb, dt, 0, c->tp_rank + 1);
    sg_uop_st(gy, dt, 0, 1), sg_uop_st(gy, dt, 1, 1);
    ag_fake_cuda = cuda;
    sg_status st = sg_var_init(&x, "x", dt, ND, shape, xb, 1);
    if (st == SG_OK) st = sg_var_set_sharding(&x, c->mesh, c->pl, TG);
    if (st == SG_OK) st = sg_var_init_param(&w, "w", dt, 2, one, wb, gw);
    if (st == SG_OK && cuda) st = sg_var_set_device(&x, dev);
    if (st == SG_OK && cuda) st = sg_var_set_device(&w, dev);
    if (st == SG_OK) st = sg_tape_create(&tape);
    if (st == SG_OK) st = sg_ag_tp_copy(tape, c->tp, &x, &h);
    if (st == SG_OK) st = lin(tape, h, &w, &h);
    if (st == SG_OK) st = sg_ag_tp_reduce(tape, c->tp, h, &y);
    for (int64_t i = 0; st == SG_OK && i < n; ++i)
      got[cuda][0][i] = sg_uop_ld(y->value.data, dt, i);
    const sg_tensor seed = sg_tensor_wrap(gy, dt, dev, ND, shape);
    if (st == SG_OK) st = sg_tape_backward_from(tape, 1, &y, &seed);
    for (int64_t i = 0; st == SG_OK && i < n; ++i)
      got[cuda][1][i] = sg_uop_ld(x.grad.data, dt, i);
    SG_CHECK_OK(st);
    sg_tape_destroy(&tape);
    sg_var_release(&x);
    sg_var_release(&w);
    ag_fake_cuda = 0;
    free(xb), free(wb), free(gw), free(gy);
  }
  for (int64_t i = 0; i < n; ++i) {
    const double x0 = i ? -0.5 : 1.25;
    SG_CHECK(got[1][0][i] == tot * x0 && got[1][1][i] == tot,
             "%s tiny: y[%lld] = %g (want %g), dx = %g (want %g)",
             sg_dtype_name(dt), (long long)i, got[1][0][i], tot * x0,
             got[1][1][i], tot);
    SG_CHECK(!memcmp(got[0][0] + i, got[1][0] + i, 8) &&
                 !memcmp(got[0][1] + i, got[1][1] + i, 8),
             "%s tiny: device and host differ at %lld", sg_dtype_name(dt),
             (long long)i);
  }
}

/* st must be SG_ERR_NOT_SUPPORTED naming op and saying want. */
static void refused(const char *op, sg_status st, const char *want) {
  const char *msg = sg_last_error();
  char name[64];
  snprintf(name, sizeof name, "op %s", op);
  SG_CHECK(st == SG_ERR_NOT_SUPPORTED && msg && strstr(msg, name) &&
               strstr(msg, want),
           "%s on a sharded device input: status %d (%s), expected \"%s\"", op,
           (int)st, msg ? msg : "", want);
  if (sg_test_rank == 0 && st == SG_ERR_NOT_SUPPORTED)
    printf("refused: %s\n", msg);
}

static void test_refusals(const ctx *c) {
  const sg_dtype dt = SG_DTYPE_F64;
  const sg_device dev = {SG_DEVICE_CUDA, 0};
  const int64_t ws[4] = {C, C, 3, 3};
  void *xb = buf(dt, c->nx), *wb = buf(dt, C * C * 9), *gw = buf(dt, C * C * 9);
  sg_tape_t tape = NULL;
  sg_var x, w, *y = NULL;
  memset(&x, 0, sizeof x), memset(&w, 0, sizeof w);
  ag_fake_cuda = 1;
  SG_CHECK_OK(sg_var_init(&x, "x", dt, ND, c->shape, xb, 1));
  SG_CHECK_OK(sg_var_set_sharding(&x, c->mesh, c->pl, G));
  SG_CHECK_OK(sg_var_init_param(&w, "w", dt, 4, ws, wb, gw));
  SG_CHECK_OK(sg_var_set_device(&x, dev));
  SG_CHECK_OK(sg_var_set_device(&w, dev));
  SG_CHECK_OK(sg_tape_create(&tape));
  {
    /* moe (host-only) with E = 1, F = 1 on the sharded x */
    static double mb[C];
    const int64_t sr[2] = {1, C}, s1[3] = {1, 1, C}, sb1[2] = {1, 1},
                  s2[3] = {1, C, 1};
    const int64_t *ms[5] = {sr, s1, sb1, s2, sr};
    sg_var mw[5];
    sg_moe_desc md = {.experts = 1, .topk = 1};
    for (int i = 0; i < 5; ++i) {
      SG_CHECK_OK(sg_var_init(&mw[i], "mw", dt, i == 1 || i == 3 ? 3 : 2, ms[i],
                              mb, 0));
      SG_CHECK_OK(sg_var_set_device(&mw[i], dev));
    }
    refused("moe",
            sg_ag_moe(tape, &md, &x, &mw[0], &mw[1], &mw[2], &mw[3], &mw[4],
                      &y),
            "not built on the device");
    for (int i = 0; i < 5; ++i) sg_var_release(&mw[i]);
  }
  /* a real device over ranks: NCCL on the mesh (or a CUDA-aware MPI) */
  SG_CHECK(!sg_group_nccl(c->tp) && !sg_group_nccl(NULL), "sg_group_nccl");
  ag_fake_cuda = 0;
  const sg_status cs = ag_dev_comm_ok(c->tp, dev, "the test's sum");
  ag_fake_cuda = 1;
  if (c->tp_size > 1 && sg_mpi_cuda_aware() != 1)
    SG_CHECK(cs == SG_ERR_NOT_SUPPORTED && strstr(sg_last_error(), "NCCL"),
             "a real device without NCCL: status %d", (int)cs);
  else
    SG_CHECK_OK(cs);
  /* the tape still works after the refusals */
  sg_var *h = NULL;
  SG_CHECK_OK(sg_ag_tp_copy(tape, c->tp, &x, &h));
  sg_tape_destroy(&tape);
  sg_var_release(&x);
  sg_var_release(&w);
  ag_fake_cuda = 0;
  free(xb), free(wb), free(gw);
}

/* --gpu (tools/test-gpu runs it on 2-4 GPUs, one rank each; NCCL cannot
 * put two ranks on one GPU): y = tp_reduce(scale(tp_copy(x), r + 1)) on
 * real device buffers, NCCL on the mesh "tp=P", against the same on host
 * variables: y and dx the same bits, and the exact sums. Compile-verified
 * until a multi-GPU machine runs it. */
static void gpu_case(void) {
  enum { M = 13 };
  sg_mesh_t mesh = NULL;
  sg_group_t tp = NULL;
  int di = -1;
  const int64_t shape[3] = {1, 1, M};
  double xh[M], gh[M], res[2][2][M]; /* [cuda][y, dx] */
  SG_REQUIRE_OK(sg_cuda_device_local(MPI_COMM_WORLD, &di));
  SG_CHECK(di >= 0, "--gpu: no CUDA device on rank %d", sg_test_rank);
  if (di < 0) goto done;
  char spec[32];
  snprintf(spec, sizeof spec, "tp=%d", sg_test_size);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(sg_mesh_enable_nccl(mesh));
  SG_REQUIRE_OK(sg_mesh_group(mesh, 1u, &tp));
  SG_CHECK(sg_test_size == 1 || sg_group_nccl(tp), "NCCL on the tp group");
  for (int i = 0; i < M; ++i) xh[i] = 0.1 * i - 0.4, gh[i] = 1 + 0.01 * i;
  for (int cuda = 0; cuda < 2; ++cuda) {
    const sg_device host = sg_device_host(),
                    d = cuda ? (sg_device){SG_DEVICE_CUDA, di} : host;
    void *xd = xh, *gd = gh;
    sg_tape_t tape = NULL;
    sg_var x, *h = NULL, *y = NULL;
    memset(&x, 0, sizeof x);
    sg_status st = SG_OK;
    if (cuda) {
      xd = gd = NULL;
      st = sg_malloc(d, sizeof xh, &xd);
      if (st == SG_OK) st = sg_malloc(d, sizeof gh, &gd);
      if (st == SG_OK) st = sg_memcpy(d, xd, host, xh, sizeof xh);
      if (st == SG_OK) st = sg_memcpy(d, gd, host, gh, sizeof gh);
    }
    if (st == SG_OK) st = sg_var_init(&x, "x", SG_DTYPE_F64, 3, shape, xd, 1);
    if (st == SG_OK && cuda) st = sg_var_set_device(&x, d);
    if (st == SG_OK) st = sg_tape_create(&tape);
    if (st == SG_OK) st = sg_ag_tp_copy(tape, tp, &x, &h);
    if (st == SG_OK) st = sg_ag_scale(tape, sg_group_rank(tp) + 1.0, h, &h);
    if (st == SG_OK) st = sg_ag_tp_reduce(tape, tp, h, &y);
    if (st == SG_OK)
      st = sg_memcpy(host, res[cuda][0], d, y->value.data, sizeof xh);
    const sg_tensor seed = sg_tensor_wrap(gd, SG_DTYPE_F64, d, 3, shape);
    if (st == SG_OK) st = sg_tape_backward_from(tape, 1, &y, &seed);
    if (st == SG_OK)
      st = sg_memcpy(host, res[cuda][1], d, x.grad.data, sizeof xh);
    SG_CHECK_OK(st);
    sg_tape_destroy(&tape);
    sg_var_release(&x);
    if (cuda) sg_free(d, &xd), sg_free(d, &gd);
  }
  const double tot = sg_test_size * (sg_test_size + 1) / 2.0;
  for (int i = 0; i < M; ++i) {
    SG_CHECK(!memcmp(&res[0][0][i], &res[1][0][i], 8) &&
                 !memcmp(&res[0][1][i], &res[1][1][i], 8),
             "--gpu: device and host differ at %d", i);
    SG_CHECK(fabs(res[1][0][i] - tot * xh[i]) <= 1e-12 &&
                 fabs(res[1][1][i] - tot * gh[i]) <= 1e-12,
             "--gpu: y or dx at %d", i);
  }
  if (sg_test_rank == 0)
    printf("--gpu: tp_copy/tp_reduce on cuda over NCCL (%d ranks) = host\n",
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
  ctx c;
  memset(&c, 0, sizeof c);
  const int P = sg_test_size, D = P == 4 ? 2 : 1, T = P / D;
  char spec[48];
  snprintf(spec, sizeof spec, "dom=%d,tp=%d", D, T);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &c.mesh));
  SG_REQUIRE_OK(sg_mesh_group(c.mesh, 1u, &c.dom));
  SG_REQUIRE_OK(sg_mesh_group(c.mesh, 2u, &c.tp));
  c.pl[0] = sg_shard(2), c.pl[1] = sg_replicate();
  SG_REQUIRE_OK(sg_shardtensor_box(c.mesh, ND, G, c.pl, sg_mesh_rank(c.mesh),
                                   c.off, c.shape));
  c.nx = c.shape[0] * c.shape[1] * c.shape[2] * c.shape[3];
  c.tp_rank = sg_group_rank(c.tp), c.tp_size = sg_group_size(c.tp);
  c.h0 = sg_split_offset(H, T, c.tp_rank);
  c.hl = sg_split_size(H, T, c.tp_rank);
  for (int sp = 0; sp < 2; ++sp) {
    test_block(&c, SG_DTYPE_F64, sp);
    test_block(&c, SG_DTYPE_F32, sp);
  }
  test_tiny(&c, SG_DTYPE_F64);
  test_tiny(&c, SG_DTYPE_F32);
  test_refusals(&c);
done:
  sg_mesh_destroy(&c.mesh);
  return sg_test_finish();
}
