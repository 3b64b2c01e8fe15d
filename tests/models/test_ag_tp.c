/* Megatron tensor parallelism on the tape (models/ag_tp.c): the MLP
 * y = row(gelu(col(x; W1, b1)); W2, b2), loss = sum(y * t), on a mesh
 * "tp=P" (P = 1..4 ranks) against one process, f64 at 1e-10, forward and
 * backward. The hidden width 7 is split unevenly (4+3, 3+2+2, 2+2+2+1):
 * the ops take any split of the rows/columns (the ViT refuses one by
 * heads % tp). Checked: y and the loss (replicated: every tp rank), dx
 * (tp_copy's all-reduce), this rank's rows of dW1 and slice of db1, its
 * columns of dW2, and db2 (after the reduction: replicated). And the two
 * conjugate ops alone: y = tp_reduce(s_r * tp_copy(x)) with a different
 * scale s_r = r + 1 per tp rank is (sum s_r) x, and dx = (sum s_r) dy on
 * every rank. */
#include "sg_autograd.h"
#include "sg_decomp.h"
#include "sg_mesh.h"
#include "sg_test.h"
#include "sg_test_tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N = 2, C = 5, H = 7, S = 12 }; /* x: (N, C, 3, 4) */
static const int64_t XS[4] = {N, C, 3, 4};

static double xv(int64_t i) { return 0.1 * (double)(i % 13) - 0.6; }
static double tv(int64_t i) { return 0.05 * (double)(i % 7) - 0.1; }
static double w1v(int64_t h, int64_t c) { return 0.3 * sin(1.0 + h * C + c); }
static double b1v(int64_t h) { return 0.1 * (double)h - 0.3; }
static double w2v(int64_t o, int64_t h) { return 0.25 * cos(2.0 + o * H + h); }
static double b2v(int64_t o) { return 0.2 - 0.07 * (double)o; }

typedef struct result {
  double y[N * C * S], loss, dx[N * C * S];
  double dw1[H * C], db1[H], dw2[C * H], db2[C]; /* global layout; this
                                                    rank's part filled */
} result;

static sg_status var_f64(sg_var *v, const char *nm, int nd, const int64_t *sh,
                         int param, int grad) {
  return param ? sg_var_init_param(v, nm, SG_DTYPE_F64, nd, sh, NULL, NULL)
               : sg_var_init(v, nm, SG_DTYPE_F64, nd, sh, NULL, grad);
}

/* The run on tp group g (NULL: one process): rows [h0, h0 + hl) of W1. */
static sg_status run(sg_group_t g, int64_t h0, int64_t hl, result *r) {
  sg_status st = SG_OK;
  sg_tape_t tape = NULL;
  sg_var x, t, w1, b1, w2, b2, *h = NULL, *y = NULL, *l = NULL;
  memset(&x, 0, sizeof x), memset(&t, 0, sizeof t);
  memset(&w1, 0, sizeof w1), memset(&b1, 0, sizeof b1);
  memset(&w2, 0, sizeof w2), memset(&b2, 0, sizeof b2);
  const int64_t s1[2] = {hl, C}, s1b[1] = {hl}, s2[2] = {C, hl}, s2b[1] = {C};
  SG_TRY(var_f64(&x, "x", 4, XS, 0, 1));
  SG_TRY(var_f64(&t, "t", 4, XS, 0, 0));
  SG_TRY(var_f64(&w1, "w1", 2, s1, 1, 0));
  SG_TRY(var_f64(&b1, "b1", 1, s1b, 1, 0));
  SG_TRY(var_f64(&w2, "w2", 2, s2, 1, 0));
  SG_TRY(var_f64(&b2, "b2", 1, s2b, 1, 0));
  double *xd = x.value.data, *td = t.value.data, *w1d = w1.value.data,
         *b1d = b1.value.data, *w2d = w2.value.data, *b2d = b2.value.data;
  for (int64_t i = 0; i < N * C * S; ++i) xd[i] = xv(i), td[i] = tv(i);
  for (int64_t k = 0; k < hl; ++k) {
    b1d[k] = b1v(h0 + k);
    for (int64_t c = 0; c < C; ++c) w1d[k * C + c] = w1v(h0 + k, c);
    for (int64_t o = 0; o < C; ++o) w2d[o * hl + k] = w2v(o, h0 + k);
  }
  for (int64_t o = 0; o < C; ++o) b2d[o] = b2v(o);
  SG_TRY(sg_tape_create(&tape));
  SG_TRY(sg_ag_linear_col(tape, g, &x, &w1, &b1, &h));
  SG_TRY(sg_ag_act(tape, SG_ACT_GELU, h, &h));
  SG_TRY(sg_ag_linear_row(tape, g, h, &w2, &b2, &y));
  memcpy(r->y, y->value.data, sizeof r->y);
  SG_TRY(sg_ag_binary(tape, SG_BINARY_MUL, y, &t, &y));
  SG_TRY(sg_ag_loss(tape, SG_LOSS_SUM, y, NULL, &l));
  r->loss = sg_var_item(l);
  SG_TRY(sg_tape_backward(tape, l));
  memcpy(r->dx, x.grad.data, sizeof r->dx);
  const double *g1 = w1.grad.data, *gb1 = b1.grad.data, *g2 = w2.grad.data;
  for (int64_t k = 0; k < hl; ++k) {
    r->db1[h0 + k] = gb1[k];
    for (int64_t c = 0; c < C; ++c) r->dw1[(h0 + k) * C + c] = g1[k * C + c];
    for (int64_t o = 0; o < C; ++o) r->dw2[o * H + h0 + k] = g2[o * hl + k];
  }
  memcpy(r->db2, b2.grad.data, sizeof r->db2);
fail:
  sg_tape_destroy(&tape);
  sg_var *vs[6] = {&x, &t, &w1, &b1, &w2, &b2};
  for (int i = 0; i < 6; ++i) sg_var_release(vs[i]);
  return st;
}

/* a[i] vs b[i] for i in this rank's part (mask: rows/cols it owns) */
static void cmp_part(const char *what, const double *a, const double *b,
                     int64_t n, int64_t stride, int64_t h0, int64_t hl,
                     int by_col) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = by_col ? i % stride : i / stride;
    if (k < h0 || k >= h0 + hl) continue;
    SG_CHECK(fabs(a[i] - b[i]) <= 1e-10 * (1.0 + fabs(b[i])),
             "%s[%lld]: %.17g vs %.17g", what, (long long)i, a[i], b[i]);
  }
}

static void test_conjugate(sg_group_t g, int me, int P) {
  sg_tape_t tape = NULL;
  sg_var x, *h = NULL, *y = NULL, *l = NULL;
  memset(&x, 0, sizeof x);
  const int64_t n = N * C * S;
  const double tot = P * (P + 1) / 2.0;
  SG_REQUIRE_OK(var_f64(&x, "x", 4, XS, 0, 1));
  for (int64_t i = 0; i < n; ++i) ((double *)x.value.data)[i] = xv(i);
  SG_REQUIRE_OK(sg_tape_create(&tape));
  SG_REQUIRE_OK(sg_ag_tp_copy(tape, g, &x, &h));
  SG_REQUIRE_OK(sg_ag_scale(tape, me + 1.0, h, &h));
  SG_REQUIRE_OK(sg_ag_tp_reduce(tape, g, h, &y));
  for (int64_t i = 0; i < n; ++i)
    SG_CHECK(fabs(((double *)y->value.data)[i] - tot * xv(i)) <= 1e-12,
             "tp_reduce: y[%lld]", (long long)i);
  SG_REQUIRE_OK(sg_ag_loss(tape, SG_LOSS_SUM, y, NULL, &l));
  SG_REQUIRE_OK(sg_tape_backward(tape, l));
  for (int64_t i = 0; i < n; ++i)
    SG_CHECK(fabs(((double *)x.grad.data)[i] - tot) <= 1e-12,
             "tp_copy: dx[%lld] = %g, want %g", (long long)i,
             ((double *)x.grad.data)[i], tot);
done:
  sg_tape_destroy(&tape);
  sg_var_release(&x);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  sg_mesh_t mesh = NULL;
  sg_group_t g = NULL;
  static result ref, got;
  char spec[32];
  snprintf(spec, sizeof spec, "tp=%d", sg_test_size);
  SG_REQUIRE_OK(run(NULL, 0, H, &ref));
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(sg_mesh_group(mesh, 1u, &g));
  const int P = sg_test_size, me = sg_group_rank(g);
  const int64_t h0 = sg_split_offset(H, P, me), hl = sg_split_size(H, P, me);
  SG_REQUIRE_OK(run(g, h0, hl, &got));
  cmp_part("y", got.y, ref.y, N * C * S, 1, 0, 1, 0);
  cmp_part("loss", &got.loss, &ref.loss, 1, 1, 0, 1, 0);
  cmp_part("dx", got.dx, ref.dx, N * C * S, 1, 0, 1, 0);
  cmp_part("dW1 (rows)", got.dw1, ref.dw1, H * C, C, h0, hl, 0);
  cmp_part("db1 (slice)", got.db1, ref.db1, H, 1, h0, hl, 0);
  cmp_part("dW2 (columns)", got.dw2, ref.dw2, C * H, H, h0, hl, 1);
  cmp_part("db2", got.db2, ref.db2, C, 1, 0, 1, 0);
  test_conjugate(g, me, P);
  { /* the replicated results are the same bits on every tp rank */
    double mx[2] = {got.loss, got.dx[7]}, mn[2] = {got.loss, got.dx[7]};
    MPI_Allreduce(MPI_IN_PLACE, mx, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, mn, 2, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    SG_CHECK(mx[0] == mn[0] && mx[1] == mn[1],
             "tp ranks differ in the replicated loss or dx");
  }
done:
  sg_mesh_destroy(&mesh);
  return sg_test_finish();
}
