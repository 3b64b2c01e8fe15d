/* Bad input gives a clear error on every rank, never a hang, and touches
 * nothing that exists: missing file, existing file without overwrite, not a
 * NetCDF file, missing variable, wrong number of dims, a shape mismatch on
 * one rank only (read and write), a periodic halo wider than the dim, a
 * malformed dim map, writing with the read-only backend. */
#include "io_test_util.h"
#include "sg_nc.h"
#include "sg_test.h"

#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path, long long *n) {
  FILE *fp = fopen(path, "rb");
  *n = -1;
  if (!fp) return NULL;
  fseek(fp, 0, SEEK_END);
  long sz = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  char *b = malloc((size_t)sz + 1);
  *n = (long long)fread(b, 1, (size_t)sz, fp);
  fclose(fp);
  return b;
}

/* All ranks got status `want` and a message containing `needle`. */
static void expect(sg_status got, sg_status want, const char *needle,
                   const char *what) {
  SG_CHECK(got == want, "%s: got %s, expected %s (%s)", what,
           sg_status_name(got), sg_status_name(want), sg_last_error());
  if (needle)
    SG_CHECK(strstr(sg_last_error(), needle) != NULL,
             "%s: message '%s' lacks '%s'", what, sg_last_error(), needle);
  SG_CHECK(sg_test_all(MPI_COMM_WORLD, got == want), "%s: not on every rank",
           what);
}

static void make_file(const char *path, sg_nc_backend b) {
  sg_nc_t f = NULL;
  sg_nc_create_opts co = sg_nc_create_opts_default();
  co.backend = b;
  co.overwrite = 1;
  SG_REQUIRE_OK(sg_nc_create(MPI_COMM_WORLD, path, &co, &f));
  const char *dims[3] = {"time", "lat", "lon"};
  int v = -1;
  SG_CHECK_OK(sg_nc_def_dim(f, "time", 4, NULL));
  SG_CHECK_OK(sg_nc_def_dim(f, "lat", 6, NULL));
  SG_CHECK_OK(sg_nc_def_dim(f, "lon", 8, NULL));
  SG_CHECK_OK(sg_nc_def_var(f, "t", SG_DTYPE_F32, 3, dims, NULL, &v));
  SG_REQUIRE_OK(sg_nc_enddef(f));
  int64_t gs[3] = {4, 6, 8};
  sg_nc_shard s;
  sg_nc_shard_split(3, gs, SG_DTYPE_F32, 1, sg_test_size, sg_test_rank, &s);
  float buf[4 * 6 * 8];
  for (int i = 0; i < 4 * 6 * 8; ++i) buf[i] = (float)(sg_test_rank * 1000 + i);
  SG_CHECK_OK(sg_nc_write(f, v, &s, buf));
done:
  SG_CHECK_OK(sg_nc_close(&f));
}

static void test_backend(sg_nc_backend b) {
  if (!sg_nc_backend_available(b, 1)) return;
  char path[128];
  snprintf(path, sizeof path, "err_%s_np%d.nc", sg_nc_backend_name(b),
           sg_test_size);
  make_file(path, b);
  MPI_Barrier(MPI_COMM_WORLD);
  long long n0 = 0, n1 = 0;
  char *before = slurp(path, &n0);

  /* an existing file without overwrite stays as it was */
  sg_nc_t f = NULL;
  sg_nc_create_opts co = sg_nc_create_opts_default();
  co.backend = b;
  expect(sg_nc_create(MPI_COMM_WORLD, path, &co, &f), SG_ERR_IO, "exists",
         "create over an existing file");
  SG_CHECK(f == NULL, "handle set on failure");

  /* malformed I/O hints (on the last rank only): a clear error everywhere,
   * before any file is touched */
  sg_nc_open_opts ho = sg_nc_open_opts_default();
  ho.hints = sg_test_rank == sg_test_size - 1 ? "romio_cb_read"
                                              : "romio_cb_read=disable";
  expect(sg_nc_open(MPI_COMM_WORLD, path, &ho, &f), SG_ERR_CONFIG, "key=value",
         "malformed open hints");
  SG_CHECK(f == NULL, "handle set on failure");
  co.overwrite = 1;
  co.hints = "cb_buffer_size=";
  expect(sg_nc_create(MPI_COMM_WORLD, path, &co, &f), SG_ERR_CONFIG,
         "key=value", "malformed create hints");
  SG_CHECK(f == NULL, "handle set on failure");
  co.overwrite = 0;
  co.hints = NULL;

  /* reads */
  SG_REQUIRE_OK(sg_nc_open(MPI_COMM_WORLD, path, NULL, &f));
  sg_nc_var_info vi;
  expect(sg_nc_inq_var(f, "nosuchvar", &vi), SG_ERR_INVALID_ARG, "nosuchvar",
         "missing variable");
  SG_REQUIRE_OK(sg_nc_inq_var(f, "t", &vi));
  int64_t gs2[2] = {6, 8}, gs3[3] = {4, 6, 8}, bad3[3] = {4, 6, 9};
  float out[4 * 10 * 20];
  sg_nc_shard s;
  sg_nc_shard_split(2, gs2, SG_DTYPE_F32, 0, sg_test_size, sg_test_rank, &s);
  expect(sg_nc_read(f, vi.varid, &s, NULL, out, NULL), SG_ERR_SHAPE, "3 dims",
         "wrong number of dims");
  sg_nc_shard_split(3, sg_test_rank == sg_test_size - 1 ? bad3 : gs3,
                    SG_DTYPE_F32, 1, sg_test_size, sg_test_rank, &s);
  expect(sg_nc_read(f, vi.varid, &s, NULL, out, NULL), SG_ERR_SHAPE, "length 8",
         "shape mismatch on the last rank");
  sg_nc_shard_split(3, gs3, SG_DTYPE_F32, 1, sg_test_size, sg_test_rank, &s);
  sg_nc_read_opts ro = sg_nc_read_opts_default();
  ro.periodic_lon = 1;
  ro.halo_lo[2] = ro.halo_hi[2] = 9;
  expect(sg_nc_read(f, vi.varid, &s, &ro, out, NULL), SG_ERR_HALO, "wider",
         "periodic halo wider than the dim");
  /* the file is still usable after the errors */
  ro.halo_lo[2] = ro.halo_hi[2] = 1;
  SG_CHECK_OK(sg_nc_read(f, vi.varid, &s, &ro, out, NULL));
  expect(sg_nc_write(f, vi.varid, &s, out), SG_ERR_INVALID_ARG, "read-only",
         "write to a read-only file");
  SG_CHECK_OK(sg_nc_close(&f));

  /* a bad write on one rank writes nothing anywhere */
  sg_nc_open_opts oo = sg_nc_open_opts_default();
  oo.writable = 1;
  SG_REQUIRE_OK(sg_nc_open(MPI_COMM_WORLD, path, &oo, &f));
  sg_nc_shard_split(3, gs3, SG_DTYPE_F32, 1, sg_test_size, sg_test_rank, &s);
  if (sg_test_rank == 0) s.start[2] = 5; /* [5, 13) outside [0, 8) */
  memset(out, 0, sizeof out);
  expect(sg_nc_write(f, vi.varid, &s, out), SG_ERR_SHAPE, "outside",
         "write out of bounds on rank 0");
  SG_CHECK_OK(sg_nc_close(&f));
  MPI_Barrier(MPI_COMM_WORLD);
  char *after = slurp(path, &n1);
  SG_CHECK(before && after && n0 == n1 &&
               memcmp(before, after, (size_t)n0) == 0,
           "%s changed by failed calls (%lld -> %lld bytes)", path, n0, n1);
  free(before);
  free(after);
done:
  sg_nc_close(&f);
  MPI_Barrier(MPI_COMM_WORLD);
  if (sg_test_rank == 0) remove(path);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  sg_nc_t f = NULL;
  expect(sg_nc_open(MPI_COMM_WORLD, "no/such/file.nc", NULL, &f), SG_ERR_IO,
         "no such file", "missing file");
  SG_CHECK(f == NULL, "handle set on failure");

  char junk[64];
  snprintf(junk, sizeof junk, "junk_np%d.nc", sg_test_size);
  if (sg_test_rank == 0) {
    FILE *fp = fopen(junk, "wb");
    if (fp) {
      fputs("this is not a netcdf file\n", fp);
      fclose(fp);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  expect(sg_nc_open(MPI_COMM_WORLD, junk, NULL, &f), SG_ERR_CORRUPT,
         "not a NetCDF file", "not a NetCDF file");
  MPI_Barrier(MPI_COMM_WORLD);
  if (sg_test_rank == 0) remove(junk);

  sg_nc_open_opts oo = sg_nc_open_opts_default();
  oo.dim_map = "COADSX=lon,COADSY";
  expect(sg_nc_open(MPI_COMM_WORLD, "whatever.nc", &oo, &f), SG_ERR_CONFIG,
         "FROM=to", "malformed dim map");

  sg_nc_create_opts co = sg_nc_create_opts_default();
  co.backend = SG_NC_BACKEND_SERIAL;
  expect(sg_nc_create(MPI_COMM_WORLD, "serial.nc", &co, &f),
         SG_ERR_NOT_SUPPORTED, "reads only", "create with the serial backend");

  test_backend(SG_NC_BACKEND_PNETCDF);
  test_backend(SG_NC_BACKEND_NETCDF4);
  return sg_test_finish();
}
