/* The FNO's tensor-parallel spectral layers (sg_ag_spectral_linear_tp,
 * models/ag_tp.c; models/fno.c pairs them): a column-parallel layer, gelu,
 * a row-parallel layer, loss = sum(y * t), on a mesh "tp=P" (P = 1..4
 * ranks) against one process, f64 at 1e-10, forward and backward. The
 * width 5 is split unevenly (3+2, 2+2+1, 2+1+1+1). Checked: y and the loss
 * (replicated: every tp rank), dx (tp_copy's all-reduce), this rank's
 * output channels of the first layer's dW (its (C, C_local, modes) slice),
 * skip rows and bias slice, its input channels of the second layer's dW
 * ((C_local, C, modes)) and skip columns, and the second bias (after the
 * reduction: replicated). And the FNO's refusal of a width below tp; and
 * the fused layer op (sg_ag_spectral_linear_act, the FNO's layers at tp 1)
 * against the ops one after the other, f64 at 1e-12. */
#include "sg_autograd.h"
#include "sg_decomp.h"
#include "sg_fno.h"
#include "sg_mesh.h"
#include "sg_spectral.h"
#include "sg_test.h"

#include <math.h>
#include <string.h>

enum { N = 2, C = 5, NY = 8, NX = 8, S = NY * NX, MODES = 2 };
enum { KMAX = 2 * MODES * MODES * 2 }; /* scalars per (cin, cout) pair */
static const int64_t XS[4] = {N, C, NY, NX};

static double xv(int64_t i) { return 0.1 * (double)(i % 13) - 0.6; }
static double tv(int64_t i) { return 0.05 * (double)(i % 7) - 0.1; }
/* weights by global index: layer k, (a, b) the (cin, cout) or (out, in)
 * pair, j the mode scalar */
static double wv(int k, int64_t a, int64_t b, int64_t j) {
  return 0.2 * sin(1.0 + k + 0.7 * (double)(a * C + b) + 0.3 * (double)j);
}
static double bv(int k, int64_t o) { return 0.1 * (double)o - 0.2 + 0.05 * k; }

/* global layouts; this rank's parts filled */
typedef struct result {
  double y[N * C * S], loss, dx[N * C * S];
  double dW[2][C * C * KMAX], dw[2][C * C], db[2][C];
} result;

typedef struct layer {
  sg_spectral_conv_t conv;
  sg_var W, w, b;
  int64_t kn; /* mode scalars per (cin, cout) pair */
} layer;

/* (A, B, R) slab: rows [a0, a0 + al), columns [b0, b0 + bl); dir 0 fills
 * the local box from the global generator, 1 scatters it into g. */
static void box_io(int dir, int k, double *loc, double *g, int64_t B, int64_t R,
                   int64_t a0, int64_t al, int64_t b0, int64_t bl) {
  for (int64_t a = 0; a < al; ++a)
    for (int64_t c = 0; c < bl; ++c)
      for (int64_t j = 0; j < R; ++j) {
        double *l = &loc[(a * bl + c) * R + j];
        if (dir == 0)
          *l = wv(k, a0 + a, b0 + c, j);
        else
          g[((a0 + a) * B + b0 + c) * R + j] = *l;
      }
}

/* Layer k (0 column-, 1 row-parallel) on channels [c0, c0 + cl). */
static sg_status layer_init(layer *L, int k, sg_mesh_t mesh, int64_t c0,
                            int64_t cl) {
  sg_status st = SG_OK;
  sg_fft_desc d;
  sg_fft_desc_init(&d);
  d.dtype = SG_DTYPE_F64, d.ndim = 2, d.shape[0] = NY, d.shape[1] = NX;
  d.batch = N, d.keep[0] = d.keep[1] = MODES;
  static const char *const hw[2] = {"h", "w"};
  MPI_Comm axes[2], comm = MPI_COMM_NULL;
  SG_TRY(sg_fft_mesh_axes(mesh, 2, hw, axes, d.split, &comm, NULL));
  SG_TRY(sg_spectral_conv_create_comms(comm, 2, axes, &d, k ? cl : C,
                                       k ? C : cl, &L->conv));
  L->kn = sg_spectral_conv_weight_count(L->conv) / (C * cl);
  if (L->kn != KMAX)
    SG_RAISE(SG_ERR_SHAPE, "test: %lld mode scalars per pair, expected %d",
             (long long)L->kn, (int)KMAX);
  const int64_t nw = C * cl * L->kn, ws[2] = {k ? C : cl, k ? cl : C},
                bs = k ? C : cl;
  SG_TRY(sg_var_init_param(&L->W, "W", SG_DTYPE_F64, 1, &nw, NULL, NULL));
  SG_TRY(sg_var_init_param(&L->w, "w", SG_DTYPE_F64, 2, ws, NULL, NULL));
  SG_TRY(sg_var_init_param(&L->b, "b", SG_DTYPE_F64, 1, &bs, NULL, NULL));
  /* W (cin, cout, modes): column-parallel its output channels, row its
   * input channels; the skip (out, in) alike: rows, columns */
  box_io(0, k, L->W.value.data, NULL, C, L->kn, k ? c0 : 0, k ? cl : C,
         k ? 0 : c0, k ? C : cl);
  box_io(0, 10 + k, L->w.value.data, NULL, C, 1, k ? 0 : c0, k ? C : cl,
         k ? c0 : 0, k ? cl : C);
  for (int64_t o = 0; o < bs; ++o)
    ((double *)L->b.value.data)[o] = bv(k, (k ? 0 : c0) + o);
fail:
  return st;
}

static void layer_out(layer *L, int k, result *r, int64_t c0, int64_t cl) {
  box_io(1, k, L->W.grad.data, r->dW[k], C, L->kn, k ? c0 : 0, k ? cl : C,
         k ? 0 : c0, k ? C : cl);
  box_io(1, 10 + k, L->w.grad.data, r->dw[k], C, 1, k ? 0 : c0, k ? C : cl,
         k ? c0 : 0, k ? cl : C);
  for (int64_t o = 0; o < (k ? C : cl); ++o)
    r->db[k][(k ? 0 : c0) + o] = ((double *)L->b.grad.data)[o];
}

static void layer_release(layer *L) {
  sg_spectral_conv_destroy(&L->conv);
  sg_var_release(&L->W), sg_var_release(&L->w), sg_var_release(&L->b);
}

/* The pair on tp group g (NULL: one process), channels [c0, c0 + cl);
 * fused (g NULL): each layer one sg_ag_spectral_linear_act. */
static sg_status run(sg_mesh_t mesh, sg_group_t g, int64_t c0, int64_t cl,
                     int fused, result *r) {
  sg_status st = SG_OK;
  sg_tape_t tape = NULL;
  layer L[2];
  sg_var x, t, *h = NULL, *y = NULL, *l = NULL;
  memset(L, 0, sizeof L), memset(&x, 0, sizeof x), memset(&t, 0, sizeof t);
  SG_TRY(sg_var_init(&x, "x", SG_DTYPE_F64, 4, XS, NULL, 1));
  SG_TRY(sg_var_init(&t, "t", SG_DTYPE_F64, 4, XS, NULL, 0));
  for (int64_t i = 0; i < N * C * S; ++i)
    ((double *)x.value.data)[i] = xv(i), ((double *)t.value.data)[i] = tv(i);
  for (int k = 0; k < 2; ++k) SG_TRY(layer_init(&L[k], k, mesh, c0, cl));
  SG_TRY(sg_tape_create(&tape));
  if (fused) {
    SG_TRY(sg_ag_spectral_linear_act(tape, L[0].conv, &x, &L[0].W, &L[0].w,
                                     &L[0].b, SG_ACT_GELU, &h));
    SG_TRY(sg_ag_spectral_linear_act(tape, L[1].conv, h, &L[1].W, &L[1].w,
                                     &L[1].b, -1, &y));
  } else {
    SG_TRY(sg_ag_spectral_linear_tp(tape, g, 0, L[0].conv, &x, &L[0].W, &L[0].w,
                                    &L[0].b, &h));
    SG_TRY(sg_ag_act(tape, SG_ACT_GELU, h, &h));
    SG_TRY(sg_ag_spectral_linear_tp(tape, g, 1, L[1].conv, h, &L[1].W, &L[1].w,
                                    &L[1].b, &y));
  }
  memcpy(r->y, y->value.data, sizeof r->y);
  SG_TRY(sg_ag_binary(tape, SG_BINARY_MUL, y, &t, &y));
  SG_TRY(sg_ag_loss(tape, SG_LOSS_SUM, y, NULL, &l));
  r->loss = sg_var_item(l);
  SG_TRY(sg_tape_backward(tape, l));
  memcpy(r->dx, x.grad.data, sizeof r->dx);
  for (int k = 0; k < 2; ++k) layer_out(&L[k], k, r, c0, cl);
fail:
  sg_tape_destroy(&tape);
  for (int k = 0; k < 2; ++k) layer_release(&L[k]);
  sg_var_release(&x), sg_var_release(&t);
  return st;
}

/* a vs b on the (A, B, R) slab's rows [a0, a0 + al), columns [b0, +bl) */
static double tol = 1e-10;
static void cmp_box(const char *what, const double *a, const double *b,
                    int64_t A, int64_t B, int64_t R, int64_t a0, int64_t al,
                    int64_t b0, int64_t bl) {
  for (int64_t i = 0; i < A * B * R; ++i) {
    const int64_t ia = i / (B * R), ib = i / R % B;
    if (ia < a0 || ia >= a0 + al || ib < b0 || ib >= b0 + bl) continue;
    SG_CHECK(fabs(a[i] - b[i]) <= tol * (1.0 + fabs(b[i])),
             "%s[%lld]: %.17g vs %.17g", what, (long long)i, a[i], b[i]);
  }
}

/* Every result on every channel: got against ref. */
static void cmp_all(const result *got, const result *ref, int64_t c0,
                    int64_t cl) {
  const int64_t kn = KMAX; /* both layers keep the same modes */
  cmp_box("y", got->y, ref->y, 1, 1, N * C * S, 0, 1, 0, 1);
  cmp_box("loss", &got->loss, &ref->loss, 1, 1, 1, 0, 1, 0, 1);
  cmp_box("dx", got->dx, ref->dx, 1, 1, N * C * S, 0, 1, 0, 1);
  cmp_box("dW0 (output channels)", got->dW[0], ref->dW[0], C, C, kn, 0, C, c0,
          cl);
  cmp_box("dw0 (rows)", got->dw[0], ref->dw[0], C, C, 1, c0, cl, 0, C);
  cmp_box("db0 (slice)", got->db[0], ref->db[0], C, 1, 1, c0, cl, 0, 1);
  cmp_box("dW1 (input channels)", got->dW[1], ref->dW[1], C, C, kn, c0, cl, 0,
          C);
  cmp_box("dw1 (columns)", got->dw[1], ref->dw[1], C, C, 1, 0, C, c0, cl);
  cmp_box("db1", got->db[1], ref->db[1], C, 1, 1, 0, C, 0, 1);
}

/* The model refuses a width below tp, with SG_ERR_CONFIG on every rank. */
static void width_below_tp(sg_mesh_t mesh, int P) {
  if (P < 2) return;
  sg_fno_config c = sg_fno_defaults();
  c.width = P - 1, c.modes1 = c.modes2 = 2;
  sg_fno_t m = NULL;
  const sg_status st = sg_fno_create(mesh, &c, 8, 8, 1, &m);
  SG_CHECK(st == SG_ERR_CONFIG && !m &&
               strstr(sg_last_error(), "must be >= tp") != NULL,
           "width %d on tp=%d: %s", P - 1, P, sg_last_error());
  sg_fno_destroy(&m);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  sg_mesh_t self = NULL, mesh = NULL;
  sg_group_t g = NULL;
  static result ref, got, fused;
  char spec[32];
  snprintf(spec, sizeof spec, "tp=%d", sg_test_size);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_SELF, "h=1", &self));
  SG_REQUIRE_OK(run(self, NULL, 0, C, 0, &ref));
  SG_REQUIRE_OK(run(self, NULL, 0, C, 1, &fused));
  tol = 1e-12;
  cmp_all(&fused, &ref, 0, C);
  tol = 1e-10;
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(sg_mesh_group(mesh, 1u, &g));
  const int P = sg_test_size, me = sg_group_rank(g);
  const int64_t c0 = sg_split_offset(C, P, me), cl = sg_split_size(C, P, me);
  SG_REQUIRE_OK(run(mesh, g, c0, cl, 0, &got));
  cmp_all(&got, &ref, c0, cl);
  width_below_tp(mesh, P);
  { /* the replicated results are the same bits on every tp rank */
    double mx[2] = {got.loss, got.dx[7]}, mn[2] = {got.loss, got.dx[7]};
    MPI_Allreduce(MPI_IN_PLACE, mx, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, mn, 2, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    SG_CHECK(mx[0] == mn[0] && mx[1] == mn[1],
             "tp ranks differ in the replicated loss or dx");
  }
done:
  sg_mesh_destroy(&mesh);
  sg_mesh_destroy(&self);
  return sg_test_finish();
}
