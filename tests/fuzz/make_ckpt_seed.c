/* Writes the seed checkpoint of the checkpoint fuzz target:
 *   make_ckpt_seed OUT.nc   (then compacted: ncdump OUT.nc | ncgen -k nc5)
 * so that the seed carries valid checksums for fuzz_ckpt's arrays. */
#include <stdio.h>

#include "fuzz_ckpt_arrays.h"

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  if (argc != 2) {
    fprintf(stderr, "usage: make_ckpt_seed OUT.nc\n");
    MPI_Finalize();
    return 2;
  }
  sg_ckpt_array a[FZ_CKPT_N];
  fz_ckpt_arrays(a);
  for (int i = 0; i < 12; ++i) fz_w[i] = 0.25f * (float)i - 1.0f;
  for (int i = 0; i < 5; ++i) fz_b[i] = 1.0 / (i + 1);
  fz_n[0] = 40;
  fz_n[1] = -7;
  sg_ckpt_meta meta;
  memset(&meta, 0, sizeof meta);
  meta.step = 40;
  meta.rng_seed = 1234;
  meta.n_rng_state = 2;
  meta.rng_state[0] = 5;
  meta.rng_state[1] = 0xdeadbeefULL;
  meta.data_position = 16;
  snprintf(meta.mesh, sizeof meta.mesh, "dp=1,h=1");
  meta.config = "model = fno\nwidth = 8\nlr = 1e-3\n";
  sg_status st = sg_ckpt_write(MPI_COMM_SELF, argv[1], FZ_CKPT_N, a, &meta,
                               NULL);
  if (st != SG_OK) fprintf(stderr, "%s\n", sg_last_error());
  MPI_Finalize();
  return st == SG_OK ? 0 : 1;
}
