/* Checkpoints: written on one decomposition and read on every other one in
 * the same run (and whole, replicated, on every rank) bit for bit, with
 * step/RNG/data position/config/mesh; a truncated file and a flipped byte
 * (data or metadata) are SG_ERR_CORRUPT on every rank; a stale temporary
 * file from a killed write leaves the previous checkpoint loadable; a
 * failed write leaves it unchanged; missing file/array and wrong shape are
 * clear errors. */
#include "ckpt_test_util.h"
#include "sg_test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int read_and_compare(const char *path, int grid2d, int whole,
                            int64_t want_step, const char *what) {
  sg_ckpt_array a[CKT_N];
  void *bufs[CKT_N], *exp[CKT_N];
  ckt_arrays(sg_test_rank, sg_test_size, grid2d, whole, a, bufs);
  sg_ckpt_meta m;
  memset(&m, 0, sizeof m);
  sg_status st = sg_ckpt_read(MPI_COMM_WORLD, path, CKT_N, a, &m);
  SG_CHECK(st == SG_OK, "%s: read: %s", what, sg_last_error());
  int ok = st == SG_OK;
  for (int k = 0; ok && k < CKT_N; ++k) {
    int64_t n = sg_nc_shard_numel(&a[k].shard);
    size_t b = (size_t)n * sg_dtype_size(a[k].shard.dtype);
    exp[k] = calloc((size_t)(n ? n : 1), sg_dtype_size(a[k].shard.dtype));
    ckt_fill(k, &a[k].shard, exp[k]);
    SG_CHECK(sg_test_cmp_bytes(what, bufs[k], exp[k], b) == 0, "%s: %s differs",
             what, a[k].name);
    free(exp[k]);
  }
  if (ok) {
    sg_ckpt_meta w;
    ckt_meta(&w, want_step, "h=2,w=2");
    SG_CHECK(m.step == w.step && m.rng_seed == w.rng_seed &&
                 m.n_rng_state == 3 && m.rng_state[1] == w.rng_state[1] &&
                 m.rng_state[2] == w.rng_state[2] &&
                 m.data_position == w.data_position &&
                 strcmp(m.mesh, w.mesh) == 0 && m.config &&
                 strcmp(m.config, w.config) == 0,
             "%s: meta differs (step %lld)", what, (long long)m.step);
  }
  free(m.config);
  for (int k = 0; k < CKT_N; ++k) free(bufs[k]);
  return ok;
}

static sg_status write_ckpt(const char *path, int grid2d, int64_t step,
                            int break_rank) {
  sg_ckpt_array a[CKT_N];
  void *bufs[CKT_N];
  ckt_arrays(sg_test_rank, sg_test_size, grid2d, 0, a, bufs);
  for (int k = 0; k < CKT_N; ++k) ckt_fill(k, &a[k].shard, bufs[k]);
  if (sg_test_rank == break_rank) a[0].shard.global_shape[1] += 1;
  sg_ckpt_meta m;
  ckt_meta(&m, step, "h=2,w=2");
  sg_status st = sg_ckpt_write(MPI_COMM_WORLD, path, CKT_N, a, &m, NULL);
  for (int k = 0; k < CKT_N; ++k) free(bufs[k]);
  return st;
}

static char *slurp(const char *path, long *n) {
  FILE *fp = fopen(path, "rb");
  *n = -1;
  if (!fp) return NULL;
  fseek(fp, 0, SEEK_END);
  *n = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  char *b = malloc((size_t)*n + 1);
  if (fread(b, 1, (size_t)*n, fp) != (size_t)*n) *n = -1;
  fclose(fp);
  return b;
}

static void spit(const char *path, const char *b, long n) {
  FILE *fp = fopen(path, "wb");
  if (!fp) return;
  fwrite(b, 1, (size_t)n, fp);
  fclose(fp);
}

static void expect_corrupt(const char *path, const char *what) {
  sg_ckpt_array a[CKT_N];
  void *bufs[CKT_N];
  ckt_arrays(sg_test_rank, sg_test_size, 1, 0, a, bufs);
  sg_ckpt_meta m;
  memset(&m, 0, sizeof m);
  sg_status st = sg_ckpt_read(MPI_COMM_WORLD, path, CKT_N, a, &m);
  SG_CHECK(st == SG_ERR_CORRUPT, "%s: got %s (%s)", what, sg_status_name(st),
           sg_last_error());
  SG_CHECK(sg_test_all(MPI_COMM_WORLD, st == SG_ERR_CORRUPT),
           "%s: not corrupt on every rank", what);
  if (sg_test_rank == 0 && st == SG_ERR_CORRUPT)
    printf("%s -> %s\n", what, sg_last_error());
  free(m.config);
  for (int k = 0; k < CKT_N; ++k) free(bufs[k]);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  if (!sg_nc_backend_available(SG_NC_BACKEND_AUTO, 1)) {
    sg_test_skip("no parallel NetCDF backend built");
    return sg_test_finish();
  }
  char path[128], cpy[160];
  snprintf(path, sizeof path, "ckpt_np%d.nc", sg_test_size);
  snprintf(cpy, sizeof cpy, "ckpt_np%d_bad.nc", sg_test_size);
  if (sg_test_rank == 0) {
    remove(path);
    char t[200];
    snprintf(t, sizeof t, "%s.tmp", path);
    remove(t);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  /* write split over the most ranks in 2-D, read on every split */
  int wgrid = sg_test_size == 4 ? 2 : 1;
  SG_CHECK_OK(write_ckpt(path, wgrid, 1, -1));
  for (int g = 1; g <= sg_test_size; ++g) {
    if (sg_test_size % g) continue;
    char what[64];
    snprintf(what, sizeof what, "written %dx%d, read %dx%d", wgrid,
             sg_test_size / wgrid, g, sg_test_size / g);
    read_and_compare(path, g, 0, 1, what);
  }
  read_and_compare(path, 1, 1, 1, "read whole on every rank");

  /* bad input */
  {
    sg_ckpt_array a[CKT_N];
    void *bufs[CKT_N];
    ckt_arrays(sg_test_rank, sg_test_size, 1, 0, a, bufs);
    sg_status st = sg_ckpt_read(MPI_COMM_WORLD, "no_such_ckpt.nc", CKT_N, a,
                                NULL);
    SG_CHECK(sg_test_all(MPI_COMM_WORLD, st == SG_ERR_IO), "missing file: %s",
             sg_status_name(st));
    a[1].name = "no_such_array";
    st = sg_ckpt_read(MPI_COMM_WORLD, path, CKT_N, a, NULL);
    SG_CHECK(sg_test_all(MPI_COMM_WORLD,
                         st == SG_ERR_INVALID_ARG &&
                             strstr(sg_last_error(), "no_such_array")),
             "missing array: %s %s", sg_status_name(st), sg_last_error());
    a[1].name = ckt_defs[1].name;
    a[0].shard.global_shape[0] += 1;
    st = sg_ckpt_read(MPI_COMM_WORLD, path, CKT_N, a, NULL);
    SG_CHECK(sg_test_all(MPI_COMM_WORLD, st == SG_ERR_SHAPE), "wrong shape: %s",
             sg_status_name(st));
    for (int k = 0; k < CKT_N; ++k) free(bufs[k]);
  }

  /* corruption: truncated, a flipped data byte, a flipped metadata byte */
  long n = 0;
  char *orig = sg_test_rank == 0 ? slurp(path, &n) : NULL;
  if (sg_test_rank == 0) spit(cpy, orig, n * 2 / 3);
  MPI_Barrier(MPI_COMM_WORLD);
  expect_corrupt(cpy, "truncated to 2/3");
  if (sg_test_rank == 0) spit(cpy, orig, n - 8);
  MPI_Barrier(MPI_COMM_WORLD);
  expect_corrupt(cpy, "last 8 bytes cut");
  if (sg_test_rank == 0) {
    orig[n - 3] ^= 0x10; /* inside the last array's data */
    spit(cpy, orig, n);
    orig[n - 3] ^= 0x10;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  expect_corrupt(cpy, "flipped data byte");
  if (sg_test_rank == 0) {
    char *p = NULL;
    for (long i = 0; i + 7 <= n && !p; ++i)
      if (memcmp(orig + i, "lr=3e-4", 7) == 0) p = orig + i;
    if (p) p[3] = '9';
    spit(cpy, orig, n);
    if (p) p[3] = '3';
  }
  MPI_Barrier(MPI_COMM_WORLD);
  expect_corrupt(cpy, "flipped config byte");

  /* killed during a write: a stale, partial temporary file */
  if (sg_test_rank == 0) {
    char t[200];
    snprintf(t, sizeof t, "%s.tmp", path);
    spit(t, orig, n / 2);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  read_and_compare(path, 1, 0, 1, "previous checkpoint after a killed write");
  /* the next write replaces the stale temporary and then the checkpoint */
  SG_CHECK_OK(write_ckpt(path, wgrid, 2, -1));
  read_and_compare(path, 1, 0, 2, "after the next write");
  /* a write that fails (bad shape on the last rank) leaves it unchanged */
  long n2 = 0, n3 = 0;
  char *before = sg_test_rank == 0 ? slurp(path, &n2) : NULL;
  sg_status st = write_ckpt(path, wgrid, 3, sg_test_size - 1);
  SG_CHECK(sg_test_all(MPI_COMM_WORLD, st == SG_ERR_SHAPE), "failed write: %s",
           sg_status_name(st));
  MPI_Barrier(MPI_COMM_WORLD);
  if (sg_test_rank == 0) {
    char *after = slurp(path, &n3);
    SG_CHECK(n2 == n3 && n2 > 0 && memcmp(before, after, (size_t)n2) == 0,
             "checkpoint changed by a failed write");
    free(after);
  }
  read_and_compare(path, 1, 0, 2, "after a failed write");

  free(orig);
  free(before);
  MPI_Barrier(MPI_COMM_WORLD);
  if (sg_test_rank == 0) {
    remove(path);
    remove(cpy);
  }
  return sg_test_finish();
}
