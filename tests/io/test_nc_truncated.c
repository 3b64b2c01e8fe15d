/* A truncated NetCDF file is an error naming the file on every rank, never
 * zeros: files written by the test (CDF-5 and CDF-2 through PnetCDF, with
 * a fixed and a record variable; netCDF-4) are cut with truncate(2) to
 * several lengths and read back whole, split over h (dim 1) and w (dim 2),
 * through PnetCDF (direct MPI-IO reads and ncmpi_iget), the netCDF-4
 * backend and the serial backend. A writer that fails leaves no file at
 * the path with sg_nc_create_opts.atomic (the failure is injected: a
 * write of a shard that does not fit, on one rank). */
#include "io_test_util.h"
#include "sg_nc.h"
#include "sg_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NT = 3, NY = 6, NX = 8 };

/* Write var "v" (fixed, NT x NY x NX) and "r" (record, time x NY x NX) of
 * f32 values 1 + global index; every rank writes a split over dim 1. */
static void write_file(const char *path, sg_nc_backend b, sg_nc_format fmt) {
  sg_nc_t f = NULL;
  sg_nc_create_opts co = sg_nc_create_opts_default();
  co.backend = b;
  co.format = fmt;
  co.overwrite = 1;
  int vv = -1, vr = -1;
  SG_REQUIRE_OK(sg_nc_create(MPI_COMM_WORLD, path, &co, &f));
  SG_REQUIRE_OK(sg_nc_def_dim(f, "t", NT, NULL));
  SG_REQUIRE_OK(sg_nc_def_dim(f, "time", SG_NC_UNLIMITED, NULL));
  SG_REQUIRE_OK(sg_nc_def_dim(f, "y", NY, NULL));
  SG_REQUIRE_OK(sg_nc_def_dim(f, "x", NX, NULL));
  const char *d1[3] = {"t", "y", "x"}, *d2[3] = {"time", "y", "x"};
  SG_REQUIRE_OK(sg_nc_def_var(f, "v", SG_DTYPE_F32, 3, d1, NULL, &vv));
  SG_REQUIRE_OK(sg_nc_def_var(f, "r", SG_DTYPE_F32, 3, d2, NULL, &vr));
  SG_REQUIRE_OK(sg_nc_enddef(f));
  int64_t g[3] = {NT, NY, NX};
  sg_nc_shard s;
  SG_REQUIRE_OK(
      sg_nc_shard_split(3, g, SG_DTYPE_F32, 1, sg_test_size, sg_test_rank, &s));
  float *buf = malloc((size_t)(NT * NY * NX) * sizeof *buf);
  for (int64_t i = 0; i < sg_nc_shard_numel(&s); ++i)
    buf[i] = (float)(1 + iot_global_index(3, g, s.start, s.count, i));
  SG_CHECK_OK(sg_nc_write(f, vv, &s, buf));
  sg_nc_shard fs;
  int64_t g2[2] = {NY, NX};
  SG_CHECK_OK(sg_nc_shard_split(2, g2, SG_DTYPE_F32, 0, sg_test_size,
                                sg_test_rank, &fs));
  for (int64_t t = 0; t < NT; ++t) {
    for (int64_t i = 0; i < sg_nc_shard_numel(&fs); ++i)
      buf[i] = (float)(1 + t * NY * NX +
                       iot_global_index(2, g2, fs.start, fs.count, i));
    SG_CHECK_OK(sg_nc_write_frame(f, vr, t, &fs, buf, NULL));
  }
  free(buf);
done:
  SG_CHECK_OK(sg_nc_close(&f));
}

/* Rank 0 writes the first n bytes of src to dst. */
static void cut_copy(const char *src, const char *dst, long long n) {
  if (sg_test_rank == 0) {
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    char *b = malloc((size_t)n + 1);
    SG_CHECK(in && out && b && fread(b, 1, (size_t)n, in) == (size_t)n &&
                 fwrite(b, 1, (size_t)n, out) == (size_t)n,
             "copying %lld bytes of %s", n, src);
    if (in) fclose(in);
    if (out) fclose(out);
    free(b);
    /* and truncate(2) to the same length, as a cut-short write leaves it */
    SG_CHECK(truncate(dst, (off_t)n) == 0, "truncate %s", dst);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/* Read variable `var` whole, split over dim `split` (-1: whole on every
 * rank); returns the agreed status and whether this rank's values were
 * right (when it succeeded). */
static sg_status read_var(const char *path, sg_nc_backend b, int nodirect,
                          const char *var, int split, int *values_ok, char *msg,
                          size_t cap) {
  sg_nc_t f = NULL;
  sg_nc_open_opts oo = sg_nc_open_opts_default();
  oo.backend = b;
  oo.no_direct_read = nodirect;
  *values_ok = 1;
  msg[0] = '\0';
  sg_status st = sg_nc_open(MPI_COMM_WORLD, path, &oo, &f);
  if (st != SG_OK) {
    snprintf(msg, cap, "%s", sg_last_error());
    return st;
  }
  sg_nc_var_info vi;
  st = sg_nc_inq_var(f, var, &vi);
  if (st == SG_OK) {
    sg_nc_shard s;
    if (split < 0)
      sg_nc_shard_split(3, vi.shape, SG_DTYPE_F32, 0, 1, 0, &s);
    else
      sg_nc_shard_split(3, vi.shape, SG_DTYPE_F32, split, sg_test_size,
                        sg_test_rank, &s);
    int64_t n = sg_nc_shard_numel(&s);
    float *buf = malloc((size_t)(n ? n : 1) * sizeof *buf);
    st = sg_nc_read(f, vi.varid, &s, NULL, buf, NULL);
    if (st != SG_OK) snprintf(msg, cap, "%s", sg_last_error());
    int64_t g[3] = {vi.shape[0], vi.shape[1], vi.shape[2]};
    for (int64_t i = 0; st == SG_OK && i < n; ++i)
      if (buf[i] != (float)(1 + iot_global_index(3, g, s.start, s.count, i)))
        *values_ok = 0;
    free(buf);
  }
  sg_nc_close(&f);
  return st;
}

static void check_truncated(const char *orig, const char *cut, sg_nc_backend wb,
                            sg_nc_format fmt, const char *label) {
  write_file(orig, wb, fmt);
  long long full = iot_file_size(orig);
  SG_CHECK(full > 0, "%s: no file", orig);
  if (full <= 0) return;
  /* the intact file reads right everywhere */
  const sg_nc_backend rbs[4] = {SG_NC_BACKEND_AUTO, SG_NC_BACKEND_PNETCDF,
                                SG_NC_BACKEND_SERIAL, SG_NC_BACKEND_NETCDF4};
  const int nodirect[4] = {0, 1, 0, 0};
  const char *vars[2] = {"v", "r"};
  const int splits[3] = {-1, 1, 2};
  char msg[2048];
  for (int k = 0; k < 4; ++k)
    for (int v = 0; v < 2; ++v)
      for (int sp = 0; sp < 3; ++sp) {
        if (wb == SG_NC_BACKEND_NETCDF4 && rbs[k] == SG_NC_BACKEND_PNETCDF)
          continue;
        int ok = 0;
        sg_status st = read_var(orig, rbs[k], nodirect[k], vars[v],
                                sp == 0 ? -1 : splits[sp], &ok, msg,
                                sizeof msg);
        SG_CHECK(st == SG_OK && ok,
                 "%s intact, backend %s%s, var %s, split %d: %s (%s)", label,
                 sg_nc_backend_name(rbs[k]), nodirect[k] ? " (no direct)" : "",
                 vars[v], splits[sp],
                 st == SG_OK ? "wrong values" : sg_status_name(st), msg);
      }
  /* cut at: one byte short (the record variable's last value), into the
   * fixed variable's last row, just past the header */
  const long long cuts[3] = {full - 1, full - NT * NY * NX * 4 - 24, 400};
  for (int c = 0; c < 3; ++c) {
    if (cuts[c] <= 8 || cuts[c] >= full) continue;
    cut_copy(orig, cut, cuts[c]);
    int nerr = 0, nerr_v = 0;
    for (int k = 0; k < 4; ++k)
      for (int v = 0; v < 2; ++v)
        for (int sp = 0; sp < 3; ++sp) {
          if (wb == SG_NC_BACKEND_NETCDF4 ? rbs[k] == SG_NC_BACKEND_PNETCDF
                                          : rbs[k] == SG_NC_BACKEND_NETCDF4)
            continue;
          int ok = 0;
          sg_status st = read_var(cut, rbs[k], nodirect[k], vars[v], splits[sp],
                                  &ok, msg, sizeof msg);
          /* the same status on every rank */
          int mine = (int)st, lo = 0, hi = 0;
          MPI_Allreduce(&mine, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
          MPI_Allreduce(&mine, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
          SG_CHECK(lo == hi, "%s cut to %lld: ranks disagree (%d..%d)", label,
                   cuts[c], lo, hi);
          /* either the right values (a variable whose bytes are all
           * there) or an error naming the file: never zeros */
          SG_CHECK(
              st == SG_OK ? ok : strstr(msg, cut) != NULL,
              "%s cut to %lld of %lld bytes, backend %s%s, var %s, split %d: %s (%s)",
              label, cuts[c], full, sg_nc_backend_name(rbs[k]),
              nodirect[k] ? " (no direct)" : "", vars[v], splits[sp],
              st == SG_OK ? "read without error, wrong values (zeros)"
                          : sg_status_name(st),
              msg);
          if (st != SG_OK && wb != SG_NC_BACKEND_NETCDF4)
            SG_CHECK(strstr(msg, "truncated") && st == SG_ERR_CORRUPT,
                     "%s cut to %lld: %s '%s'", label, cuts[c],
                     sg_status_name(st), msg);
          nerr += st != SG_OK;
          nerr_v += st != SG_OK && v == 0;
        }
    /* the last variable (the record variable) lost bytes at every cut;
     * the fixed one at all but the first */
    SG_CHECK(nerr > 0, "%s cut to %lld of %lld bytes: every read succeeded",
             label, cuts[c], full);
    if (c >= 1 && wb != SG_NC_BACKEND_NETCDF4)
      SG_CHECK(nerr_v > 0, "%s cut to %lld: variable v read without error",
               label, cuts[c]);
  }
}

/* A write that fails on one rank, into a file created with atomic: no file
 * at the path afterwards, and no temporary one either. */
static void check_failed_writer(const char *path, sg_nc_backend b) {
  if (sg_test_rank == 0) remove(path);
  MPI_Barrier(MPI_COMM_WORLD);
  sg_nc_t f = NULL;
  sg_nc_create_opts co = sg_nc_create_opts_default();
  co.backend = b;
  co.overwrite = 1;
  co.atomic = 1;
  int vv = -1;
  SG_REQUIRE_OK(sg_nc_create(MPI_COMM_WORLD, path, &co, &f));
  SG_CHECK(iot_file_size(path) < 0, "atomic create: %s exists before close",
           path);
  SG_REQUIRE_OK(sg_nc_def_dim(f, "y", NY, NULL));
  SG_REQUIRE_OK(sg_nc_def_dim(f, "x", NX, NULL));
  const char *d[2] = {"y", "x"};
  SG_REQUIRE_OK(sg_nc_def_var(f, "v", SG_DTYPE_F32, 2, d, NULL, &vv));
  SG_REQUIRE_OK(sg_nc_enddef(f));
  int64_t g[2] = {NY, NX};
  sg_nc_shard s;
  sg_nc_shard_split(2, g, SG_DTYPE_F32, 0, sg_test_size, sg_test_rank, &s);
  float buf[NY * NX];
  for (int i = 0; i < NY * NX; ++i) buf[i] = 1.0f;
  SG_CHECK_OK(sg_nc_write(f, vv, &s, buf)); /* a good first write */
  if (sg_test_rank == sg_test_size - 1) s.count[0] = NY + 1; /* does not fit */
  SG_CHECK(sg_nc_write(f, vv, &s, buf) != SG_OK, "a bad write succeeded");
  sg_status st = sg_nc_close(&f);
  SG_CHECK(st != SG_OK, "closing a file whose write failed returned SG_OK");
  SG_CHECK(st == SG_OK || strstr(sg_last_error(), path),
           "close: '%s' does not name %s", sg_last_error(), path);
  MPI_Barrier(MPI_COMM_WORLD);
  SG_CHECK(iot_file_size(path) < 0,
           "a failed atomic write left %s (%lld bytes)", path,
           iot_file_size(path));
  char tmp[512];
  snprintf(tmp, sizeof tmp, "%s.partial", path);
  SG_CHECK(iot_file_size(tmp) < 0, "a failed atomic write left %s", tmp);
  /* and a good one appears at the path only at close */
  co.atomic = 1;
  SG_REQUIRE_OK(sg_nc_create(MPI_COMM_WORLD, path, &co, &f));
  SG_REQUIRE_OK(sg_nc_def_dim(f, "y", NY, NULL));
  SG_REQUIRE_OK(sg_nc_def_dim(f, "x", NX, NULL));
  SG_REQUIRE_OK(sg_nc_def_var(f, "v", SG_DTYPE_F32, 2, d, NULL, &vv));
  SG_REQUIRE_OK(sg_nc_enddef(f));
  sg_nc_shard_split(2, g, SG_DTYPE_F32, 0, sg_test_size, sg_test_rank, &s);
  SG_CHECK_OK(sg_nc_write(f, vv, &s, buf));
  SG_CHECK(iot_file_size(path) < 0, "atomic: %s exists before close", path);
  SG_CHECK_OK(sg_nc_close(&f));
  MPI_Barrier(MPI_COMM_WORLD);
  SG_CHECK(iot_file_size(path) > 0, "atomic: no %s after a good close", path);
  SG_CHECK(iot_file_size(tmp) < 0, "atomic: %s left after a good close", tmp);
done:
  if (f) sg_nc_close(&f);
  MPI_Barrier(MPI_COMM_WORLD);
  if (sg_test_rank == 0) remove(path);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  char a[128], b[128];
  if (sg_nc_backend_available(SG_NC_BACKEND_PNETCDF, 1)) {
    snprintf(a, sizeof a, "trunc5_np%d.nc", sg_test_size);
    snprintf(b, sizeof b, "trunc5_np%d_cut.nc", sg_test_size);
    check_truncated(a, b, SG_NC_BACKEND_PNETCDF, SG_NC_FORMAT_CDF5, "CDF-5");
    snprintf(a, sizeof a, "trunc2_np%d.nc", sg_test_size);
    snprintf(b, sizeof b, "trunc2_np%d_cut.nc", sg_test_size);
    check_truncated(a, b, SG_NC_BACKEND_PNETCDF, SG_NC_FORMAT_CDF2, "CDF-2");
    snprintf(a, sizeof a, "trunc_fail_np%d.nc", sg_test_size);
    check_failed_writer(a, SG_NC_BACKEND_PNETCDF);
  }
  if (sg_nc_backend_available(SG_NC_BACKEND_NETCDF4, 1)) {
    snprintf(a, sizeof a, "trunc4_np%d.nc", sg_test_size);
    snprintf(b, sizeof b, "trunc4_np%d_cut.nc", sg_test_size);
    check_truncated(a, b, SG_NC_BACKEND_NETCDF4, SG_NC_FORMAT_NETCDF4,
                    "netCDF-4");
    snprintf(a, sizeof a, "trunc_fail4_np%d.nc", sg_test_size);
    check_failed_writer(a, SG_NC_BACKEND_NETCDF4);
  }
  return sg_test_finish();
}
