/* bench_halo — halo exchange time and bandwidth versus raw MPI, and the
 * overlap gain of start/interior/finish. Prints JSON lines.
 *
 *   mpiexec -n P bench_halo [--quick] [--reps R] [--only exchange|overlap]
 *                           [--split h|w] [--layout packed|cl]
 *                           [--block user|plan] [--yield on|off]
 *                           [--boundary zero|periodic]
 *                           [--progress-every K]
 *
 * exchange: a 2-D block (lead 4 f32 fields, interior S x n or n x S cells,
 *   S = 32) split along one dim over a P x 1 ("h": the slab of a field is
 *   contiguous) or 1 x P mesh ("w": rows of `width` elements), zero edges
 *   (a rank at the edge sends one message and zero-fills its other margin)
 *   or, with --boundary periodic, wrapped across the mesh (every rank sends
 *   two messages; at P = 2 both to the same peer);
 *   --layout cl stores the fields innermost (lead, then the slab of "h" is
 *   one contiguous run and "w" rows are 4 * width elements).
 *   --block plan exchanges a block from sg_halo_plan_alloc_block (on the
 *   shm path the neighbour copies the slab straight out of it: one copy),
 *   --block user (default) a malloc'd one. Before every repetition each
 *   rank rewrites its whole block, as the stencil of a time step would, so
 *   the slabs are fresh data in the owner's cache (not lines the reader
 *   still holds from the last repetition).
 *   For each message size (4 * n * width * 4 bytes), repetition by
 *   repetition (so a disturbance hits all three alike), it times
 *     - sg_halo_exchange (the plan's path: SG_HALO_PATH, default auto);
 *     - raw MPI: Isend/Irecv of the same messages from pre-packed buffers;
 *     - ping-pong: MPI_Send/MPI_Recv round trips of one message between
 *       pairs (0-1, 2-3, ... all pairs at once, as in the exchange),
 *   and reports bandwidth = bytes a rank sends / time (ping-pong: message /
 *   half the round trip). Times are the max over ranks, median and minimum
 *   over repetitions. With the slab's own pack and unpack time (host
 *   kernels, one side) and a memcpy of the same bytes beside it.
 * overlap: a (2w+1)^2 box stencil on `fields` of the lead fields of an
 *   n_h x n_w block per rank, split along h over P x 1 (periodic across the
 *   mesh: two messages per rank; w wraps locally, which the plan does at
 *   start). Messages carry all lead fields; stencilling fewer fields makes
 *   the interior compute comparable to the exchange.
 *     blocking:  exchange, then stencil rows [0, n_h);
 *     overlap:   start, stencil rows [w, n_h - w) (no halo needed; with
 *                sg_halo_progress every K rows, or without), finish,
 *                stencil rows [0, w) and [n_h - w, n_h).
 *   Same kernel and rows in both, so the overlapped version does no extra
 *   work. hidden = (t_blocking - t_overlap) / t_exchange.
 */
#include "sg_halo.h"
#include "sg_halo_pack.h"
#include "sg_mesh.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sched.h>

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* max over ranks per repetition; median into *med, minimum into *mn (the
 * least disturbed repetition on a shared machine) */
static void stats(double *t, int reps, MPI_Comm comm, double *med, double *mn) {
  MPI_Allreduce(MPI_IN_PLACE, t, reps, MPI_DOUBLE, MPI_MAX, comm);
  qsort(t, (size_t)reps, sizeof *t, cmp_d);
  *mn = t[0];
  *med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
}

#define C 4
#define S 32

static int rank_, size_;
static int cl_;         /* --layout cl: channels-last blocks (lead innermost) */
static int plan_block_; /* --block plan: sg_halo_plan_alloc_block */
static int periodic_;   /* --boundary periodic: the split dim wraps */
/* --yield on|off (default: on when the node's ranks outnumber its cores):
 * the benchmark's own barriers and the raw-MPI and ping-pong references
 * wait with MPI_Test + sched_yield instead of MPI's spinning waits, so
 * that on an oversubscribed node a rank that is done does not hold the
 * core its partner needs for a whole time slice */
static int yield_ = -1;

static void wait_yield(int n, MPI_Request *q) { /* n <= 4 */
  MPI_Status sts[4];
  for (;;) {
    int done = 0;
    MPI_Testall(n, q, &done, sts);
    if (done) return;
    sched_yield();
  }
}

static void barrier(void) {
  if (!yield_) {
    MPI_Barrier(MPI_COMM_WORLD);
    return;
  }
  MPI_Request q;
  MPI_Ibarrier(MPI_COMM_WORLD, &q);
  wait_yield(1, &q);
}

static void die(sg_status st, const char *what) {
  fprintf(stderr, "bench_halo: %s: %s\n", what, sg_last_error());
  MPI_Abort(MPI_COMM_WORLD, (int)st);
}
#define CK(call)                     \
  do {                               \
    sg_status s_ = (call);           \
    if (s_ != SG_OK) die(s_, #call); \
  } while (0)

static const char *path_name(void) {
  const char *p = getenv("SG_HALO_PATH");
  return p && *p ? p : "auto";
}

/* Time one side's pack and unpack (the hi side of the split dim) and a
 * memcpy of the same bytes: single process work, rank 0's numbers. */
static void time_pack(int split, int64_t n, int64_t w, int reps, double *pk,
                      double *up, double *cp) {
  /* block (C, d0, d1) packed with margins w on the split dim */
  int64_t e0 = split ? n : S + 2 * w, e1 = split ? S + 2 * w : n;
  int64_t cnt = C * e0 * e1;
  /* element strides of lead, d0, d1 */
  int64_t sl = cl_ ? 1 : e0 * e1, s0 = cl_ ? C * e1 : e1, s1 = cl_ ? C : 1;
  sg_halo_box b;
  b.count[0] = C;
  b.stride[0] = sl;
  b.count[1] = split ? n : w;
  b.stride[1] = s0;
  b.count[2] = split ? w : n;
  b.stride[2] = s1;
  b.count[3] = 1;
  b.stride[3] = 0;
  b.base = split ? S * s1 : S * s0; /* the hi side's send slab */
  if (cl_) { /* memory order, as the plan enumerates it: (d0, d1, lead) */
    sg_halo_box m = b;
    for (int k = 0; k < 3; ++k) {
      m.count[k] = b.count[(k + 1) % 3];
      m.stride[k] = b.stride[(k + 1) % 3];
    }
    b = m;
  }
  size_t bytes = (size_t)sg_halo_box_size(&b) * sizeof(float);
  float *x = malloc((size_t)cnt * sizeof *x), *buf = malloc(bytes);
  float *dst = malloc(bytes);
  for (int64_t i = 0; i < cnt; ++i) x[i] = (float)i;
  double *t = malloc(3 * (size_t)reps * sizeof *t);
  for (int r = -2; r < reps; ++r) {
    double t0 = MPI_Wtime();
    sg_halo_pack_host(x, &b, sizeof(float), buf);
    double t1 = MPI_Wtime();
    sg_halo_unpack_host(x, &b, sizeof(float), buf);
    double t2 = MPI_Wtime();
    memcpy(dst, buf, bytes);
    double t3 = MPI_Wtime();
    if (r >= 0) {
      t[r] = t1 - t0;
      t[reps + r] = t2 - t1;
      t[2 * reps + r] = t3 - t2;
    }
  }
  double *res[3] = {pk, up, cp};
  for (int k = 0; k < 3; ++k) {
    qsort(t + k * reps, (size_t)reps, sizeof *t, cmp_d);
    *res[k] = t[k * reps + reps / 2];
  }
  free(t);
  free(x);
  free(buf);
  free(dst);
}

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
  if (periodic_) desc.boundary[split] = SG_BOUNDARY_PERIODIC;
  desc.mesh_dim[0] = 0;
  desc.mesh_dim[1] = 1;
  if (cl_) { /* (d0, d1, lead) */
    int64_t e1 = desc.interior[1] + 2 * desc.halo[1][0];
    desc.strides[0] = 1;
    desc.strides[2] = C;
    desc.strides[1] = C * e1;
  }
  sg_halo_plan_t plan = NULL;
  CK(sg_halo_plan_create(mesh, &desc, &plan));
  int64_t cnt = sg_halo_plan_block_count(plan);
  float *x = NULL;
  if (plan_block_)
    CK(sg_halo_plan_alloc_block(plan, (void **)&x));
  else
    x = malloc((size_t)cnt * sizeof *x);
  for (int64_t i = 0; i < cnt; ++i) x[i] = (float)i;
  size_t msg = (size_t)C * (size_t)n * (size_t)w * sizeof(float);
  double sent = 0, maxsent;
  sent = (double)sg_halo_plan_send_bytes(plan);
  MPI_Allreduce(&sent, &maxsent, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

  int nb[2] = {rank_ > 0 ? rank_ - 1 : MPI_PROC_NULL,
               rank_ < size_ - 1 ? rank_ + 1 : MPI_PROC_NULL};
  if (periodic_ && size_ > 1) {
    nb[0] = (rank_ + size_ - 1) % size_;
    nb[1] = (rank_ + 1) % size_;
  }
  int peer = (rank_ ^ 1) < size_ ? (rank_ ^ 1) : MPI_PROC_NULL;
  char *sb = malloc(2 * msg), *rb = malloc(2 * msg);
  memset(sb, 1, 2 * msg);
  double *t = malloc(3 * (size_t)reps * sizeof *t);
  double *tp = t, *tr = t + reps, *tq = t + 2 * reps;
  for (int r = -2; r < reps; ++r) {
    /* a time step's stencil rewrites the block */
    for (int64_t i = 0; i < cnt; ++i) x[i] = (float)(i + r);
    /* the plan */
    barrier();
    double t0 = MPI_Wtime();
    CK(sg_halo_exchange(plan, x));
    double t1 = MPI_Wtime();
    /* raw MPI on pre-packed buffers, same neighbours and sizes */
    MPI_Request q[4];
    MPI_Status sts[4];
    barrier();
    double t2 = MPI_Wtime();
    for (int s = 0; s < 2; ++s) /* tag: the direction of travel */
      MPI_Irecv(rb + s * msg, (int)msg, MPI_BYTE, nb[s], 7 + s, MPI_COMM_WORLD,
                &q[s]);
    for (int s = 0; s < 2; ++s)
      MPI_Isend(sb + s * msg, (int)msg, MPI_BYTE, nb[s], 8 - s, MPI_COMM_WORLD,
                &q[2 + s]);
    if (yield_)
      wait_yield(4, q);
    else
      MPI_Waitall(4, q, sts);
    double t3 = MPI_Wtime();
    /* ping-pong between pairs, all pairs at once */
    barrier();
    double t4 = MPI_Wtime();
    if (peer != MPI_PROC_NULL) {
      if (yield_) {
        MPI_Request pq;
        for (int leg = 0; leg < 2; ++leg) {
          if ((leg ^ rank_) & 1)
            MPI_Irecv(rb, (int)msg, MPI_BYTE, peer, 9, MPI_COMM_WORLD, &pq);
          else
            MPI_Isend(sb, (int)msg, MPI_BYTE, peer, 9, MPI_COMM_WORLD, &pq);
          wait_yield(1, &pq);
        }
      } else if (rank_ & 1) {
        MPI_Recv(rb, (int)msg, MPI_BYTE, peer, 9, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
        MPI_Send(sb, (int)msg, MPI_BYTE, peer, 9, MPI_COMM_WORLD);
      } else {
        MPI_Send(sb, (int)msg, MPI_BYTE, peer, 9, MPI_COMM_WORLD);
        MPI_Recv(rb, (int)msg, MPI_BYTE, peer, 9, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
      }
    }
    double t5 = MPI_Wtime();
    if (r >= 0) {
      tp[r] = t1 - t0;
      tr[r] = t3 - t2;
      tq[r] = (t5 - t4) / 2;
    }
  }
  double t_plan, m_plan, t_raw, m_raw, t_pp, m_pp;
  stats(tp, reps, MPI_COMM_WORLD, &t_plan, &m_plan);
  stats(tr, reps, MPI_COMM_WORLD, &t_raw, &m_raw);
  stats(tq, reps, MPI_COMM_WORLD, &t_pp, &m_pp);
  double pk = 0, up = 0, cp = 0;
  if (rank_ == 0) time_pack(split, n, w, reps, &pk, &up, &cp);
  barrier();

  if (rank_ == 0) {
    double bw = maxsent / t_plan / 1e9, bw_raw = maxsent / t_raw / 1e9;
    double bw_pp = (double)msg / t_pp / 1e9;
    printf(
        "{\"bench\":\"halo_exchange\",\"ranks\":%d,\"mesh\":\"%s\","
        "\"split\":\"%s\",\"boundary\":\"%s\",\"layout\":\"%s\",\"path\":\"%s\","
        "\"block\":\"%s\",\"yield\":%d,"
        "\"plan_path\":\"%s\","
        "\"interior\":[%lld,%lld],"
        "\"lead\":%d,\"width\":%lld,\"msg_bytes\":%zu,\"sent_bytes\":%.0f,"
        "\"exchange_us\":%.2f,\"raw_us\":%.2f,\"pingpong_oneway_us\":%.2f,"
        "\"exchange_GBps\":%.3f,\"raw_GBps\":%.3f,\"pingpong_GBps\":%.3f,"
        "\"exchange_vs_pingpong\":%.3f,\"exchange_vs_raw\":%.3f,"
        "\"min_exchange_us\":%.2f,\"min_raw_us\":%.2f,"
        "\"min_pingpong_oneway_us\":%.2f,\"min_exchange_vs_pingpong\":%.3f,"
        "\"pack_us\":%.2f,\"unpack_us\":%.2f,\"memcpy_us\":%.2f}\n",
        size_, spec, split ? "w" : "h", periodic_ ? "periodic" : "zero",
        cl_ ? "channels-last" : "packed", path_name(),
        plan_block_ ? "plan" : "user", yield_, sg_halo_plan_path(plan),
        (long long)desc.interior[0], (long long)desc.interior[1], C,
        (long long)w, msg, maxsent, t_plan * 1e6, t_raw * 1e6, t_pp * 1e6, bw,
        bw_raw, bw_pp, bw / bw_pp, bw / bw_raw, m_plan * 1e6, m_raw * 1e6,
        m_pp * 1e6, (maxsent / m_plan) / ((double)msg / m_pp), pk * 1e6,
        up * 1e6, cp * 1e6);
    fflush(stdout);
  }
  free(t);
  free(sb);
  free(rb);
  if (!plan_block_) free(x);
  CK(sg_halo_plan_destroy(&plan));
  CK(sg_mesh_destroy(&mesh));
}

/* (2w+1)^2 box stencil on rows [r0, r1) of one field: x has row stride ld
 * and interior origin org, y is the field's n_h x n_w output. */
static void stencil(const float *restrict x, int64_t ld, int64_t org,
                    float *restrict y, int64_t nw, int64_t w, int64_t r0,
                    int64_t r1) {
  const float k = 1.0f / (float)((2 * w + 1) * (2 * w + 1));
  for (int64_t i = r0; i < r1; ++i) {
    float *restrict yr = y + i * nw;
    for (int64_t j = 0; j < nw; ++j) yr[j] = 0.0f;
    for (int64_t a = -w; a <= w; ++a) {
      const float *restrict xr = x + org + (i + a) * ld;
      for (int64_t b = -w; b <= w; ++b)
        for (int64_t j = 0; j < nw; ++j) yr[j] += k * xr[j + b];
    }
  }
}

static void bench_overlap(int64_t nh, int64_t nw, int64_t lead, int64_t fields,
                          int64_t w, int reps, int every) {
  char spec[64];
  snprintf(spec, sizeof spec, "h=%d,w=1", size_);
  sg_mesh_t mesh = NULL;
  CK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  sg_halo_desc desc;
  sg_halo_desc_init(&desc);
  desc.ndims = 2;
  desc.lead = lead;
  desc.interior[0] = nh;
  desc.interior[1] = nw;
  desc.halo[0][0] = desc.halo[0][1] = w;
  desc.halo[1][0] = desc.halo[1][1] = w;
  desc.mesh_dim[0] = 0;
  desc.mesh_dim[1] = 1;
  desc.boundary[0] = SG_BOUNDARY_PERIODIC; /* across the mesh */
  desc.boundary[1] = SG_BOUNDARY_PERIODIC; /* local wrap along w */
  sg_halo_plan_t plan = NULL;
  CK(sg_halo_plan_create(mesh, &desc, &plan));
  int64_t cnt = sg_halo_plan_block_count(plan), st[3];
  sg_halo_plan_strides(plan, st);
  int64_t org = sg_halo_plan_origin(plan);
  float *x = NULL;
  if (plan_block_)
    CK(sg_halo_plan_alloc_block(plan, (void **)&x));
  else
    x = malloc((size_t)cnt * sizeof *x);
  float *y = malloc((size_t)(fields * nh * nw) * sizeof *y);
  for (int64_t i = 0; i < cnt; ++i) x[i] = (float)(i % 97);
  double sent = (double)sg_halo_plan_send_bytes(plan);
  enum { T_EX, T_ST, T_IN, T_BLK, T_OV0, T_OV1, T_N };
  double *t = malloc((size_t)T_N * (size_t)reps * sizeof *t);
#define STENCIL_ROWS(r0, r1)           \
  for (int64_t c = 0; c < fields; ++c) \
  stencil(x + c * st[0], st[1], org, y + c * nh * nw, nw, w, r0, r1)
  for (int r = -2; r < reps; ++r) {
    double t0, t1;
    /* exchange alone */
    barrier();
    t0 = MPI_Wtime();
    CK(sg_halo_exchange(plan, x));
    t1 = MPI_Wtime();
    if (r >= 0) t[T_EX * reps + r] = t1 - t0;
    /* stencil alone: all rows, and the interior rows */
    barrier();
    t0 = MPI_Wtime();
    STENCIL_ROWS(0, nh);
    t1 = MPI_Wtime();
    if (r >= 0) t[T_ST * reps + r] = t1 - t0;
    barrier();
    t0 = MPI_Wtime();
    STENCIL_ROWS(w, nh - w);
    t1 = MPI_Wtime();
    if (r >= 0) t[T_IN * reps + r] = t1 - t0;
    /* blocking: exchange then stencil */
    barrier();
    t0 = MPI_Wtime();
    CK(sg_halo_exchange(plan, x));
    STENCIL_ROWS(0, nh);
    t1 = MPI_Wtime();
    if (r >= 0) t[T_BLK * reps + r] = t1 - t0;
    /* overlap without (mode 0) and with (mode 1) progress calls */
    for (int mode = 0; mode < 2; ++mode) {
      int k = mode ? every : 0;
      barrier();
      t0 = MPI_Wtime();
      CK(sg_halo_start(plan, x));
      for (int64_t c = 0; c < fields; ++c) {
        float *xc = x + c * st[0], *yc = y + c * nh * nw;
        if (!k) {
          stencil(xc, st[1], org, yc, nw, w, w, nh - w);
          continue;
        }
        for (int64_t i = w; i < nh - w; i += k) {
          int64_t e = i + k < nh - w ? i + k : nh - w;
          stencil(xc, st[1], org, yc, nw, w, i, e);
          CK(sg_halo_progress(plan, NULL));
        }
      }
      CK(sg_halo_finish(plan));
      STENCIL_ROWS(0, w);
      STENCIL_ROWS(nh - w, nh);
      t1 = MPI_Wtime();
      if (r >= 0) t[(T_OV0 + mode) * reps + r] = t1 - t0;
    }
  }
#undef STENCIL_ROWS
  double med[T_N], mn[T_N];
  for (int k = 0; k < T_N; ++k)
    stats(t + k * reps, reps, MPI_COMM_WORLD, &med[k], &mn[k]);
  if (rank_ == 0) {
    double ex = med[T_EX], mex = mn[T_EX];
    printf(
        "{\"bench\":\"halo_overlap\",\"ranks\":%d,\"mesh\":\"%s\","
        "\"path\":\"%s\",\"block\":\"%s\",\"plan_path\":\"%s\",\"interior\":[%lld,%lld],\"lead\":%lld,"
        "\"fields\":%lld,\"width\":%lld,\"sent_bytes\":%.0f,"
        "\"exchange_us\":%.1f,\"stencil_us\":%.1f,"
        "\"interior_stencil_us\":%.1f,\"interior_vs_exchange\":%.2f,"
        "\"blocking_us\":%.1f,\"overlap_noprogress_us\":%.1f,"
        "\"overlap_progress_us\":%.1f,\"progress_every_rows\":%d,"
        "\"hidden_noprogress\":%.3f,\"hidden_progress\":%.3f,"
        "\"min_exchange_us\":%.1f,\"min_stencil_us\":%.1f,"
        "\"min_blocking_us\":%.1f,\"min_overlap_noprogress_us\":%.1f,"
        "\"min_overlap_progress_us\":%.1f,\"min_hidden_noprogress\":%.3f,"
        "\"min_hidden_progress\":%.3f}\n",
        size_, spec, path_name(), plan_block_ ? "plan" : "user",
        sg_halo_plan_path(plan), (long long)nh, (long long)nw, (long long)lead,
        (long long)fields, (long long)w, sent, ex * 1e6, med[T_ST] * 1e6,
        med[T_IN] * 1e6, med[T_IN] / ex, med[T_BLK] * 1e6, med[T_OV0] * 1e6,
        med[T_OV1] * 1e6, every, (med[T_BLK] - med[T_OV0]) / ex,
        (med[T_BLK] - med[T_OV1]) / ex, mex * 1e6, mn[T_ST] * 1e6,
        mn[T_BLK] * 1e6, mn[T_OV0] * 1e6, mn[T_OV1] * 1e6,
        (mn[T_BLK] - mn[T_OV0]) / mex, (mn[T_BLK] - mn[T_OV1]) / mex);
    fflush(stdout);
  }
  free(t);
  if (!plan_block_) free(x);
  free(y);
  CK(sg_halo_plan_destroy(&plan));
  CK(sg_mesh_destroy(&mesh));
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  int quick = 0, reps = 31, every = 2, splits = 3;
  const char *only = "";
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--progress-every") && i + 1 < argc)
      every = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else if (!strcmp(argv[i], "--boundary") && i + 1 < argc)
      periodic_ = !strcmp(argv[++i], "periodic");
    else if (!strcmp(argv[i], "--yield") && i + 1 < argc)
      yield_ = !strcmp(argv[++i], "on") ? 1 : !strcmp(argv[i], "off") ? 0 : -1;
    else if (!strcmp(argv[i], "--block") && i + 1 < argc)
      plan_block_ = !strcmp(argv[++i], "plan");
    else if (!strcmp(argv[i], "--layout") && i + 1 < argc)
      cl_ = !strcmp(argv[++i], "cl");
    else if (!strcmp(argv[i], "--split") && i + 1 < argc) {
      ++i;
      splits = !strcmp(argv[i], "h") ? 1 : !strcmp(argv[i], "w") ? 2 : 3;
    }
  }
  if (yield_ < 0) {
    MPI_Comm node;
    int nn = 1;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                        &node);
    MPI_Comm_size(node, &nn);
    MPI_Comm_free(&node);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    yield_ = cores > 0 && nn > cores;
  }

  if (size_ < 2) {
    if (rank_ == 0) fprintf(stderr, "bench_halo: run with 2 or more ranks\n");
    MPI_Finalize();
    return 0;
  }
  if (quick) reps = 5;
  if (reps < 1) reps = 1;
  if (every < 1) every = 1;
  if (strcmp(only, "overlap") != 0) {
    const int64_t ns[] = {256, 1024, 4096, 16384, 65536};
    const int64_t ws[] = {1, 2, 4};
    int nn = quick ? 2 : 5;
    for (int split = 0; split < 2; ++split) {
      if (!(splits & (1 << split))) continue;
      for (int a = 0; a < nn; ++a)
        for (int b = 0; b < 3; ++b) bench_exchange(split, ns[a], ws[b], reps);
    }
  }
  if (strcmp(only, "exchange") != 0) {
    /* (n_h, n_w, lead, fields, width): messages of 16 KiB - 1 MiB (lead *
     * width * n_w * 4 bytes), interior stencils from below the exchange
     * time to several times it */
    const int64_t cfgs[][5] = {{16, 1024, 4, 1, 1},  {64, 1024, 4, 1, 1},
                               {16, 4096, 4, 1, 1},  {32, 4096, 4, 1, 1},
                               {64, 4096, 4, 1, 1},  {128, 4096, 4, 2, 1},
                               {16, 16384, 4, 1, 1}, {32, 16384, 4, 1, 1},
                               {64, 16384, 4, 2, 1}, {32, 16384, 4, 1, 4},
                               {64, 65536, 4, 1, 1}};
    int nc = (int)(sizeof cfgs / sizeof cfgs[0]);
    for (int a = 0; a < (quick ? 2 : nc); ++a)
      bench_overlap(cfgs[a][0], cfgs[a][1], cfgs[a][2], cfgs[a][3], cfgs[a][4],
                    reps, every);
  }
  MPI_Finalize();
  return 0;
}
