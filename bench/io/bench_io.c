/* bench/io: collective write and read throughput of one large 2-D f32
 * field, split by rows over the ranks, per backend. Prints JSON lines.
 *
 *   mpiexec -n 4 sg-bench-io --mib 256 --backend pnetcdf --dir /tmp --reps 3
 *       [--hints "romio_cb_read=disable,..."] [--independent 1]
 *       [--no-direct 1] [--no-direct-write 1] [--posix 1]
 *
 * --posix 1: every repetition also writes and reads the same bytes with
 * plain POSIX calls (each rank pwrite/pread of its own contiguous rows of
 * one file, fdatasync, the same cache drop), right before the library, so
 * the library/POSIX ratio of each repetition is measured at the same
 * moment of a shared, noisy machine ("ratio" fields: medians of the
 * per-repetition ratios).
 *
 * write: create + define + collective write + sync (MPI_File_sync / nc_sync:
 * the data reaches the disk, like dd conv=fdatasync) + close.
 * read: open + collective read of each rank's rows + close; the page cache
 * is dropped first when /proc/sys/vm/drop_caches is writable ("cold": 1),
 * otherwise the file is read from the page cache ("cold": 0).
 * The file is removed at the end. */
#include "sg_device.h"
#include "sg_nc.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

static int drop_caches(void) {
  (void)0; /* data were synced by the write */
  FILE *fp = fopen("/proc/sys/vm/drop_caches", "w");
  if (!fp) return 0;
  int ok = fputs("3\n", fp) >= 0;
  ok = (fclose(fp) == 0) && ok;
  return ok;
}

/* Plain POSIX write (+ fdatasync) or read of this rank's bytes at off. */
static double posix_io(const char *path, int wr, char *buf, size_t bytes,
                       off_t off, MPI_Comm comm) {
  MPI_Barrier(comm);
  double t0 = MPI_Wtime();
  int fd = open(path, wr ? (O_WRONLY | O_CREAT) : O_RDONLY, 0644);
  size_t done = 0;
  const size_t blk = (size_t)16 << 20; /* like dd bs=16M */
  while (fd >= 0 && done < bytes) {
    size_t n = bytes - done < blk ? bytes - done : blk;
    ssize_t k = wr ? pwrite(fd, buf + done, n, off + (off_t)done)
                   : pread(fd, buf + done, n, off + (off_t)done);
    if (k <= 0) break;
    done += (size_t)k;
  }
  if (fd >= 0 && wr) fdatasync(fd);
  if (fd >= 0) close(fd);
  double t = MPI_Wtime() - t0;
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
  return done == bytes ? t : -1.0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int64_t mib = 256;
  int reps = 3;
  const char *backend = "pnetcdf", *dir = "/tmp", *hints = NULL;
  int independent = 0, no_direct = 0, no_direct_write = 0, posix = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--mib"))
      mib = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps"))
      reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--backend"))
      backend = argv[i + 1];
    else if (!strcmp(argv[i], "--dir"))
      dir = argv[i + 1];
    else if (!strcmp(argv[i], "--hints"))
      hints = argv[i + 1];
    else if (!strcmp(argv[i], "--independent"))
      independent = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--no-direct"))
      no_direct = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--no-direct-write"))
      no_direct_write = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--posix"))
      posix = atoi(argv[i + 1]);
    else {
      if (rank == 0)
        fprintf(stderr, "sg-bench-io: error: unknown option %s\n", argv[i]);
      MPI_Finalize();
      return 2;
    }
  }
  sg_nc_backend b;
  if (sg_nc_backend_parse(backend, &b) != SG_OK ||
      !sg_nc_backend_available(b, 1)) {
    if (rank == 0)
      fprintf(stderr, "sg-bench-io: error: backend %s not available\n",
              backend);
    MPI_Finalize();
    return 2;
  }
  if (reps < 1) reps = 1;
  /* nx = 4096 columns of f32 (16 KiB rows) */
  const int64_t nx = 4096, ny = mib * 1024 * 1024 / (nx * 4);
  int64_t shape[2] = {ny, nx};
  sg_nc_shard s;
  sg_nc_shard_split(2, shape, SG_DTYPE_F32, 0, size, rank, &s);
  int64_t n = sg_nc_shard_numel(&s);
  float *buf = NULL, *back = NULL;
  if (sg_malloc(sg_device_host(), (size_t)n * 4, (void **)&buf) != SG_OK ||
      sg_malloc(sg_device_host(), (size_t)n * 4, (void **)&back) != SG_OK) {
    fprintf(stderr, "sg-bench-io: error: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (int64_t i = 0; i < n; ++i)
    buf[i] = (float)((s.start[0] * nx + i) % 1000003);
  char path[1024];
  snprintf(path, sizeof path, "%s/sg-bench-io-%s-np%d.nc", dir, backend, size);
  double *tw = calloc((size_t)reps, sizeof(double)),
         *tr = calloc((size_t)reps, sizeof(double));
  double *tph = calloc((size_t)reps * 3, sizeof(double));
  double *pw = calloc((size_t)reps, sizeof(double)),
         *pr = calloc((size_t)reps, sizeof(double));
  double *qw = calloc((size_t)reps, sizeof(double)),
         *qr = calloc((size_t)reps, sizeof(double));
  char rawpath[1100];
  snprintf(rawpath, sizeof rawpath, "%s.raw", path);
  const size_t mybytes = (size_t)n * 4;
  const off_t myoff = (off_t)(s.start[0] * nx * 4);
  int cold = 1, bad = 0;
  for (int r = 0; r < reps; ++r) {
    sg_nc_t f = NULL;
    sg_status st = SG_OK;
    if (posix) {
      int c0 = 0;
      pw[r] = posix_io(rawpath, 1, (char *)buf, mybytes, myoff, MPI_COMM_WORLD);
      if (rank == 0) c0 = drop_caches();
      MPI_Bcast(&c0, 1, MPI_INT, 0, MPI_COMM_WORLD);
      pr[r] = posix_io(rawpath, 0, (char *)back, mybytes, myoff,
                       MPI_COMM_WORLD);
      MPI_Barrier(MPI_COMM_WORLD);
      if (rank == 0) remove(rawpath);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    sg_nc_create_opts co = sg_nc_create_opts_default();
    co.backend = b;
    co.overwrite = 1;
    co.hints = hints;
    co.independent = independent;
    co.no_direct_write = no_direct_write;
    const char *dims[2] = {"y", "x"};
    int v = -1;
    sg_nc_var_opts vo;
    memset(&vo, 0, sizeof vo);
    vo.slab_count = s.count;
    if ((st = sg_nc_create(MPI_COMM_WORLD, path, &co, &f)) == SG_OK &&
        (st = sg_nc_def_dim(f, "y", ny, NULL)) == SG_OK &&
        (st = sg_nc_def_dim(f, "x", nx, NULL)) == SG_OK &&
        (st = sg_nc_def_var(f, "field", SG_DTYPE_F32, 2, dims, &vo, &v)) ==
            SG_OK &&
        (st = sg_nc_enddef(f)) == SG_OK &&
        (st = sg_nc_write(f, v, &s, buf)) == SG_OK &&
        (st = sg_nc_sync(f)) == SG_OK)
      st = sg_nc_close(&f);
    double t1 = MPI_Wtime();
    if (st != SG_OK) {
      if (rank == 0)
        fprintf(stderr, "sg-bench-io: error: write: %s\n", sg_last_error());
      sg_nc_close(&f);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int c = 0;
    if (rank == 0) c = drop_caches();
    MPI_Bcast(&c, 1, MPI_INT, 0, MPI_COMM_WORLD);
    cold &= c;
    MPI_Barrier(MPI_COMM_WORLD);
    double t2 = MPI_Wtime();
    sg_nc_open_opts oo = sg_nc_open_opts_default();
    oo.backend = b;
    oo.hints = hints;
    oo.independent = independent;
    oo.no_direct_read = no_direct;
    memset(back, 0, mybytes);
    MPI_Barrier(MPI_COMM_WORLD);
    t2 = MPI_Wtime();
    double ph[3] = {0, 0, 0}; /* open, read, close (the slowest rank's) */
    if ((st = sg_nc_open(MPI_COMM_WORLD, path, &oo, &f)) == SG_OK) {
      ph[0] = MPI_Wtime() - t2;
      if ((st = sg_nc_read(f, v, &s, NULL, back, NULL)) == SG_OK) {
        ph[1] = MPI_Wtime() - t2 - ph[0];
        st = sg_nc_close(&f);
      }
    }
    double t3 = MPI_Wtime();
    ph[2] = t3 - t2 - ph[0] - ph[1];
    if (st != SG_OK) {
      if (rank == 0)
        fprintf(stderr, "sg-bench-io: error: read: %s\n", sg_last_error());
      sg_nc_close(&f);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    bad += memcmp(buf, back, (size_t)n * 4) != 0;
    double w = t1 - t0, rd = t3 - t2;
    MPI_Allreduce(MPI_IN_PLACE, &w, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &rd, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, ph, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    tw[r] = w;
    tr[r] = rd;
    for (int k = 0; k < 3; ++k) tph[3 * r + k] = ph[k];
    qw[r] = pw[r] > 0 ? pw[r] / w : 0;
    qr[r] = pr[r] > 0 ? pr[r] / rd : 0;
  }
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  /* the phases of the repetition whose read time is the median */
  double rph[3] = {0, 0, 0};
  {
    double *srt = malloc(sizeof(double) * (size_t)reps);
    memcpy(srt, tr, sizeof(double) * (size_t)reps);
    qsort(srt, (size_t)reps, sizeof(double), cmp_double);
    for (int r = 0; r < reps; ++r)
      if (tr[r] == srt[reps / 2]) {
        for (int k = 0; k < 3; ++k) rph[k] = tph[3 * r + k];
        break;
      }
    free(srt);
  }
  qsort(tw, (size_t)reps, sizeof(double), cmp_double);
  qsort(tr, (size_t)reps, sizeof(double), cmp_double);
  qsort(pw, (size_t)reps, sizeof(double), cmp_double);
  qsort(pr, (size_t)reps, sizeof(double), cmp_double);
  qsort(qw, (size_t)reps, sizeof(double), cmp_double);
  qsort(qr, (size_t)reps, sizeof(double), cmp_double);
  char opt[512] = "";
  if (posix)
    snprintf(opt, sizeof opt,
             ", \"posix_w_mib_per_s\": %.1f, \"posix_r_mib_per_s\": %.1f, "
             "\"ratio_w\": %.3f, \"ratio_r\": %.3f",
             (double)mib / pw[reps / 2], (double)mib / pr[reps / 2],
             qw[reps / 2], qr[reps / 2]);
  char cfg[700];
  snprintf(cfg, sizeof cfg,
           "\"hints\": \"%s\", \"independent\": %d, \"direct_read\": %d, "
           "\"direct_write\": %d%s",
           hints ? hints : "", independent, !no_direct, !no_direct_write, opt);
  double mw = tw[reps / 2], mr = tr[reps / 2];
  if (rank == 0) {
    printf(
        "{\"bench\": \"io\", \"op\": \"write\", \"backend\": \"%s\", \"ranks\": %d, "
        "\"mib\": %lld, \"reps\": %d, \"median_s\": %.4f, \"mib_per_s\": %.1f, "
        "\"best_mib_per_s\": %.1f, \"synced\": 1, %s}\n",
        backend, size, (long long)mib, reps, mw, (double)mib / mw,
        (double)mib / tw[0], cfg);
    printf(
        "{\"bench\": \"io\", \"op\": \"read\", \"backend\": \"%s\", \"ranks\": %d, "
        "\"mib\": %lld, \"reps\": %d, \"median_s\": %.4f, \"mib_per_s\": %.1f, "
        "\"best_mib_per_s\": %.1f, \"cold\": %d, \"verified\": %d, "
        "\"open_s\": %.4f, \"read_s\": %.4f, \"close_s\": %.4f, %s}\n",
        backend, size, (long long)mib, reps, mr, (double)mib / mr,
        (double)mib / tr[0], cold, bad == 0, rph[0], rph[1], rph[2], cfg);
    remove(path);
  }
  free(tw);
  free(tr);
  free(tph);
  free(pw);
  free(pr);
  free(qw);
  free(qr);
  sg_free(sg_device_host(), (void **)&buf);
  sg_free(sg_device_host(), (void **)&back);
  MPI_Finalize();
  return bad ? 1 : 0;
}
