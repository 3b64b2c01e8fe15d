/* shardgrid user-kernel example: a periodic 5-point Laplacian written as a
 * tape op (laplacian.c) and run on any mesh. It checks itself: the loss
 * sum(r * lap(lap(x))) and its gradient on the mesh "h=P" (and "h=2,w=2" on
 * 4 ranks) equal the one-process run of the same code on the global grid,
 * and the gradient equals central finite differences (f64). Run:
 *   mpiexec -n 3 ./sg-user-kernel      (prints "user-kernel: ok")
 * Built against the installed library with find_package(shardgrid); see
 * docs/user-kernels.md. */
#include "laplacian.h"

#include <math.h>
#include <mpi.h>
#include <sg_mesh.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond, ...)                            \
  do {                                              \
    if (!(cond)) {                                  \
      ++failures;                                   \
      fprintf(stderr, "user-kernel: " __VA_ARGS__); \
      fprintf(stderr, "\n");                        \
    }                                               \
  } while (0)
#define CHECK_OK(call) CHECK((call) == SG_OK, "%s: %s", #call, sg_last_error())
#define REQUIRE_OK(call)                                       \
  do {                                                         \
    sg_status req_st_ = (call);                                \
    CHECK(req_st_ == SG_OK, "%s: %s", #call, sg_last_error()); \
    if (req_st_ != SG_OK) goto done;                           \
  } while (0)

/* max |a - b| <= rel * (1 + |b|) */
static int close_all(const double *a, const double *b, int64_t n, double rel) {
  for (int64_t i = 0; i < n; ++i)
    if (!(fabs(a[i] - b[i]) <= rel * (1 + fabs(b[i])))) return 0;
  return 1;
}


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
    if (grad) CHECK_OK(sg_tape_backward(t, loss));
  }
  sg_tape_clear(t);
  sg_tape_set_grad_enabled(t, prev);
  return v;
}

static void local_of(sg_mesh_t mesh, const sg_placement *pl, const double *g,
                     double *l, int64_t *shape) {
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
  double X[N * C * H * W], R[N * C * H * W], lx[N * C * H * W],
      lr[N * C * H * W];
  for (int i = 0; i < N * C * H * W; ++i)
    X[i] = sin(0.7 * i) + 0.1 * i, R[i] = cos(1.3 * i);
  REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  REQUIRE_OK(sg_tape_create(&tape));
  /* one process, on every rank */
  REQUIRE_OK(sg_var_init(&gx, "x", SG_DTYPE_F64, 4, gs, X, 1));
  REQUIRE_OK(sg_var_init(&gr, "r", SG_DTYPE_F64, 4, gs, R, 0));
  double ref = run(tape, &gx, &gr, 1);
  /* sharded: h -> Shard(2), w -> Shard(3) */
  sg_placement pl[2];
  for (int m = 0; m < sg_mesh_ndims(mesh); ++m)
    pl[m] = !strcmp(sg_mesh_dim_name(mesh, m), "h") ? sg_shard(2) : sg_shard(3);
  int64_t ls[4];
  local_of(mesh, pl, X, lx, ls);
  local_of(mesh, pl, R, lr, ls);
  REQUIRE_OK(sg_var_init(&x, "x", SG_DTYPE_F64, 4, ls, lx, 1));
  REQUIRE_OK(sg_var_init(&r, "r", SG_DTYPE_F64, 4, ls, lr, 0));
  REQUIRE_OK(sg_var_set_sharding(&x, mesh, pl, gs));
  REQUIRE_OK(sg_var_set_sharding(&r, mesh, pl, gs));
  double val = run(tape, &x, &r, 1);
  CHECK(fabs(val - ref) <= 1e-12 * fabs(ref),
        "%s: loss %.17g vs one process %.17g", spec, val, ref);
  double want[N * C * H * W];
  int64_t n = ls[0] * ls[1] * ls[2] * ls[3];
  local_of(mesh, pl, gx.grad.data, want, ls);
  CHECK(close_all(x.grad.data, want, n, 1e-12),
        "%s: dx differs from one process", spec);
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
    CHECK(!bad, "%s: dx[%d] = %.10g, finite difference %.10g", spec, i, an, fd);
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
  int rank = 0, size = 1, bad = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char spec[32];
  snprintf(spec, sizeof spec, "h=%d", size);
  check(spec);
  if (size == 4) check("h=2,w=2");
  MPI_Allreduce(&failures, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    printf("user-kernel: %s (%d ranks)\n", bad ? "FAILED" : "ok", size);
  MPI_Finalize();
  return bad ? 1 : 0;
}
