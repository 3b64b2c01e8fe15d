/* Error paths of the FFT layer: every rank gets the error, none hangs (also
 * when only one rank passes a bad description); layout reports (the boxes
 * of all ranks tile the real and spectral spaces). */
#include <stdio.h>
#include <string.h>

#include "sg_config.h"
#include "sg_fft.h"
#include "sg_mesh.h"
#include "sg_spectral.h"
#include "sg_test.h"

static void base_desc(sg_fft_desc *d) {
  sg_fft_desc_init(d);
  d->ndim = 2;
  d->shape[0] = 12;
  d->shape[1] = 10;
  d->split[0] = 0;
  d->batch = 2;
  d->nthreads = 1;
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  sg_mesh_t mesh = NULL;
  char spec[64];
  snprintf(spec, sizeof spec, "h=%d,w=1", sg_test_size);
  SG_CHECK_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  sg_fft_desc d;
  sg_fft_plan_t plan = NULL;

  base_desc(&d);
  d.keep[0] = 7; /* > 12 / 2 */
  SG_CHECK_STATUS(sg_fft_plan_create(mesh, &d, &plan), SG_ERR_SHAPE);
  SG_CHECK(plan == NULL, "plan set on failure");
  SG_CHECK(strstr(sg_last_error(), "keep[0]") != NULL, "message: %s",
           sg_last_error());

  base_desc(&d);
  d.chunk = 3; /* does not divide the batch 2 */
  SG_CHECK_STATUS(sg_fft_plan_create(mesh, &d, &plan), SG_ERR_INVALID_ARG);
  SG_CHECK(plan == NULL, "plan set on failure");
  SG_CHECK(strstr(sg_last_error(), "chunk") != NULL, "message: %s",
           sg_last_error());

  base_desc(&d);
  d.split[1] = 0; /* both dims on one mesh dim */
  SG_CHECK_STATUS(sg_fft_plan_create(mesh, &d, &plan), SG_ERR_INVALID_ARG);

  base_desc(&d);
  d.split[1] = 5; /* no such mesh dim */
  SG_CHECK_STATUS(sg_fft_plan_create(mesh, &d, &plan), SG_ERR_INVALID_ARG);

  base_desc(&d);
  d.dtype = SG_DTYPE_I32;
  SG_CHECK_STATUS(sg_fft_plan_create(mesh, &d, &plan), SG_ERR_INVALID_ARG);

  /* only rank 0 is wrong: every rank fails, none hangs */
  base_desc(&d);
  if (sg_test_rank == 0) d.ndim = 4;
  sg_status st = sg_fft_plan_create(mesh, &d, &plan);
  SG_CHECK(st != SG_OK, "a peer's bad description must fail everywhere");
  SG_CHECK(strstr(sg_last_error(), "ndim") != NULL, "peer message: %s",
           sg_last_error());
  SG_CHECK(plan == NULL, "plan set on failure");

  /* CUDA plans: not built, or no device here */
  base_desc(&d);
  d.device.kind = SG_DEVICE_CUDA;
  st = sg_fft_plan_create(mesh, &d, &plan);
  SG_CHECK(st == (SG_HAVE_CUDA ? SG_ERR_NO_DEVICE : SG_ERR_NOT_SUPPORTED) ||
               (SG_HAVE_CUDA && st == SG_OK),
           "cuda plan: %s (%s)", sg_status_name(st), sg_last_error());
  sg_fft_plan_destroy(&plan);

  /* spectral conv: keep required */
  {
    sg_spectral_conv_t conv = NULL;
    base_desc(&d);
    SG_CHECK_STATUS(sg_spectral_conv_create(mesh, &d, 2, 3, &conv),
                    SG_ERR_INVALID_ARG);
    d.keep[0] = 2;
    d.keep[1] = 2;
    SG_CHECK_STATUS(sg_spectral_conv_create(mesh, &d, 0, 3, &conv),
                    SG_ERR_INVALID_ARG);
    SG_CHECK(conv == NULL, "conv set on failure");
    SG_CHECK_OK(sg_spectral_conv_destroy(&conv));
  }

  /* transposes: the axis must be the innermost splitter of a dim */
  {
    sg_fft_layout l;
    memset(&l, 0, sizeof l);
    l.ndim = 2;
    l.shape[0] = 8;
    l.shape[1] = 6;
    l.nsplit[0] = 2;
    l.split[0][0] = 0;
    l.split[0][1] = 1;
    sg_fft_transpose_t tr = NULL;
    SG_CHECK_STATUS(sg_fft_transpose_create(mesh, SG_DTYPE_F64, 1, 1, &l, 0, 1,
                                            &tr),
                    SG_ERR_INVALID_ARG);
    SG_CHECK_STATUS(sg_fft_transpose_create(mesh, SG_DTYPE_F64, 3, 1, &l, 1, 1,
                                            &tr),
                    SG_ERR_INVALID_ARG);
    SG_CHECK_OK(
        sg_fft_transpose_create(mesh, SG_DTYPE_F64, 2, 1, &l, 1, 1, &tr));
    sg_fft_transpose_destroy(&tr);
    SG_CHECK(tr == NULL, "destroy sets NULL");
  }

  /* layout reports: every rank's box, the boxes tile each space */
  {
    const int64_t shapes[3][3] = {{13, 10, 0}, {9, 12, 7}, {4, 3, 5}};
    for (int c = 0; c < 3; ++c) {
      base_desc(&d);
      d.ndim = c == 0 ? 2 : 3;
      for (int k = 0; k < d.ndim; ++k) d.shape[k] = shapes[c][k];
      d.split[0] = c == 2 ? -1 : 0;
      d.split[1] = c == 2 ? 0 : -1;
      if (c == 1) d.keep[1] = 2;
      SG_REQUIRE_OK(sg_fft_plan_create(mesh, &d, &plan));
      char text[1024];
      SG_CHECK_OK(sg_fft_plan_describe(plan, text, sizeof text));
      SG_CHECK(strstr(text, "r2c") != NULL, "describe: %s", text);
      for (int space = 0; space < 2; ++space) {
        sg_fft_layout l;
        sg_fft_plan_layout(plan, (sg_fft_space)space, &l);
        int64_t vol = 1, sum = 0, mo[3], ms[3];
        for (int k = 0; k < d.ndim; ++k) vol *= l.shape[k];
        sg_fft_plan_local_box(plan, (sg_fft_space)space, mo, ms);
        for (int r = 0; r < sg_test_size; ++r) {
          int coords[SG_MESH_MAX_DIMS] = {r, 0};
          int64_t o[3], s[3], v = 1;
          sg_fft_plan_box_of(plan, (sg_fft_space)space, coords, o, s);
          for (int k = 0; k < d.ndim; ++k) {
            v *= s[k];
            SG_CHECK(o[k] >= 0 && o[k] + s[k] <= l.shape[k], "box inside");
          }
          sum += v;
          if (r == sg_test_rank)
            for (int k = 0; k < d.ndim; ++k)
              SG_CHECK(o[k] == mo[k] && s[k] == ms[k], "own box");
        }
        SG_CHECK(sum == vol, "space %d: boxes cover %lld of %lld", space,
                 (long long)sum, (long long)vol);
      }
      if (c == 1) {
        /* kept modes of dim 1 (keep 2 of 12): 0, 1, -2, -1 */
        SG_CHECK(sg_fft_plan_freq(plan, 1, 0) == 0 &&
                     sg_fft_plan_freq(plan, 1, 1) == 1 &&
                     sg_fft_plan_freq(plan, 1, 2) == -2 &&
                     sg_fft_plan_freq(plan, 1, 3) == -1,
                 "kept frequencies");
        SG_CHECK(sg_fft_plan_freq(plan, 2, 3) == 3, "halved dim frequency");
        SG_CHECK(sg_fft_plan_freq(plan, 0, 8) == -1, "full dim frequency");
      }
      sg_fft_plan_destroy(&plan);
      SG_CHECK(plan == NULL, "destroy sets NULL");
    }
  }
  /* axes from named mesh dims: present dims give their communicator and
   * split d, absent ones MPI_COMM_NULL and -1; comm spans the present */
  {
    const char *const names[3] = {"w", "x", "h"};
    MPI_Comm axes[3], comm = MPI_COMM_NULL;
    int split[3], n0 = 0, n2 = 0, nc = 0;
    unsigned mask = 0;
    SG_REQUIRE_OK(sg_fft_mesh_axes(mesh, 3, names, axes, split, &comm, &mask));
    SG_CHECK(mask == 3u, "mask %u (mesh dims h=0, w=1)", mask);
    SG_CHECK(split[0] == 0 && split[1] == -1 && split[2] == 2, "split %d %d %d",
             split[0], split[1], split[2]);
    SG_CHECK(axes[1] == MPI_COMM_NULL && axes[0] != MPI_COMM_NULL &&
                 axes[2] != MPI_COMM_NULL,
             "axes");
    MPI_Comm_size(axes[0], &n0);
    MPI_Comm_size(axes[2], &n2);
    MPI_Comm_size(comm, &nc);
    SG_CHECK(n0 == 1 && n2 == sg_test_size && nc == sg_test_size,
             "sizes %d %d %d", n0, n2, nc);
    SG_CHECK_STATUS(sg_fft_mesh_axes(mesh, 0, names, axes, split, &comm, NULL),
                    SG_ERR_INVALID_ARG);
    SG_CHECK_STATUS(sg_fft_mesh_axes(mesh, 2, names, axes, NULL, &comm, NULL),
                    SG_ERR_INVALID_ARG);
  }
done:
  sg_fft_plan_destroy(&plan);
  sg_mesh_destroy(&mesh);
  return sg_test_finish();
}
