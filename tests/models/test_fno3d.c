/* FNO-3D's pieces on one rank: its two reshaping ops (broadcast over time,
 * the time window: pad, crop, drop the channel dim) forward against their
 * definition and backward against central finite differences in double
 * (the ops are linear, the loss quadratic: differences are exact up to
 * rounding); the model's shapes (output (batch, nt, ny, nx), parameter
 * count, the spectral weights' global shape) and its refusals with clear
 * errors. Its function on split meshes against one process:
 * tests/examples/train_trajectories.sh fno3d. */
#include "fno_impl.h"
#include "sg_autograd.h"
#include "sg_fno.h"
#include "sg_mesh.h"
#include "sg_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N = 2, C = 3, NY = 4, NX = 5, T = 3 };

static double val(int64_t i, int salt) {
  return sin(0.37 * (double)i + 1.3 * salt) + 0.1 * salt;
}

/* x (N, c, NY, NX) -> broadcast over T -> window to t2 (squeeze when c = 1)
 * -> mse against a target; *y the output. */
static sg_status chain(sg_tape_t tape, sg_var *x, sg_var *tgt, int64_t t2,
                       int squeeze, sg_var **y, sg_var **loss) {
  sg_status st = SG_OK;
  sg_var *h = NULL;
  SG_TRY(sg_fno3d_broadcast_t(tape, x, T, &h));
  SG_TRY(sg_fno3d_time_window(tape, h, t2, squeeze, &h));
  *y = h;
  SG_TRY(sg_ag_loss(tape, SG_LOSS_MSE, h, tgt, loss));
fail:
  return st;
}

static double chain_value(sg_tape_t tape, sg_var *x, sg_var *tgt, int64_t t2,
                          int squeeze) {
  int prev = sg_tape_set_grad_enabled(tape, 0);
  sg_var *y = NULL, *loss = NULL;
  double v = NAN;
  if (chain(tape, x, tgt, t2, squeeze, &y, &loss) == SG_OK)
    v = sg_var_item(loss);
  sg_tape_clear(tape);
  sg_tape_set_grad_enabled(tape, prev);
  return v;
}

static void check_ops(int64_t c, int64_t t2, int squeeze) {
  const int64_t nx_ = N * c * NY * NX, S = NY * NX;
  double *x = malloc(sizeof(double) * (size_t)nx_);
  double *tg = malloc(sizeof(double) * (size_t)(N * c * t2 * S));
  for (int64_t i = 0; i < nx_; ++i) x[i] = val(i, 1);
  for (int64_t i = 0; i < N * c * t2 * S; ++i) tg[i] = val(i, 2);
  sg_tape_t tape = NULL;
  sg_var vx, vt, *y = NULL, *loss = NULL;
  memset(&vx, 0, sizeof vx);
  memset(&vt, 0, sizeof vt);
  const int64_t xs[4] = {N, c, NY, NX}, ts5[5] = {N, c, t2, NY, NX},
                ts4[4] = {N, t2, NY, NX};
  SG_REQUIRE_OK(sg_tape_create(&tape));
  SG_REQUIRE_OK(sg_var_init(&vx, "x", SG_DTYPE_F64, 4, xs, x, 1));
  SG_REQUIRE_OK(sg_var_init(&vt, "t", SG_DTYPE_F64, squeeze ? 4 : 5,
                            squeeze ? ts4 : ts5, tg, 0));
  SG_REQUIRE_OK(chain(tape, &vx, &vt, t2, squeeze, &y, &loss));
  /* forward: the input at steps < min(T, t2), zeros after */
  const double *yv = y->value.data;
  int bad = y->value.ndim != (squeeze ? 4 : 5);
  for (int64_t p = 0; p < N * c; ++p)
    for (int64_t t = 0; t < t2; ++t)
      for (int64_t i = 0; i < S; ++i)
        bad += yv[(p * t2 + t) * S + i] != (t < T ? x[p * S + i] : 0.0);
  SG_CHECK(bad == 0, "c %lld t2 %lld squeeze %d: %d forward values wrong",
           (long long)c, (long long)t2, squeeze, bad);
  SG_REQUIRE_OK(sg_tape_backward(tape, loss));
  const double *g = vx.grad.data, h = 1e-4;
  double worst = 0.0;
  for (int64_t i = 0; i < nx_; ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double lp = chain_value(tape, &vx, &vt, t2, squeeze);
    x[i] = x0 - h;
    const double lm = chain_value(tape, &vx, &vt, t2, squeeze);
    x[i] = x0;
    const double fd = (lp - lm) / (2 * h);
    worst = fmax(worst, fabs(fd - g[i]) / fmax(1e-3, fabs(g[i])));
  }
  SG_CHECK(worst < 1e-7,
           "c %lld t2 %lld squeeze %d: dL/dx vs finite differences, worst "
           "relative %.3g",
           (long long)c, (long long)t2, squeeze, worst);
done:
  sg_var_release(&vx);
  sg_var_release(&vt);
  sg_tape_destroy(&tape);
  free(x);
  free(tg);
}

static void check_model(sg_mesh_t mesh) {
  sg_fno_config f = sg_fno_defaults();
  f.cin = 2, f.cout = 1, f.nt = 8, f.modes_t = 2, f.pad_t = 2, f.width = 4,
  f.modes1 = f.modes2 = 4, f.layers = 1, f.proj_width = 8;
  sg_fno_t m = NULL;
  sg_tape_t tape = NULL;
  sg_var vx, *y = NULL;
  memset(&vx, 0, sizeof vx);
  float *p = NULL, *g = NULL, *x = NULL;
  SG_REQUIRE_OK(sg_fno_create(mesh, &f, 16, 16, 2, &m));
  /* lift 4x(2+3)+4, spectral 4x4x(2*2)x(2*4)x(2*4), skip 16+4, proj 8x4+8,
   * out 8+1 */
  const int64_t want = 24 + 4096 + 20 + 40 + 9;
  SG_CHECK(sg_fno_param_count(m) == want, "parameters %lld, want %lld",
           (long long)sg_fno_param_count(m), (long long)want);
  sg_param_info pi;
  SG_CHECK_OK(sg_fno_param_info(m, 2, &pi));
  SG_CHECK(pi.ndim == 5 && pi.global_shape[2] == 4 && pi.global_shape[3] == 8 &&
               pi.global_shape[4] == 8,
           "spectral weight (width, width, 2 modes_t, 2 modes, 2 modes)");
  p = calloc((size_t)want, sizeof *p);
  g = calloc((size_t)want, sizeof *g);
  x = calloc(2 * 2 * 16 * 16, sizeof *x);
  for (int i = 0; i < 2 * 2 * 16 * 16; ++i) x[i] = (float)val(i, 3);
  const int64_t xs[4] = {2, 2, 16, 16};
  SG_REQUIRE_OK(sg_tape_create(&tape));
  SG_CHECK_OK(sg_fno_bind(m, p, g));
  SG_CHECK_OK(sg_fno_init(m, 7));
  SG_CHECK_OK(sg_var_init(&vx, "x", SG_DTYPE_F32, 4, xs, x, 0));
  SG_CHECK_OK(sg_fno_forward(m, tape, &vx, &y));
  SG_CHECK(y && y->value.ndim == 4 && y->value.shape[0] == 2 &&
               y->value.shape[1] == 8 && y->value.shape[2] == 16 &&
               y->value.shape[3] == 16,
           "output (batch, nt, ny, nx)");
done:
  if (tape) sg_tape_clear(tape);
  sg_tape_destroy(&tape);
  sg_var_release(&vx);
  sg_fno_destroy(&m);
  free(p);
  free(g);
  free(x);
  /* refusals */
  sg_fno_config b = f;
  b.modes_t = 6;
  SG_CHECK_STATUS(sg_fno_create(mesh, &b, 16, 16, 2, &m), SG_ERR_CONFIG);
  SG_CHECK(strstr(sg_last_error(), "modes_t = 6 does not fit 8 time steps") !=
               NULL,
           "message: %s", sg_last_error());
  b = f;
  b.cout = 2;
  SG_CHECK_STATUS(sg_fno_create(mesh, &b, 16, 16, 2, &m), SG_ERR_CONFIG);
  SG_CHECK(strstr(sg_last_error(), "one output value per space-time point") !=
               NULL,
           "message: %s", sg_last_error());
  b = f;
  b.modes1 = 9;
  SG_CHECK_STATUS(sg_fno_create(mesh, &b, 16, 16, 2, &m), SG_ERR_CONFIG);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  check_ops(C, 5, 0); /* pad */
  check_ops(C, 2, 0); /* crop */
  check_ops(1, T, 1); /* drop the channel dim */
  check_ops(1, 4, 1);
  sg_mesh_t mesh = NULL;
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, "h=1", &mesh));
  check_model(mesh);
done:
  sg_mesh_destroy(&mesh);
  return sg_test_finish();
}
