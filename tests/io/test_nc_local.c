/* The io layer's per-rank paths (tests/io, 1-4 ranks): a read-only file is
 * opened by every rank on its own (MPI_COMM_SELF), the direct reads and
 * writes go through per-rank MPI-IO handles, a file written only by direct
 * writes is synced through those handles, and the agreements wait with
 * MPI_Test + yields (or MPI_Wait with SG_IO_WAIT=spin: a second CTest run).
 * Shown here on small files:
 *  - a file written on all ranks read on fewer (every k < size), split on
 *    lat and on lon, 2-D and 3-D, bit for bit;
 *  - direct reads of contiguous slabs (split on lat), of non-contiguous
 *    ones (split on lon: the file-view path) and of record variables, and
 *    reads through PnetCDF on the per-rank handle (no_direct_read), equal
 *    the values written, for each backend;
 *  - sync after direct-only writes, then after a record write (through
 *    PnetCDF), then reading everything back;
 *  - files created with per-rank handles (PnetCDF: rank 0 the file, the
 *    others copies of its header): read back before closing, a header
 *    that outgrows its reserve after the data are written, and the
 *    collective create when one rank cannot make its copy;
 *  - failures seen by one rank only: a missing file on the last rank, the
 *    ranks opening different kinds of files, a frame outside the file on
 *    the last rank, a shape mismatch on rank 0: the same error on every
 *    rank, no hang, and the file handles still usable afterwards. */
#include "sg_nc.h"
#include "sg_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NT = 3, NY = 10, NX = 12 };

static float val(int t, int y, int x) {
  return (float)(t * 10000 + y * 100 + x);
}

static void expect_all(sg_status got, sg_status want, const char *needle,
                       const char *what) {
  SG_CHECK(got == want, "%s: got %s, expected %s (%s)", what,
           sg_status_name(got), sg_status_name(want), sg_last_error());
  if (needle && got == want)
    SG_CHECK(strstr(sg_last_error(), needle) != NULL,
             "%s: message '%s' lacks '%s'", what, sg_last_error(), needle);
  SG_CHECK(sg_test_all(MPI_COMM_WORLD, got == want), "%s: not on every rank",
           what);
}

/* fixed (lat, lon) "f" and record (time, lat, lon) "r", f32; f is written
 * split on lat (direct write), r frame by frame split on lon */
static void write_file(const char *path, sg_nc_backend b) {
  sg_nc_t f = NULL;
  sg_nc_create_opts co = sg_nc_create_opts_default();
  co.backend = b;
  co.overwrite = 1;
  float *buf = malloc(sizeof(float) * NY * NX);
  SG_REQUIRE_OK(sg_nc_create(MPI_COMM_WORLD, path, &co, &f));
  int vt = -1, vf = -1, vr = -1;
  SG_CHECK_OK(sg_nc_def_coord(f, "time", SG_NC_UNLIMITED, "hours", "time", "T",
                              NULL, &vt));
  SG_CHECK_OK(sg_nc_def_dim(f, "lat", NY, NULL));
  SG_CHECK_OK(sg_nc_def_dim(f, "lon", NX, NULL));
  const char *d2[2] = {"lat", "lon"}, *d3[3] = {"time", "lat", "lon"};
  SG_CHECK_OK(sg_nc_def_var(f, "f", SG_DTYPE_F32, 2, d2, NULL, &vf));
  SG_CHECK_OK(sg_nc_def_var(f, "r", SG_DTYPE_F32, 3, d3, NULL, &vr));
  SG_REQUIRE_OK(sg_nc_enddef(f));
  int64_t gs[2] = {NY, NX};
  sg_nc_shard s;
  sg_nc_shard_split(2, gs, SG_DTYPE_F32, 0, sg_test_size, sg_test_rank, &s);
  for (int64_t y = 0; y < s.count[0]; ++y)
    for (int x = 0; x < NX; ++x)
      buf[y * NX + x] = val(-1, (int)(s.start[0] + y), x);
  SG_CHECK_OK(sg_nc_write(f, vf, &s, buf));
  SG_CHECK_OK(sg_nc_sync(f)); /* direct writes only so far */
  sg_nc_shard_split(2, gs, SG_DTYPE_F32, 1, sg_test_size, sg_test_rank, &s);
  sg_nc_shard s0;
  memset(&s0, 0, sizeof s0);
  s0.dtype = SG_DTYPE_F64;
  for (int t = 0; t < NT; ++t) {
    for (int y = 0; y < NY; ++y)
      for (int64_t x = 0; x < s.count[1]; ++x)
        buf[y * s.count[1] + x] = val(t, y, (int)(s.start[1] + x));
    SG_CHECK_OK(sg_nc_write_frame(f, vr, -1, &s, buf, NULL));
    double tv = 6.0 * t;
    SG_CHECK_OK(sg_nc_write_frame(f, vt, t, &s0, &tv, NULL));
  }
  SG_CHECK_OK(sg_nc_sync(f)); /* after writes through the library */
done:
  SG_CHECK_OK(sg_nc_close(&f));
  free(buf);
}

/* read f and r split on dim `split` of (lat, lon) and compare */
static void check_reads(const char *path, sg_nc_backend b, int split,
                        int no_direct) {
  sg_nc_t f = NULL;
  sg_nc_open_opts oo = sg_nc_open_opts_default();
  oo.backend = b;
  oo.no_direct_read = no_direct;
  float *out = malloc(sizeof(float) * NY * NX);
  SG_REQUIRE_OK(sg_nc_open(MPI_COMM_WORLD, path, &oo, &f));
  sg_nc_var_info vf, vr;
  SG_REQUIRE_OK(sg_nc_inq_var(f, "f", &vf));
  SG_REQUIRE_OK(sg_nc_inq_var(f, "r", &vr));
  SG_CHECK(vr.shape[0] == NT, "%lld records", (long long)vr.shape[0]);
  int64_t gs[2] = {NY, NX};
  sg_nc_shard s;
  sg_nc_shard_split(2, gs, SG_DTYPE_F32, split, sg_test_size, sg_test_rank, &s);
  int bad = 0;
  for (int t = -1; t < NT; ++t) {
    memset(out, 0, sizeof(float) * NY * NX);
    if (t < 0)
      SG_CHECK_OK(sg_nc_read(f, vf.varid, &s, NULL, out, NULL));
    else
      SG_CHECK_OK(sg_nc_read_frame(f, vr.varid, t, &s, NULL, out, NULL));
    for (int64_t y = 0; y < s.count[0]; ++y)
      for (int64_t x = 0; x < s.count[1]; ++x)
        bad += out[y * s.count[1] + x] !=
               val(t, (int)(s.start[0] + y), (int)(s.start[1] + x));
  }
  SG_CHECK(bad == 0, "%s split %d no_direct %d: %d wrong values",
           sg_nc_backend_name(b), split, no_direct, bad);
  /* a frame outside the file on the last rank only */
  expect_all(sg_nc_read_frame(f, vr.varid,
                              sg_test_rank == sg_test_size - 1 ? NT : 0, &s,
                              NULL, out, NULL),
             SG_ERR_SHAPE, "frame", "frame outside the file on the last rank");
  /* a shape mismatch on rank 0 only */
  sg_nc_shard bad_s = s;
  if (sg_test_rank == 0) bad_s.global_shape[1] = NX + 1;
  expect_all(sg_nc_read(f, vf.varid, &bad_s, NULL, out, NULL), SG_ERR_SHAPE,
             "length", "shape mismatch on rank 0");
  /* still usable */
  SG_CHECK_OK(sg_nc_read(f, vf.varid, &s, NULL, out, NULL));
done:
  SG_CHECK_OK(sg_nc_close(&f));
  free(out);
}

/* The file written on all ranks, read on the first k ranks (k < size: a
 * different rank count), split on lat and on lon, bit for bit. */
static void read_on_fewer(const char *path, sg_nc_backend b, int k) {
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, sg_test_rank < k ? 0 : MPI_UNDEFINED,
                 sg_test_rank, &sub);
  if (sub == MPI_COMM_NULL) return;
  float *out = malloc(sizeof(float) * NT * NY * NX);
  sg_nc_t f = NULL;
  sg_nc_open_opts oo = sg_nc_open_opts_default();
  oo.backend = b;
  int bad = 0;
  SG_REQUIRE_OK(sg_nc_open(sub, path, &oo, &f));
  sg_nc_var_info vf, vr;
  SG_REQUIRE_OK(sg_nc_inq_var(f, "f", &vf));
  SG_REQUIRE_OK(sg_nc_inq_var(f, "r", &vr));
  for (int split = 0; split < 2; ++split) {
    int64_t g2[2] = {NY, NX}, g3[3] = {NT, NY, NX};
    sg_nc_shard s2, s3;
    sg_nc_shard_split(2, g2, SG_DTYPE_F32, split, k, sg_test_rank, &s2);
    sg_nc_shard_split(3, g3, SG_DTYPE_F32, split + 1, k, sg_test_rank, &s3);
    SG_CHECK_OK(sg_nc_read(f, vf.varid, &s2, NULL, out, NULL));
    for (int64_t y = 0; y < s2.count[0]; ++y)
      for (int64_t x = 0; x < s2.count[1]; ++x)
        bad += out[y * s2.count[1] + x] !=
               val(-1, (int)(s2.start[0] + y), (int)(s2.start[1] + x));
    SG_CHECK_OK(sg_nc_read(f, vr.varid, &s3, NULL, out, NULL));
    for (int t = 0; t < NT; ++t)
      for (int64_t y = 0; y < s3.count[1]; ++y)
        for (int64_t x = 0; x < s3.count[2]; ++x)
          bad += out[(t * s3.count[1] + y) * s3.count[2] + x] !=
                 val(t, (int)(s3.start[1] + y), (int)(s3.start[2] + x));
  }
  SG_CHECK(bad == 0, "%s written on %d ranks, read on %d: %d wrong values",
           sg_nc_backend_name(b), sg_test_size, k, bad);
done:
  SG_CHECK_OK(sg_nc_close(&f));
  free(out);
  MPI_Comm_free(&sub);
}

static void test_backend(sg_nc_backend b, const char *other) {
  if (!sg_nc_backend_available(b, 1)) return;
  char path[128];
  snprintf(path, sizeof path, "local_%s_np%d.nc", sg_nc_backend_name(b),
           sg_test_size);
  write_file(path, b);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int split = 0; split < 2; ++split) {
    check_reads(path, b, split, 0);
    if (b == SG_NC_BACKEND_PNETCDF) check_reads(path, b, split, 1);
  }
  for (int k = 1; k < sg_test_size; ++k) read_on_fewer(path, b, k);
  /* the last rank names a file that does not exist */
  sg_nc_t f = NULL;
  const char *p = sg_test_rank == sg_test_size - 1 ? "local_missing.nc" : path;
  expect_all(sg_nc_open(MPI_COMM_WORLD, p, NULL, &f), SG_ERR_IO, "no such file",
             "missing file on the last rank");
  SG_CHECK(f == NULL, "handle set on failure");
  /* rank 0 opens a file of the other kind (auto backend) */
  if (other && sg_test_size > 1) {
    p = sg_test_rank == 0 ? other : path;
    expect_all(sg_nc_open(MPI_COMM_WORLD, p, NULL, &f), SG_ERR_IO,
               "different files", "different kinds of file");
    SG_CHECK(f == NULL, "handle set on failure");
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/* Created with per-rank handles (rank 0 the file, the others header
 * copies): read back before closing (the file is reopened collectively),
 * an attribute that outgrows the reserved header space after the data are
 * written (rank 0's enddef moves the data; every rank's offsets follow),
 * and the fallback to a collective create when one rank cannot make its
 * copy (TMPDIR missing on the last rank). */
static void test_create_paths(int variant) {
  if (!sg_nc_backend_available(SG_NC_BACKEND_PNETCDF, 1)) return;
  char path[128];
  snprintf(path, sizeof path, "local_create%d_np%d.nc", variant, sg_test_size);
  char *old_tmp = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
  if (variant == 2 && sg_test_rank == sg_test_size - 1)
    setenv("TMPDIR", "/nonexistent/sg-io-test", 1);
  sg_nc_t f = NULL;
  sg_nc_create_opts co = sg_nc_create_opts_default();
  co.backend = SG_NC_BACKEND_PNETCDF;
  co.overwrite = 1;
  co.header_reserve = 1024;
  float *buf = malloc(sizeof(float) * NY * NX),
        *out = malloc(sizeof(float) * NY * NX);
  char *big = malloc(200000);
  memset(big, 'a', 199999);
  big[199999] = '\0';
  SG_REQUIRE_OK(sg_nc_create(MPI_COMM_WORLD, path, &co, &f));
  if (old_tmp)
    setenv("TMPDIR", old_tmp, 1);
  else
    unsetenv("TMPDIR");
  int vf = -1, vg = -1;
  SG_CHECK_OK(sg_nc_def_dim(f, "lat", NY, NULL));
  SG_CHECK_OK(sg_nc_def_dim(f, "lon", NX, NULL));
  const char *d2[2] = {"lat", "lon"};
  SG_CHECK_OK(sg_nc_def_var(f, "f", SG_DTYPE_F32, 2, d2, NULL, &vf));
  SG_CHECK_OK(sg_nc_def_var(f, "g", SG_DTYPE_F64, 2, d2, NULL, &vg));
  SG_REQUIRE_OK(sg_nc_enddef(f));
  int64_t gs[2] = {NY, NX};
  sg_nc_shard s;
  sg_nc_shard_split(2, gs, SG_DTYPE_F32, 0, sg_test_size, sg_test_rank, &s);
  for (int64_t y = 0; y < s.count[0]; ++y)
    for (int x = 0; x < NX; ++x)
      buf[y * NX + x] = val(7, (int)(s.start[0] + y), x);
  SG_CHECK_OK(sg_nc_write(f, vf, &s, buf));
  if (variant == 1) /* outgrow the header: the data move */
    SG_CHECK_OK(sg_nc_put_att_text(f, SG_NC_GLOBAL, "history", big));
  int bad = 0;
  if (variant != 1) { /* read back before closing */
    memset(out, 0, sizeof(float) * NY * NX);
    SG_CHECK_OK(sg_nc_read(f, vf, &s, NULL, out, NULL));
    for (int64_t i = 0; i < s.count[0] * NX; ++i) bad += out[i] != buf[i];
  }
  SG_CHECK_OK(sg_nc_close(&f));
  sg_nc_open_opts oo = sg_nc_open_opts_default();
  SG_REQUIRE_OK(sg_nc_open(MPI_COMM_WORLD, path, &oo, &f));
  sg_nc_shard_split(2, gs, SG_DTYPE_F32, 1, sg_test_size, sg_test_rank, &s);
  memset(out, 0, sizeof(float) * NY * NX);
  SG_CHECK_OK(sg_nc_read(f, vf, &s, NULL, out, NULL));
  for (int y = 0; y < NY; ++y)
    for (int64_t x = 0; x < s.count[1]; ++x)
      bad += out[y * s.count[1] + x] != val(7, y, (int)(s.start[1] + x));
  if (variant == 1) {
    int64_t n = 0;
    SG_CHECK_OK(sg_nc_inq_att(f, SG_NC_GLOBAL, "history", &n));
    SG_CHECK(n == 199999, "history attribute length %lld", (long long)n);
  }
  SG_CHECK(bad == 0, "create variant %d: %d wrong values", variant, bad);
done:
  sg_nc_close(&f);
  free(buf);
  free(out);
  free(big);
  free(old_tmp);
  MPI_Barrier(MPI_COMM_WORLD);
  if (sg_test_rank == 0) remove(path);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  char pn[128], n4[128];
  snprintf(pn, sizeof pn, "local_pnetcdf_np%d.nc", sg_test_size);
  snprintf(n4, sizeof n4, "local_netcdf4_np%d.nc", sg_test_size);
  int both = sg_nc_backend_available(SG_NC_BACKEND_PNETCDF, 1) &&
             sg_nc_backend_available(SG_NC_BACKEND_NETCDF4, 1);
  /* netCDF-4 first so the PnetCDF pass can name it as the other kind */
  test_backend(SG_NC_BACKEND_NETCDF4, NULL);
  test_backend(SG_NC_BACKEND_PNETCDF, both ? n4 : NULL);
  for (int variant = 0; variant < 3; ++variant) test_create_paths(variant);
  MPI_Barrier(MPI_COMM_WORLD);
  if (sg_test_rank == 0) {
    remove(pn);
    remove(n4);
  }
  return sg_test_finish();
}
