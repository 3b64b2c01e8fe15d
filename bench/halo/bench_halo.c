/* bench_halo — halo exchange time and bandwidth versus raw MPI, and the
 * overlap gain of start/interior/finish. Prints JSON lines.
 *
 *   mpiexec -n P bench_halo [--quick] [--reps R] [--progress-every K]
 *
 * exchange: a 2-D block (lead 4 f32 fields, interior S x n or n x S cells,
 *   S = 32) split along one dim over a 1 x P (or P x 1) mesh, zero edges.
 *   For each message size (4 * n * width * 4 bytes) it times
 *     - sg_halo_exchange (pack, messages, unpack);
 *     - raw MPI: Isend/Irecv of the same messages from pre-packed buffers;
 *     - ping-pong: MPI_Send/MPI_Recv round trips of one message between
 *       pairs (0-1, 2-3, ... all pairs at once, as in the exchange),
 *   and reports bandwidth = bytes a rank sends / time (ping-pong: message /
 *   half the round trip). Times are medians over repetitions of the max over
 *   ranks.
 * overlap: a (2w+1)^2 box stencil on a 4 x n x n block split over 1 x P:
 *     blocking:  exchange, then stencil on every cell;
 *     overlap:   start, stencil on the cells that need no halo (calling
 *                sg_halo_progress every K rows), finish, stencil on the rest.
 *   hidden = (t_blocking - t_overlap) / t_exchange.
 */
#include "sg_halo.h"
#include "sg_mesh.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* median over reps of the max over ranks */
static double med_max(double *t, int reps, MPI_Comm comm) {
  MPI_Allreduce(MPI_IN_PLACE, t, reps, MPI_DOUBLE, MPI_MAX, comm);
  qsort(t, (size_t)reps, sizeof *t, cmp_d);
  return t[reps / 2];
}

#define C 4
#define S 32

static int rank_, size_;

static void die(sg_status st, const char *what) {
  fprintf(stderr, "bench_halo: %s: %s\n", what, sg_last_error());
  MPI_Abort(MPI_COMM_WORLD, (int)st);
}
#define CK(call)                                                              \
  do {                                                                        \
    sg_status s_ = (call);                                                    \
    if (s_ != SG_OK) die(s_, #call);                                          \
  } while (0)

static void bench_exchange(int split, int64_t n, int64_t w, int reps) {
  char spec[64];
  snprintf(spec, sizeof spec, split ? "h=1,w=%d" : "h=%d,w=1", size_);
  sg_mesh_t mesh = NULL;
  CK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  sg_halo_desc desc;
  sg_halo_desc_init(&desc);
  desc.ndims = 2;
  desc.lead = C;
  desc.interior[split] = S;
  desc.interior[1 - split] = n;
  desc.halo[split][0] = desc.halo[split][1] = w;
  desc.mesh_dim[0] = 0;
  desc.mesh_dim[1] = 1;
  sg_halo_plan_t plan = NULL;
  CK(sg_halo_plan_create(mesh, &desc, &plan));
  int64_t cnt = sg_halo_plan_block_count(plan);
  float *x = malloc((size_t)cnt * sizeof *x);
  for (int64_t i = 0; i < cnt; ++i) x[i] = (float)i;
  size_t msg = (size_t)C * (size_t)n * (size_t)w * sizeof(float);
  double sent = 0, maxsent;
  sent = (double)sg_halo_plan_send_bytes(plan);
  MPI_Allreduce(&sent, &maxsent, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

  double *t = malloc((size_t)reps * sizeof *t);
  /* the plan */
  for (int r = -2; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    CK(sg_halo_exchange(plan, x));
    if (r >= 0) t[r] = MPI_Wtime() - t0;
  }
  double t_plan = med_max(t, reps, MPI_COMM_WORLD);

  /* raw MPI on pre-packed buffers, same neighbours and sizes */
  int nb[2] = {rank_ > 0 ? rank_ - 1 : MPI_PROC_NULL,
               rank_ < size_ - 1 ? rank_ + 1 : MPI_PROC_NULL};
  char *sb = malloc(2 * msg), *rb = malloc(2 * msg);
  memset(sb, 1, 2 * msg);
  for (int r = -2; r < reps; ++r) {
    MPI_Request q[4];
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int s = 0; s < 2; ++s)
      MPI_Irecv(rb + s * msg, (int)msg, MPI_BYTE, nb[s], 7, MPI_COMM_WORLD,
                &q[s]);
    for (int s = 0; s < 2; ++s)
      MPI_Isend(sb + s * msg, (int)msg, MPI_BYTE, nb[s], 7, MPI_COMM_WORLD,
                &q[2 + s]);
    MPI_Status sts[4];
    MPI_Waitall(4, q, sts);
    if (r >= 0) t[r] = MPI_Wtime() - t0;
  }
  double t_raw = med_max(t, reps, MPI_COMM_WORLD);

  /* ping-pong between pairs, all pairs at once */
  int peer = (rank_ ^ 1) < size_ ? (rank_ ^ 1) : MPI_PROC_NULL;
  for (int r = -2; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (peer != MPI_PROC_NULL) {
      if (rank_ & 1) {
        MPI_Recv(rb, (int)msg, MPI_BYTE, peer, 9, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
        MPI_Send(sb, (int)msg, MPI_BYTE, peer, 9, MPI_COMM_WORLD);
      } else {
        MPI_Send(sb, (int)msg, MPI_BYTE, peer, 9, MPI_COMM_WORLD);
        MPI_Recv(rb, (int)msg, MPI_BYTE, peer, 9, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
      }
    }
    if (r >= 0) t[r] = (MPI_Wtime() - t0) / 2;
  }
  double t_pp = med_max(t, reps, MPI_COMM_WORLD);

  if (rank_ == 0) {
    double bw = maxsent / t_plan / 1e9, bw_raw = maxsent / t_raw / 1e9;
    double bw_pp = (double)msg / t_pp / 1e9;
    printf("{\"bench\":\"halo_exchange\",\"ranks\":%d,\"mesh\":\"%s\","
           "\"split\":\"%s\",\"interior\":[%lld,%lld],\"lead\":%d,"
           "\"width\":%lld,\"msg_bytes\":%zu,\"sent_bytes\":%.0f,"
           "\"exchange_us\":%.2f,\"raw_us\":%.2f,\"pingpong_oneway_us\":%.2f,"
           "\"exchange_GBps\":%.3f,\"raw_GBps\":%.3f,\"pingpong_GBps\":%.3f,"
           "\"exchange_vs_pingpong\":%.3f,\"exchange_vs_raw\":%.3f}\n",
           size_, spec, split ? "w" : "h",
           (long long)desc.interior[0], (long long)desc.interior[1], C,
           (long long)w, msg, maxsent, t_plan * 1e6, t_raw * 1e6, t_pp * 1e6,
           bw, bw_raw, bw_pp, bw / bw_pp, bw / bw_raw);
    fflush(stdout);
  }
  free(t);
  free(sb);
  free(rb);
  free(x);
  CK(sg_halo_plan_destroy(&plan));
  CK(sg_mesh_destroy(&mesh));
}

/* (2w+1)^2 box stencil on rows [r0, r1) and columns [c0, c1) of interior
 * coordinates; x has row stride ld, y is interior-shaped (n x n). */
static void stencil(const float *x, int64_t ld, int64_t org, float *y,
                    int64_t n, int64_t w, int64_t r0, int64_t r1, int64_t c0,
                    int64_t c1) {
  const float k = 1.0f / (float)((2 * w + 1) * (2 * w + 1));
  for (int64_t i = r0; i < r1; ++i) {
    float *yr = y + i * n;
    for (int64_t j = c0; j < c1; ++j) yr[j] = 0.0f;
    for (int64_t a = -w; a <= w; ++a) {
      const float *xr = x + org + (i + a) * ld;
      for (int64_t b = -w; b <= w; ++b)
        for (int64_t j = c0; j < c1; ++j) yr[j] += k * xr[j + b];
    }
  }
}

static void bench_overlap(int64_t n, int64_t w, int reps, int every) {
  char spec[64];
  snprintf(spec, sizeof spec, "h=1,w=%d", size_);
  sg_mesh_t mesh = NULL;
  CK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  sg_halo_desc desc;
  sg_halo_desc_init(&desc);
  desc.ndims = 2;
  desc.lead = C;
  desc.interior[0] = desc.interior[1] = n;
  desc.halo[0][0] = desc.halo[0][1] = w;
  desc.halo[1][0] = desc.halo[1][1] = w;
  desc.mesh_dim[0] = 0;
  desc.mesh_dim[1] = 1;
  desc.boundary[0] = SG_BOUNDARY_PERIODIC; /* local wrap along h */
  sg_halo_plan_t plan = NULL;
  CK(sg_halo_plan_create(mesh, &desc, &plan));
  int64_t cnt = sg_halo_plan_block_count(plan), st[3];
  sg_halo_plan_strides(plan, st);
  int64_t org = sg_halo_plan_origin(plan);
  float *x = malloc((size_t)cnt * sizeof *x);
  float *y = malloc((size_t)(C * n * n) * sizeof *y);
  for (int64_t i = 0; i < cnt; ++i) x[i] = (float)(i % 97);
  double *t = malloc((size_t)reps * sizeof *t);

  /* exchange alone */
  for (int r = -2; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    CK(sg_halo_exchange(plan, x));
    if (r >= 0) t[r] = MPI_Wtime() - t0;
  }
  double t_ex = med_max(t, reps, MPI_COMM_WORLD);
  /* stencil alone */
  for (int r = -2; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int c = 0; c < C; ++c)
      stencil(x + c * st[0], st[1], org, y + c * n * n, n, w, 0, n, 0, n);
    if (r >= 0) t[r] = MPI_Wtime() - t0;
  }
  double t_st = med_max(t, reps, MPI_COMM_WORLD);
  /* blocking: exchange then stencil */
  for (int r = -2; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    CK(sg_halo_exchange(plan, x));
    for (int c = 0; c < C; ++c)
      stencil(x + c * st[0], st[1], org, y + c * n * n, n, w, 0, n, 0, n);
    if (r >= 0) t[r] = MPI_Wtime() - t0;
  }
  double t_blk = med_max(t, reps, MPI_COMM_WORLD);
  /* overlap: start, interior (cells >= w from every edge), finish, edges */
  double t_ov[2];
  for (int mode = 0; mode < 2; ++mode) {
    int k = mode ? every : 0; /* 0: no progress calls */
    for (int r = -2; r < reps; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      CK(sg_halo_start(plan, x));
      int rows = 0;
      for (int64_t i = w; i < n - w; ++i) {
        for (int c = 0; c < C; ++c)
          stencil(x + c * st[0], st[1], org, y + c * n * n, n, w, i, i + 1,
                  w, n - w);
        if (k && ++rows % k == 0) CK(sg_halo_progress(plan, NULL));
      }
      CK(sg_halo_finish(plan));
      for (int c = 0; c < C; ++c) {
        float *xc = x + c * st[0], *yc = y + c * n * n;
        stencil(xc, st[1], org, yc, n, w, 0, w, 0, n);
        stencil(xc, st[1], org, yc, n, w, n - w, n, 0, n);
        stencil(xc, st[1], org, yc, n, w, w, n - w, 0, w);
        stencil(xc, st[1], org, yc, n, w, w, n - w, n - w, n);
      }
      if (r >= 0) t[r] = MPI_Wtime() - t0;
    }
    t_ov[mode] = med_max(t, reps, MPI_COMM_WORLD);
  }
  if (rank_ == 0) {
    printf("{\"bench\":\"halo_overlap\",\"ranks\":%d,\"mesh\":\"%s\","
           "\"interior\":[%lld,%lld],\"lead\":%d,\"width\":%lld,"
           "\"exchange_us\":%.1f,\"stencil_us\":%.1f,\"blocking_us\":%.1f,"
           "\"overlap_noprogress_us\":%.1f,\"overlap_progress_us\":%.1f,"
           "\"progress_every_rows\":%d,\"hidden_noprogress\":%.3f,"
           "\"hidden_progress\":%.3f}\n",
           size_, spec, (long long)n, (long long)n, C, (long long)w,
           t_ex * 1e6, t_st * 1e6, t_blk * 1e6, t_ov[0] * 1e6, t_ov[1] * 1e6,
           every, (t_blk - t_ov[0]) / t_ex, (t_blk - t_ov[1]) / t_ex);
    fflush(stdout);
  }
  free(t);
  free(x);
  free(y);
  CK(sg_halo_plan_destroy(&plan));
  CK(sg_mesh_destroy(&mesh));
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  int quick = 0, reps = 31, every = 8;
  const char *only = "";
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--progress-every") && i + 1 < argc)
      every = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
  }
  if (size_ < 2) {
    if (rank_ == 0) fprintf(stderr, "bench_halo: run with 2 or more ranks\n");
    MPI_Finalize();
    return 0;
  }
  if (quick) reps = 5;
  if (strcmp(only, "overlap") != 0) {
    const int64_t ns[] = {256, 1024, 4096, 16384, 65536};
    const int64_t ws[] = {1, 2, 4};
    int nn = quick ? 2 : 5;
    for (int split = 0; split < 2; ++split)
      for (int a = 0; a < nn; ++a)
        for (int b = 0; b < 3; ++b) bench_exchange(split, ns[a], ws[b], reps);
  }
  if (strcmp(only, "exchange") != 0) {
    const int64_t on[] = {256, 512, 1024};
    for (int a = 0; a < (quick ? 1 : 3); ++a)
      for (int64_t w = 1; w <= 2; ++w) bench_overlap(on[a], w, reps, every);
  }
  MPI_Finalize();
  return 0;
}
