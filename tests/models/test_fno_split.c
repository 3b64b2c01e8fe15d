/* The FNO on splits that leave a domain rank without rows or columns
 * (issue 20, defect 6): a 2x32 or 3x32 grid on h=4, a 32x3 grid on w=4.
 * sg_fno_create must fail with SG_ERR_CONFIG on every rank, with a message
 * that says so, before any transpose (it hung: the empty ranks failed in
 * the forward and the others waited in the FFT redistribution). A grid with
 * one row or column per rank (4x32 on h=4) still trains a step, and on one
 * rank every grid does. With a 20 s timeout (sg_comm_set_timeout) a hang
 * would fail as SG_ERR_TIMEOUT instead of running into ctest's limit. */
#include "sg_comm.h"
#include "sg_fno.h"
#include "sg_mesh.h"
#include "sg_test.h"

#include <stdlib.h>
#include <string.h>

/* create, bind, init, one forward + backward on the local block */
static sg_status fno_step(sg_mesh_t mesh, int64_t ny, int64_t nx) {
  sg_status st = SG_OK;
  sg_fno_t m = NULL;
  sg_tape_t tape = NULL;
  float *params = NULL, *grads = NULL, *xb = NULL;
  sg_var x, *y = NULL, *loss = NULL;
  memset(&x, 0, sizeof x);
  sg_fno_config c = sg_fno_defaults();
  c.width = 4, c.modes1 = 1, c.modes2 = 1, c.layers = 1, c.proj_width = 4;
  SG_TRY(sg_fno_create(mesh, &c, ny, nx, 1, &m));
  int64_t np = sg_fno_param_count(m);
  params = calloc((size_t)np, sizeof *params),
  grads = calloc((size_t)np, sizeof *grads);
  if (!params || !grads) SG_RAISE(SG_ERR_ALLOC, "test: out of memory");
  SG_TRY(sg_fno_bind(m, params, grads));
  SG_TRY(sg_fno_init(m, 7));
  int64_t y0, ly, x0, lx;
  sg_fno_box(m, &y0, &ly, &x0, &lx);
  int64_t shape[4] = {1, 1, ly, lx}; /* the FNO takes the plain local block */
  xb = calloc((size_t)(ly * lx) + 1, sizeof *xb);
  if (!xb) SG_RAISE(SG_ERR_ALLOC, "test: out of memory");
  for (int64_t i = 0; i < ly * lx; ++i) xb[i] = 0.01f * (float)i;
  SG_TRY(sg_var_init(&x, "x", SG_DTYPE_F32, 4, shape, xb, 0));
  SG_TRY(sg_tape_create(&tape));
  SG_TRY(sg_fno_forward(m, tape, &x, &y));
  SG_TRY(sg_ag_loss(tape, SG_LOSS_MEAN, y, NULL, &loss));
  SG_TRY(sg_tape_backward(tape, loss));
fail:
  sg_tape_destroy(&tape);
  sg_var_release(&x);
  sg_fno_destroy(&m);
  free(params), free(grads), free(xb);
  return st;
}

static void expect(const char *spec, int64_t ny, int64_t nx, int ok) {
  sg_mesh_t mesh = NULL;
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  sg_clear_error();
  sg_status st = fno_step(mesh, ny, nx);
  if (ok) {
    SG_CHECK(st == SG_OK, "%lldx%lld on %s: %s: %s", (long long)ny,
             (long long)nx, spec, sg_status_name(st), sg_last_error());
  } else {
    SG_CHECK(st == SG_ERR_CONFIG,
             "%lldx%lld on %s: got %s (%s), expected SG_ERR_CONFIG",
             (long long)ny, (long long)nx, spec, sg_status_name(st),
             sg_last_error());
    SG_CHECK(strstr(sg_last_error(), "empty") != NULL,
             "%lldx%lld on %s: message '%s' does not say 'empty'",
             (long long)ny, (long long)nx, spec, sg_last_error());
    if (sg_test_rank == 0)
      printf("%lldx%lld on %s: %s\n", (long long)ny, (long long)nx, spec,
             sg_last_error());
  }
done:
  sg_mesh_destroy(&mesh);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  sg_comm_set_timeout(20.0); /* a regression fails in 20 s, naming the wait */
  if (sg_test_size == 4) {
    expect("h=4", 2, 32, 0);
    expect("h=4", 3, 32, 0);
    expect("w=4", 32, 3, 0);
    expect("dp=1,h=2,w=2", 32, 1, 0);
    expect("h=4", 4, 32, 1);
    expect("w=4", 32, 4, 1);
  } else if (sg_test_size == 1) {
    expect("h=1", 2, 32, 1);
    expect("h=1", 3, 32, 1);
    expect("w=1", 32, 3, 1);
  } else {
    sg_test_skip("runs at 1 and 4 ranks");
  }
  return sg_test_finish();
}
