/* The op-table test's runners of the FFT ops: the spectral convolution
 * (sg_ag_spectral_conv) alone, and inside the FNO, against one process. */
#include <stdlib.h>
#include <string.h>

#include "op_table.h"
#include "sg_comm.h"
#include "sg_fno.h"
#include "sg_spectral.h"
#include "sg_test.h"
#include "sg_test_tensor.h"

/* ---- the FNO (the spectral convolution) ---------------------------------------------- */


/* One FNO forward/backward on mesh (NULL: a mesh over MPI_COMM_SELF) with
 * the case's global input; compares with (or fills) ref. */
int run_fno(const op_case *c, sg_mesh_t mesh, fno_ref *ref, const double *gx,
            verdict *vd) {
  sg_mesh_t self = NULL;
  sg_fno_t m = NULL;
  sg_tape_t tape = NULL;
  sg_test_buf xv, xg, pv, pg, sb;
  sg_var x, *y = NULL;
  int result = 0;
  memset(&x, 0, sizeof x);
  memset(&xv, 0, sizeof xv), memset(&xg, 0, sizeof xg),
      memset(&pv, 0, sizeof pv);
  memset(&pg, 0, sizeof pg), memset(&sb, 0, sizeof sb);
  const int64_t N = c->act[0][0], CIN = c->act[0][1], NY = c->act[0][2],
                NX = c->act[0][3];
  sg_fno_config cfg = sg_fno_defaults();
  cfg.cin = CIN, cfg.cout = 1, cfg.width = 4, cfg.modes1 = 2, cfg.modes2 = 2,
  cfg.layers = 2;
  cfg.proj_width = 4;
  sg_status st = SG_OK;
  if (!mesh) st = sg_mesh_create(MPI_COMM_SELF, "h=1", &self);
  sg_mesh_t use = mesh ? mesh : self;
  /* the local batch: this rank's share over dp */
  int64_t b0 = 0, nb = N;
  int dpd = use ? sg_mesh_find_dim(use, "dp") : -1;
  if (dpd >= 0) {
    int p = sg_mesh_dim_size(use, dpd), k = sg_mesh_coord(use, dpd);
    nb = N / p + (k < N % p);
    b0 = k * (N / p) + (k < N % p ? k : N % p);
  }
  if (st == SG_OK) st = sg_fno_create(use, &cfg, NY, NX, nb, &m);
  if (!sg_test_all(MPI_COMM_WORLD, st == SG_OK)) {
    note(vd, "%s: %s", "sg_fno_create", sg_last_error());
    goto done;
  }
  const int64_t np = sg_fno_param_count(m);
  st = sg_test_buf_alloc(&pv, SG_DTYPE_F32, np);
  if (st == SG_OK) st = sg_test_buf_alloc(&pg, SG_DTYPE_F32, np);
  if (st == SG_OK) st = sg_fno_bind(m, pv.data, pg.data);
  if (st == SG_OK) st = sg_fno_init(m, 42);
  int64_t y0, ly, x0, lx;
  sg_fno_box(m, &y0, &ly, &x0, &lx);
  int64_t off[4] = {b0, 0, y0, x0}, shape[4] = {nb, CIN, ly, lx},
          gshape[4] = {N, CIN, NY, NX};
  const int64_t nloc = sg_test_numel(4, shape);
  if (st == SG_OK) st = sg_test_buf_alloc(&xv, SG_DTYPE_F32, nloc);
  if (st == SG_OK) st = sg_test_buf_alloc(&xg, SG_DTYPE_F32, nloc);
  if (st == SG_OK) {
    sg_test_box_copy(4, gshape, off, shape, (double *)gx, xv.data, SG_DTYPE_F32,
                     0);
    st = sg_var_init(&x, "x", SG_DTYPE_F32, 4, shape, xv.data, 1);
    x.grad = x.value, x.grad.data = xg.data, x.grad.owns = 0;
  }
  if (st == SG_OK) st = sg_tape_create(&tape);
  if (!sg_test_all(MPI_COMM_WORLD, st == SG_OK)) {
    note(vd, "%s: %s", "setup", sg_last_error());
    goto done;
  }
  st = sg_fno_forward(m, tape, &x, &y);
  if (st == SG_OK) mark_seen(y, 0);
  if (!sg_test_all(MPI_COMM_WORLD, st == SG_OK)) {
    note(vd, "%s: %s", "forward",
         st != SG_OK ? sg_last_error() : "failed on another rank");
    goto done;
  }
  int64_t yshape[4] = {nb, 1, ly, lx}, ygshape[4] = {N, 1, NY, NX};
  const int64_t ny = sg_test_numel(4, yshape), nyg = sg_test_numel(4, ygshape);
  for (int d = 0; d < 4; ++d)
    if (y->value.shape[d] != yshape[d])
      note(vd, "%s: %s", "output", "local shape");
  double *seed = malloc((size_t)nyg * sizeof *seed);
  for (int64_t k = 0; k < nyg; ++k)
    seed[k] = (double)(float)sg_test_rand(0xF00u, k, -1.0, 1.0);
  if (!mesh) {
    ref->y = malloc((size_t)nyg * sizeof(double));
    for (int64_t k = 0; k < nyg; ++k)
      ref->y[k] = sg_test_get(y->value.data, SG_DTYPE_F32, k);
  } else if (vd->bad == 0) {
    double *want = malloc((size_t)(ny ? ny : 1) * sizeof *want);
    char msg[300];
    sg_test_box_copy(4, ygshape, off, yshape, ref->y, want, SG_DTYPE_F64, 0);
    if (sg_test_cmp_ref(y->value.data, SG_DTYPE_F32, want, ny, 1e-4, msg,
                        sizeof msg))
      note(vd, "%s: %s", "output", msg);
    free(want);
  }
  st = sg_test_buf_alloc(&sb, SG_DTYPE_F32, ny);
  if (st == SG_OK)
    sg_test_box_copy(4, ygshape, off, yshape, seed, sb.data, SG_DTYPE_F32, 0);
  free(seed);
  sg_tensor sd = y->value;
  sd.data = sb.data, sd.owns = 0;
  static int alt; /* every other mesh (every rank calls alike) */
  if (st == SG_OK)
    st = op_table_backward(tape, 1, &y, &sd, mesh && (alt++ & 1));
  if (!sg_test_all(MPI_COMM_WORLD, st == SG_OK)) {
    note(vd, "%s: %s", "backward",
         st != SG_OK ? sg_last_error() : "failed on another rank");
    goto done;
  }
  if (!sg_test_buf_guards_ok(&xv) || !sg_test_buf_guards_ok(&xg) ||
      !sg_test_buf_guards_ok(&pv) || !sg_test_buf_guards_ok(&pg))
    note(vd, "%s%s", "guard values overwritten", NULL);
  /* input gradient */
  const int64_t nxg = sg_test_numel(4, gshape);
  if (!mesh) {
    ref->dx = malloc((size_t)nxg * sizeof(double));
    for (int64_t k = 0; k < nxg; ++k)
      ref->dx[k] = sg_test_get(xg.data, SG_DTYPE_F32, k);
  } else {
    double *want = malloc((size_t)(nloc ? nloc : 1) * sizeof *want);
    char msg[300];
    sg_test_box_copy(4, gshape, off, shape, ref->dx, want, SG_DTYPE_F64, 0);
    if (sg_test_cmp_ref(xg.data, SG_DTYPE_F32, want, nloc, 1e-4, msg,
                        sizeof msg))
      note(vd, "%s: %s", "d(input)", msg);
    free(want);
  }
  /* parameter gradients: each parameter's box placed into its global
   * array, summed over every rank (Partial over the data-splitting dims,
   * disjoint boxes over the domain for the sharded spectral weights) */
  sg_var **vars = NULL;
  const int nparam = sg_fno_params(m, &vars);
  int64_t total = 0;
  for (int i = 0; i < nparam; ++i) {
    sg_param_info pi;
    if (sg_fno_param_info(m, i, &pi) != SG_OK) continue;
    total += sg_test_numel(pi.ndim, pi.global_shape);
  }
  double *gall = calloc((size_t)total, sizeof *gall);
  int64_t at = 0;
  for (int i = 0; i < nparam; ++i) {
    sg_param_info pi;
    if (sg_fno_param_info(m, i, &pi) != SG_OK) continue;
    sg_test_box_copy(pi.ndim, pi.global_shape, pi.start, pi.count, gall + at,
                     (float *)pg.data + pi.offset, SG_DTYPE_F32, 1);
    at += sg_test_numel(pi.ndim, pi.global_shape);
  }
  if (!mesh) {
    ref->np = total;
    ref->dp = gall;
    gall = NULL;
  } else {
    sum_all(gall, total, MPI_COMM_WORLD);
    char msg[300];
    if (total != ref->np)
      note(vd, "%s: %s", "parameters", "count differs");
    else if (sg_test_cmp_ref(gall, SG_DTYPE_F64, ref->dp, total, 1e-4, msg,
                             sizeof msg))
      note(vd, "%s: %s", "d(parameters) summed", msg);
  }
  free(gall);
  result = sg_test_all(MPI_COMM_WORLD, vd->bad == 0);
done:
  sg_tape_destroy(&tape);
  sg_var_release(&x);
  sg_fno_destroy(&m);
  sg_mesh_destroy(&self);
  sg_test_buf_free(&xv), sg_test_buf_free(&xg), sg_test_buf_free(&pv),
      sg_test_buf_free(&pg);
  sg_test_buf_free(&sb);
  return result;
}

/* ---- the spectral convolution on its own (sg_ag_spectral_conv) ------------------------ */

/* One spectral convolution (modes 2x2, replicated W) forward/backward on
 * mesh (NULL: a mesh over MPI_COMM_SELF) in dtype dt with the case's global
 * input; compares with (or fills) ref: y, dx and dW summed over the ranks. */
int run_spectral(const op_case *c, sg_dtype dt, sg_mesh_t mesh, fno_ref *ref,
                 const double *gx, verdict *vd) {
  sg_mesh_t self = NULL;
  sg_spectral_conv_t conv = NULL;
  sg_tape_t tape = NULL;
  sg_test_buf xv, xg, wv, wg, sb;
  sg_var x, w, *y = NULL;
  int result = 0;
  memset(&x, 0, sizeof x), memset(&w, 0, sizeof w);
  memset(&xv, 0, sizeof xv), memset(&xg, 0, sizeof xg),
      memset(&wv, 0, sizeof wv);
  memset(&wg, 0, sizeof wg), memset(&sb, 0, sizeof sb);
  const int64_t N = c->act[0][0], CIN = c->act[0][1], NY = c->act[0][2],
                NX = c->act[0][3];
  const int64_t COUT = c->iattr;
  sg_status st = SG_OK;
  if (!mesh) st = sg_mesh_create(MPI_COMM_SELF, "h=1", &self);
  sg_mesh_t use = mesh ? mesh : self;
  int64_t b0 = 0, nb = N;
  int dpd = use ? sg_mesh_find_dim(use, "dp") : -1;
  if (dpd >= 0) {
    int p = sg_mesh_dim_size(use, dpd), k = sg_mesh_coord(use, dpd);
    nb = N / p + (k < N % p);
    b0 = k * (N / p) + (k < N % p ? k : N % p);
  }
  sg_fft_desc d;
  sg_fft_desc_init(&d);
  d.dtype = dt, d.ndim = 2, d.shape[0] = NY, d.shape[1] = NX, d.batch = nb;
  d.keep[0] = d.keep[1] = 2;
  static const char *const hw[2] = {"h", "w"};
  MPI_Comm axes[2], comm = MPI_COMM_NULL;
  unsigned mask = 0;
  if (st == SG_OK)
    st = sg_fft_mesh_axes(use, 2, hw, axes, d.split, &comm, &mask);
  if (st == SG_OK)
    st = sg_spectral_conv_create_comms(comm, 2, axes, &d, CIN, COUT, &conv);
  if (!sg_test_all(MPI_COMM_WORLD, st == SG_OK)) {
    note(vd, "%s: %s", "sg_spectral_conv_create", sg_last_error());
    goto done;
  }
  int64_t o2[2], s2[2];
  sg_fft_plan_local_box(sg_spectral_conv_plan(conv, 0), SG_FFT_SPACE_REAL, o2,
                        s2);
  int64_t off[4] = {b0, 0, o2[0], o2[1]}, shape[4] = {nb, CIN, s2[0], s2[1]};
  const int64_t gshape[4] = {N, CIN, NY, NX}, nloc = sg_test_numel(4, shape);
  const int64_t nw = sg_spectral_conv_weight_count(conv);
  st = sg_test_buf_alloc(&xv, dt, nloc);
  if (st == SG_OK) st = sg_test_buf_alloc(&xg, dt, nloc);
  if (st == SG_OK) st = sg_test_buf_alloc(&wv, dt, nw);
  if (st == SG_OK) st = sg_test_buf_alloc(&wg, dt, nw);
  if (st == SG_OK) {
    sg_test_box_copy(4, gshape, off, shape, (double *)gx, xv.data, dt, 0);
    for (int64_t k = 0; k < nw; ++k) /* the same W on every rank */
      sg_test_set(wv.data, dt, k, sg_test_rand(0x5BEC, k, -0.5, 0.5));
    st = sg_var_init(&x, "x", dt, 4, shape, xv.data, 1);
  }
  if (st == SG_OK) {
    x.grad = x.value, x.grad.data = xg.data, x.grad.owns = 0;
    st = sg_var_init_param(&w, "W", dt, 1, &nw, wv.data, wg.data);
  }
  if (st == SG_OK) st = sg_tape_create(&tape);
  if (!sg_test_all(MPI_COMM_WORLD, st == SG_OK)) {
    note(vd, "%s: %s", "setup", sg_last_error());
    goto done;
  }
  st = sg_ag_spectral_conv(tape, conv, &x, &w, &y);
  if (st == SG_OK) mark_seen(y, 0);
  if (!sg_test_all(MPI_COMM_WORLD, st == SG_OK)) {
    note(vd, "%s: %s", "forward",
         st != SG_OK ? sg_last_error() : "failed on another rank");
    goto done;
  }
  const double tol = dt == SG_DTYPE_F32 ? 1e-4 : 1e-10;
  int64_t yshape[4] = {nb, COUT, s2[0], s2[1]}, ygshape[4] = {N, COUT, NY, NX};
  const int64_t ny = sg_test_numel(4, yshape), nyg = sg_test_numel(4, ygshape);
  char msg[300];
  if (!mesh) {
    ref->y = malloc((size_t)nyg * sizeof(double));
    for (int64_t k = 0; k < nyg; ++k)
      ref->y[k] = sg_test_get(y->value.data, dt, k);
  } else {
    double *want = malloc((size_t)(ny ? ny : 1) * sizeof *want);
    sg_test_box_copy(4, ygshape, off, yshape, ref->y, want, SG_DTYPE_F64, 0);
    if (sg_test_cmp_ref(y->value.data, dt, want, ny, tol, msg, sizeof msg))
      note(vd, "%s: %s", "output", msg);
    free(want);
  }
  double *seed = malloc((size_t)nyg * sizeof *seed);
  for (int64_t k = 0; k < nyg; ++k)
    seed[k] = sg_test_rand(0xF00u, k, -1.0, 1.0);
  st = sg_test_buf_alloc(&sb, dt, ny);
  if (st == SG_OK)
    sg_test_box_copy(4, ygshape, off, yshape, seed, sb.data, dt, 0);
  free(seed);
  sg_tensor sd = y->value;
  sd.data = sb.data, sd.owns = 0;
  if (st == SG_OK)
    st = op_table_backward(tape, 1, &y, &sd, mesh && dt == SG_DTYPE_F64);
  if (!sg_test_all(MPI_COMM_WORLD, st == SG_OK)) {
    note(vd, "%s: %s", "backward",
         st != SG_OK ? sg_last_error() : "failed on another rank");
    goto done;
  }
  if (!sg_test_buf_guards_ok(&xv) || !sg_test_buf_guards_ok(&xg) ||
      !sg_test_buf_guards_ok(&wv) || !sg_test_buf_guards_ok(&wg))
    note(vd, "%s%s", "guard values overwritten", NULL);
  const int64_t nxg = sg_test_numel(4, gshape);
  double *gw = malloc((size_t)nw * sizeof *gw);
  for (int64_t k = 0; k < nw; ++k) gw[k] = sg_test_get(wg.data, dt, k);
  if (!mesh) {
    ref->dx = malloc((size_t)nxg * sizeof(double));
    for (int64_t k = 0; k < nxg; ++k) ref->dx[k] = sg_test_get(xg.data, dt, k);
    ref->np = nw;
    ref->dp = gw;
    gw = NULL;
  } else {
    double *want = malloc((size_t)(nloc ? nloc : 1) * sizeof *want);
    sg_test_box_copy(4, gshape, off, shape, ref->dx, want, SG_DTYPE_F64, 0);
    if (sg_test_cmp_ref(xg.data, dt, want, nloc, tol, msg, sizeof msg))
      note(vd, "%s: %s", "d(input)", msg);
    free(want);
    sum_all(gw, nw, MPI_COMM_WORLD); /* W is replicated: partial sums */
    if (sg_test_cmp_ref(gw, SG_DTYPE_F64, ref->dp, nw, tol, msg, sizeof msg))
      note(vd, "%s: %s", "d(W) summed", msg);
  }
  free(gw);
  result = sg_test_all(MPI_COMM_WORLD, vd->bad == 0);
done:
  sg_tape_destroy(&tape);
  sg_var_release(&x);
  sg_var_release(&w);
  sg_spectral_conv_destroy(&conv);
  sg_mesh_destroy(&self);
  sg_test_buf_free(&xv), sg_test_buf_free(&xg), sg_test_buf_free(&wv),
      sg_test_buf_free(&wg);
  sg_test_buf_free(&sb);
  return result;
}
