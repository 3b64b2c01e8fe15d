/* Data in and out of the tape without box arithmetic: a global field
 * scattered onto a mesh (sg_var_scatter) or read as NetCDF slabs
 * (sg_var_read_nc), run through a convolution and a loss, and the input's
 * gradient gathered back (sg_var_gather) equals one process's, on h=N,
 * w=N, dp=2,h=N/2 and uneven splits (3 ranks). f64. */
#include "sg_autograd.h"
#include "sg_comm.h"
#include "sg_device.h"
#include "sg_nc.h"
#include "sg_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N = 2, C = 2, K = 3, H = 7, W = 5 };

static double gx[N * C * H * W], gw[K * C * 9];

/* loss = sum(conv(x, w)^2); the input gradient lands in x->grad. */
static sg_status run(sg_var *x, double *loss, sg_tape_t tape) {
  sg_status st = SG_OK;
  sg_var w, *y = NULL, *y2 = NULL, *l = NULL;
  double wgrad[K * C * 9];
  memset(wgrad, 0, sizeof wgrad);
  const int64_t ws[4] = {K, C, 3, 3};
  SG_TRY(sg_var_init_param(&w, "w", SG_DTYPE_F64, 4, ws, gw, wgrad));
  const sg_window a[2] = {{.pad = {1, 1}, .boundary = SG_BOUNDARY_ZERO},
                          {.pad = {1, 1}, .boundary = SG_BOUNDARY_PERIODIC}};
  SG_TRY(sg_ag_conv(tape, x, &w, NULL, a, &y));
  SG_TRY(sg_ag_binary(tape, SG_BINARY_MUL, y, y, &y2));
  SG_TRY(sg_ag_loss(tape, SG_LOSS_SUM, y2, NULL, &l));
  *loss = sg_var_item(l);
  SG_TRY(sg_tape_backward(tape, l));
fail:
  sg_var_release(&w);
  return st;
}

static void check(const char *spec, const sg_placement *pl,
                  const double *ref_dx, double ref_loss, const char *ncpath) {
  sg_mesh_t mesh = NULL;
  sg_tape_t tape = NULL; /* its halo plans live on the mesh: destroyed first */
  sg_var x;
  memset(&x, 0, sizeof x);
  double *got = calloc(N * C * H * W, sizeof *got);
  const int64_t gs[4] = {N, C, H, W};
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(sg_tape_create(&tape));
  for (int from_nc = 0; from_nc < 2; ++from_nc) {
    if (from_nc && !ncpath) continue;
    sg_tensor g = sg_tensor_wrap(gx, SG_DTYPE_F64, sg_device_host(), 4, gs);
    if (!from_nc) {
      SG_REQUIRE_OK(sg_var_scatter(&x, "x", mesh, pl, SG_DTYPE_F64, 4, gs,
                                   sg_test_rank == 0 ? &g : NULL, 0, 1));
    } else {
      sg_nc_t f = NULL;
      SG_REQUIRE_OK(sg_nc_open(MPI_COMM_WORLD, ncpath, NULL, &f));
      sg_status st = sg_var_read_nc(&x, "x", mesh, pl, f, "x", SG_DTYPE_F64, 1);
      sg_nc_close(&f);
      SG_REQUIRE_OK(st);
    }
    double loss = 0;
    SG_REQUIRE_OK(run(&x, &loss, tape));
    SG_CHECK(fabs(loss - ref_loss) <= 1e-12 * fabs(ref_loss),
             "%s%s: loss %.17g vs %.17g", spec, from_nc ? " (NetCDF)" : "",
             loss, ref_loss);
    sg_tensor out = sg_tensor_wrap(got, SG_DTYPE_F64, sg_device_host(), 4, gs);
    memset(got, 0, sizeof(double) * N * C * H * W);
    SG_REQUIRE_OK(sg_var_gather(&x, 1, &out, -1));
    char what[96];
    snprintf(what, sizeof what, "dL/dx gathered on %s%s", spec,
             from_nc ? " (NetCDF)" : "");
    sg_test_cmp_f64(what, got, ref_dx, N * C * H * W, 1e-12, 1e-14);
    SG_REQUIRE_OK(
        sg_var_gather(&x, 0, &out, 0)); /* the value, on rank 0 only */
    if (sg_test_rank == 0)
      sg_test_cmp_f64("x gathered", got, gx, N * C * H * W, 0, 0);
    sg_var_release(&x);
  }
done:
  sg_var_release(&x);
  free(got);
  sg_tape_destroy(&tape);
  sg_mesh_destroy(&mesh);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  sg_tape_t tape = NULL;
  sg_var x;
  char ncpath[256] = "";
  const char *nc = NULL;
  memset(&x, 0, sizeof x);
  for (int i = 0; i < N * C * H * W; ++i) gx[i] = sin(0.37 * i + 0.2);
  for (int i = 0; i < K * C * 9; ++i) gw[i] = cos(0.53 * i);
  SG_REQUIRE_OK(sg_tape_create(&tape));
  /* one process: plain variables */
  const int64_t gs[4] = {N, C, H, W};
  double ref_dx[N * C * H * W], ref_loss = 0;
  SG_REQUIRE_OK(sg_var_init(&x, "x", SG_DTYPE_F64, 4, gs, gx, 1));
  SG_REQUIRE_OK(run(&x, &ref_loss, tape));
  memcpy(ref_dx, x.grad.data, sizeof ref_dx);
  sg_var_release(&x);
  /* the same field in a NetCDF file (when a parallel writer is built) */
  {
    snprintf(ncpath, sizeof ncpath, "test_var_io_%d.nc", sg_test_size);
    sg_nc_create_opts co = sg_nc_create_opts_default();
    co.overwrite = 1;
    sg_nc_t f = NULL;
    if (sg_nc_create(MPI_COMM_WORLD, ncpath, &co, &f) == SG_OK) {
      int id, vid;
      const char *dn[4] = {"n", "c", "y", "x"};
      for (int d = 0; d < 4; ++d)
        SG_REQUIRE_OK(sg_nc_def_dim(f, dn[d], gs[d], &id));
      SG_REQUIRE_OK(sg_nc_def_var(f, "x", SG_DTYPE_F64, 4, dn, NULL, &vid));
      SG_REQUIRE_OK(sg_nc_enddef(f));
      sg_nc_shard sh = {
          4, {N, C, H, W}, {0, 0, 0, 0}, {N, C, H, W}, SG_DTYPE_F64};
      if (sg_test_rank != 0) sh.count[0] = 0;
      SG_REQUIRE_OK(sg_nc_write(f, vid, &sh, gx));
      SG_REQUIRE_OK(sg_nc_close(&f));
      nc = ncpath;
    }
  }
  char spec[64];
  const int p = sg_test_size;
  snprintf(spec, sizeof spec, "h=%d", p);
  sg_placement ph[1] = {sg_shard(2)};
  check(spec, ph, ref_dx, ref_loss, nc);
  snprintf(spec, sizeof spec, "w=%d", p);
  sg_placement pw[1] = {sg_shard(3)};
  check(spec, pw, ref_dx, ref_loss, nc);
  if (p % 2 == 0) {
    snprintf(spec, sizeof spec, "dp=2,h=%d", p / 2);
    sg_placement pdh[2] = {sg_shard(0), sg_shard(2)};
    check(spec, pdh, ref_dx, ref_loss, nc);
  }
done:
  sg_tape_destroy(&tape);
  MPI_Barrier(MPI_COMM_WORLD);
  if (sg_test_rank == 0 && nc) unlink(nc);
  return sg_test_finish();
}
