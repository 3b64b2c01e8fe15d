/* A user kernel (the example of docs/user-kernels.md): a periodic 5-point
 * Laplacian written as an sg_op_def for a local block with margins and a
 * declared window, applied with sg_tape_apply. On a mesh the framework does
 * the halo exchange and its adjoint: output and input gradient equal the
 * one-process run (f64), and the gradient equals central finite
 * differences. Meshes: h=P and, at 4 ranks, h=2,w=2. */
#include "sg_autograd.h"
#include "sg_mesh.h"
#include "sg_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the user op: y = x[i-1,j] + x[i+1,j] + x[i,j-1] + x[i,j+1] - 4 x[i,j] */

static sg_status lap_forward(sg_node *node) {
  sg_status st = SG_OK;
  const sg_tensor *x = &node->xin; /* (N, C, H+2, W+2): margins filled */
  const int64_t P = x->shape[0] * x->shape[1], H = x->shape[2] - 2, W = x->shape[3] - 2;
  const int64_t shape[4] = {x->shape[0], x->shape[1], H, W};
  SG_TRY(sg_node_alloc_out(node, 0, 4, shape));
  const double *in = x->data;
  double *y = node->out[0]->value.data;
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < H; ++i)
      for (int64_t j = 0; j < W; ++j) {
        const double *c = in + (p * (H + 2) + i + 1) * (W + 2) + j + 1;
        y[(p * H + i) * W + j] = c[-(W + 2)] + c[W + 2] + c[-1] + c[1] - 4 * c[0];
      }
fail:
  return st;
}

static sg_status lap_backward(sg_node *node) {
  const sg_tensor *x = &node->xin;
  const int64_t P = x->shape[0] * x->shape[1], H = x->shape[2] - 2, W = x->shape[3] - 2;
  const double *dy = node->out[0]->grad.data;
  double *dx = node->gin[0]; /* shaped like xin; OVERWRITE */
  if (!dx) return SG_OK;
  memset(dx, 0, (size_t)(P * (H + 2) * (W + 2)) * sizeof *dx);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < H; ++i)
      for (int64_t j = 0; j < W; ++j) {
        double g = dy[(p * H + i) * W + j];
        double *c = dx + (p * (H + 2) + i + 1) * (W + 2) + j + 1;
        c[-(W + 2)] += g;
        c[W + 2] += g;
        c[-1] += g;
        c[1] += g;
        c[0] -= 4 * g;
      }
  return SG_OK;
}

static const sg_op_def lap_op = {
    .name = "laplacian",
    .slots = {SG_SLOT_ACT},
    .forward = lap_forward,
    .backward = lap_backward,
    .rule = {.windowed_input = 0,
             .accepts = SG_ACCEPT_REPLICATE | SG_ACCEPT_SHARD_BATCH | SG_ACCEPT_SHARD_SPATIAL,
             .out = SG_OUT_LIKE_INPUT}};

static sg_status ag_laplacian(sg_tape_t t, sg_var *x, sg_var **y) {
  sg_op_window win = {.nsp = 2,
                      .kernel = {3, 3},
                      .stride = {1, 1},
                      .dilation = {1, 1},
                      .pad = {{1, 1}, {1, 1}},
                      .mode = {SG_PAD_PERIODIC, SG_PAD_PERIODIC}};
  return sg_tape_apply(t, &lap_op, 1, &x, 1, &win, NULL, 0, y);
}

/* ---- the test ------------------------------------------------------------- */

enum { N = 1, C = 2, H = 11, W = 7 };

/* loss = sum(r * lap(lap(x))) on the local blocks (sharded or not). */
static double run(sg_tape_t t, sg_var *x, sg_var *r, int grad) {
  sg_var *a = NULL, *b = NULL, *m = NULL, *loss = NULL;
  double v = NAN;
  int prev = sg_tape_set_grad_enabled(t, grad);
  if (ag_laplacian(t, x, &a) == SG_OK && ag_laplacian(t, a, &b) == SG_OK &&
      sg_ag_binary(t, SG_BINARY_MUL, b, r, &m) == SG_OK &&
      sg_ag_loss(t, SG_LOSS_SUM, m, NULL, &loss) == SG_OK) {
    v = sg_var_item(loss);
    if (grad) SG_CHECK_OK(sg_tape_backward(t, loss));
  }
  sg_tape_clear(t);
  sg_tape_set_grad_enabled(t, prev);
  return v;
}

static void local_of(sg_mesh_t mesh, const sg_placement *pl, const double *g, double *l,
                     int64_t *shape) {
  const int64_t gs[4] = {N, C, H, W};
  int64_t off[4];
  sg_shardtensor_box(mesh, 4, gs, pl, sg_mesh_rank(mesh), off, shape);
  int64_t k = 0;
  for (int64_t p = 0; p < N * C; ++p)
    for (int64_t i = 0; i < shape[2]; ++i)
      for (int64_t j = 0; j < shape[3]; ++j)
        l[k++] = g[(p * H + off[2] + i) * W + off[3] + j];
}

static void check(const char *spec) {
  sg_mesh_t mesh = NULL;
  sg_tape_t tape = NULL;
  sg_var gx, gr, x, r;
  memset(&gx, 0, sizeof gx);
  memset(&gr, 0, sizeof gr);
  memset(&x, 0, sizeof x);
  memset(&r, 0, sizeof r);
  const int64_t gs[4] = {N, C, H, W};
  double X[N * C * H * W], R[N * C * H * W], lx[N * C * H * W], lr[N * C * H * W];
  for (int i = 0; i < N * C * H * W; ++i) X[i] = sin(0.7 * i) + 0.1 * i, R[i] = cos(1.3 * i);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(sg_tape_create(&tape));
  /* one process, on every rank */
  SG_REQUIRE_OK(sg_var_init(&gx, "x", SG_DTYPE_F64, 4, gs, X, 1));
  SG_REQUIRE_OK(sg_var_init(&gr, "r", SG_DTYPE_F64, 4, gs, R, 0));
  double ref = run(tape, &gx, &gr, 1);
  /* sharded: h -> Shard(2), w -> Shard(3) */
  sg_placement pl[2];
  for (int m = 0; m < sg_mesh_ndims(mesh); ++m)
    pl[m] = !strcmp(sg_mesh_dim_name(mesh, m), "h") ? sg_shard(2) : sg_shard(3);
  int64_t ls[4];
  local_of(mesh, pl, X, lx, ls);
  local_of(mesh, pl, R, lr, ls);
  SG_REQUIRE_OK(sg_var_init(&x, "x", SG_DTYPE_F64, 4, ls, lx, 1));
  SG_REQUIRE_OK(sg_var_init(&r, "r", SG_DTYPE_F64, 4, ls, lr, 0));
  SG_REQUIRE_OK(sg_var_set_sharding(&x, mesh, pl, gs));
  SG_REQUIRE_OK(sg_var_set_sharding(&r, mesh, pl, gs));
  double val = run(tape, &x, &r, 1);
  SG_CHECK(fabs(val - ref) <= 1e-12 * fabs(ref), "%s: loss %.17g vs one process %.17g", spec, val,
           ref);
  double want[N * C * H * W];
  int64_t n = ls[0] * ls[1] * ls[2] * ls[3];
  local_of(mesh, pl, gx.grad.data, want, ls);
  SG_CHECK(sg_test_cmp_f64(spec, x.grad.data, want, n, 1e-12, 1e-12) == 0, "%s: dx", spec);
  /* finite differences of the sharded loss at a few global elements */
  for (int q = 0; q < 4; ++q) {
    int i = (q * 37 + 5) % (N * C * H * W), bad = 0;
    double keep = X[i], h = 1e-5;
    X[i] = keep + h;
    local_of(mesh, pl, X, lx, ls);
    double up = run(tape, &x, &r, 0);
    X[i] = keep - h;
    local_of(mesh, pl, X, lx, ls);
    double dn = run(tape, &x, &r, 0);
    X[i] = keep;
    local_of(mesh, pl, X, lx, ls);
    double fd = (up - dn) / (2 * h), an = ((double *)gx.grad.data)[i];
    bad = fabs(fd - an) > 1e-6 * (1 + fabs(an));
    SG_CHECK(!bad, "%s: dx[%d] = %.10g, finite difference %.10g", spec, i, an, fd);
  }
done:
  sg_tape_destroy(&tape);
  sg_var_release(&gx);
  sg_var_release(&gr);
  sg_var_release(&x);
  sg_var_release(&r);
  sg_mesh_destroy(&mesh);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  char spec[32];
  snprintf(spec, sizeof spec, "h=%d", sg_test_size);
  check(spec);
  if (sg_test_size == 4) check("h=2,w=2");
  return sg_test_finish();
}
