/* Two-step checkpoint test across process counts: "write PATH" on 4 ranks
 * (a 2x2 split of the 2-D and 3-D arrays), then "read PATH" on 1, 2 and 3
 * ranks, bit for bit (CTest fixture: the readers require the writer). */
#include "ckpt_test_util.h"
#include "sg_test.h"

#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  if (argc < 3 || (strcmp(argv[1], "write") && strcmp(argv[1], "read"))) {
    SG_CHECK(0, "usage: test_ckpt_pair write|read PATH");
    return sg_test_finish();
  }
  if (!sg_nc_backend_available(SG_NC_BACKEND_AUTO, 1)) {
    sg_test_skip("no parallel NetCDF backend built");
    return sg_test_finish();
  }
  const char *path = argv[2];
  int writing = strcmp(argv[1], "write") == 0;
  int grid = writing && sg_test_size == 4 ? 2 : 1;
  sg_ckpt_array a[CKT_N];
  void *bufs[CKT_N];
  ckt_arrays(sg_test_rank, sg_test_size, grid, 0, a, bufs);
  sg_ckpt_meta m;
  if (writing) {
    for (int k = 0; k < CKT_N; ++k) ckt_fill(k, &a[k].shard, bufs[k]);
    char mesh[32];
    snprintf(mesh, sizeof mesh, "h=%d,w=%d", grid, sg_test_size / grid);
    ckt_meta(&m, 777, mesh);
    SG_CHECK_OK(sg_ckpt_write(MPI_COMM_WORLD, path, CKT_N, a, &m, NULL));
  } else {
    memset(&m, 0, sizeof m);
    SG_CHECK_OK(sg_ckpt_read(MPI_COMM_WORLD, path, CKT_N, a, &m));
    for (int k = 0; k < CKT_N; ++k) {
      int64_t n = sg_nc_shard_numel(&a[k].shard);
      size_t es = sg_dtype_size(a[k].shard.dtype);
      void *want = calloc((size_t)(n ? n : 1), es);
      ckt_fill(k, &a[k].shard, want);
      SG_CHECK(sg_test_cmp_bytes(a[k].name, bufs[k], want, (size_t)n * es) == 0,
               "%s differs", a[k].name);
      free(want);
    }
    SG_CHECK(m.step == 777 && m.data_position == 777 * 32, "step %lld",
             (long long)m.step);
    SG_CHECK(strcmp(m.mesh, "h=2,w=2") == 0,
             "written on mesh %s, expected h=2,w=2", m.mesh);
    free(m.config);
  }
  for (int k = 0; k < CKT_N; ++k) free(bufs[k]);
  return sg_test_finish();
}
