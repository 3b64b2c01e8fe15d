/* A classic NetCDF header whose counts ask for more bytes than the file
 * has (found by fuzzing, tests/fuzz/regress): sg_nc_open and sg_ckpt_read
 * refuse it at once with SG_ERR_CORRUPT naming the file and the count.
 * Before, the header went to PnetCDF 1.12, which allocated and filled what
 * it said: a 1.6 KB file took 5 GB and 48 s, a 1 KB checkpoint 7.7 GB and
 * 89 s before failing. A record count past 2^62 once made the check give
 * up on the rest of the header: ckpt/oom_numrecs_attr_2gb took 2.2 GB and
 * 3.6 s before PnetCDF refused it.
 *   test_nc_corrupt_header NC_FILE CKPT_FILE...   (any number of ranks;
 *   every file is also opened by sg_nc_open) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sg_ckpt.h"
#include "sg_nc.h"
#include "sg_test.h"

static void check_open(const char *path, sg_nc_backend b) {
  sg_nc_open_opts oo = sg_nc_open_opts_default();
  oo.backend = b;
  sg_nc_t f = NULL;
  sg_status st = sg_nc_open(MPI_COMM_WORLD, path, &oo, &f);
  SG_CHECK(st == SG_ERR_CORRUPT, "%s (%s): %s: %s", path, sg_nc_backend_name(b),
           sg_status_name(st), sg_last_error());
  SG_CHECK(strstr(sg_last_error(), "corrupt NetCDF header") &&
               strstr(sg_last_error(), path),
           "message: %s", sg_last_error());
  SG_CHECK(f == NULL, "no handle on failure");
  if (f) sg_nc_close(&f);
}

static void check_ckpt(const char *path) {
  float w[12];
  double b[5];
  int64_t t[2];
  sg_ckpt_array a[3];
  memset(a, 0, sizeof a);
  const char *names[3] = {"layer0.w", "layer0.b", "adam.t"};
  void *data[3] = {w, b, t};
  const int64_t shape[3][2] = {{3, 4}, {5, 0}, {2, 0}};
  const sg_dtype dt[3] = {SG_DTYPE_F32, SG_DTYPE_F64, SG_DTYPE_I64};
  for (int i = 0; i < 3; ++i) {
    a[i].name = names[i];
    a[i].data = data[i];
    a[i].shard.ndims = i == 0 ? 2 : 1;
    a[i].shard.dtype = dt[i];
    for (int d = 0; d < a[i].shard.ndims; ++d)
      a[i].shard.global_shape[d] = a[i].shard.count[d] = shape[i][d];
  }
  /* every rank reads it whole (replicas are allowed when reading) */
  sg_ckpt_meta meta;
  memset(&meta, 0, sizeof meta);
  sg_status st = sg_ckpt_read(MPI_COMM_WORLD, path, 3, a, &meta);
  SG_CHECK(st == SG_ERR_CORRUPT, "%s: %s: %s", path, sg_status_name(st),
           sg_last_error());
  SG_CHECK(strstr(sg_last_error(), "corrupt NetCDF header") &&
               strstr(sg_last_error(), path),
           "message: %s", sg_last_error());
  free(meta.config);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  if (argc < 3) {
    fprintf(stderr, "usage: %s NC_FILE CKPT_FILE...\n", argv[0]);
    return 2;
  }
  for (int i = 1; i < argc; ++i) {
    check_open(argv[i], SG_NC_BACKEND_AUTO);
    if (sg_nc_backend_available(SG_NC_BACKEND_SERIAL, 0))
      check_open(argv[i], SG_NC_BACKEND_SERIAL);
  }
  for (int i = 2; i < argc; ++i) check_ckpt(argv[i]);
  return sg_test_finish();
}
