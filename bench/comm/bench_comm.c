/* bench/comm: the communication layer against raw MPI.
 *
 *   mpiexec -n P sg-bench-comm [--min-bytes B] [--max-bytes B] [--reps R]
 *                             [--warmup W] [--max-iters K]
 *
 * For message sizes from 1 KiB to 64 MiB per rank (x4 steps), times
 * all-reduce (sum, f32) and all-to-all through sg_allreduce / sg_alltoall
 * and through MPI_Allreduce / MPI_Alltoall on the same communicator with the
 * same buffers, plus a plain MPI ping-pong between ranks 0 and 1. The two
 * implementations alternate call by call within every repetition so the
 * load of a shared machine hits both alike. A repetition makes k rounds (k
 * shrinks with the size), sums each implementation's call times and takes
 * the slowest rank; the median (and minimum) over repetitions is printed as
 * one JSON line per (op, impl, bytes) on rank 0:
 *   {"op": "allreduce", "impl": "sg", "bytes": 1048576, "ranks": 4,
 *    "median_s": ..., "gbps": ..., "busbw_gbps": ..., "reps": R, "iters": k}
 * gbps is bytes per rank / time (all-to-all: bytes sent per rank; ping-pong:
 * one-way bytes / one-way time); busbw_gbps follows nccl-tests: all-reduce
 * x 2(P-1)/P, all-to-all x (P-1)/P. Then one "ratio" line per size: the
 * median over repetitions of (layer time / raw MPI time) of the same
 * repetition. */
#include "sg_comm.h"
#include "sg_mesh.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REPS 101

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef enum { OP_ALLREDUCE, OP_ALLTOALL } op_kind;

typedef struct ctx {
  sg_group_t g;
  MPI_Comm comm;
  int p, rank;
  float *send, *recv;
} ctx;

/* One call of op through the layer (impl 0) or raw MPI (impl 1). */
static int run_once(ctx *c, op_kind op, int impl, size_t bytes) {
  int64_t n = (int64_t)(bytes / sizeof(float));
  if (op == OP_ALLREDUCE) {
    if (impl == 0)
      return sg_allreduce(c->g, c->send, c->recv, n, SG_DTYPE_F32,
                          SG_REDUCE_SUM) != SG_OK;
    return MPI_Allreduce(c->send, c->recv, (int)n, MPI_FLOAT, MPI_SUM,
                         c->comm) != MPI_SUCCESS;
  }
  int64_t per = n / c->p;
  if (impl == 0)
    return sg_alltoall(c->g, c->send, c->recv, per, SG_DTYPE_F32) != SG_OK;
  return MPI_Alltoall(c->send, (int)per, MPI_FLOAT, c->recv, (int)per,
                      MPI_FLOAT, c->comm) != MPI_SUCCESS;
}

/* One repetition: k rounds, each calling both implementations back to back
 * (which goes first alternates), timing every call. t[impl] = seconds per
 * call on the slowest rank. Interleaving call by call makes the load of a
 * shared machine hit both implementations alike. */
static void time_pair(ctx *c, op_kind op, size_t bytes, int k, double t[2],
                      int *err) {
  double sum[2] = {0, 0};
  MPI_Barrier(c->comm);
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < 2; ++j) {
      int impl = (i + j) % 2;
      double t0 = MPI_Wtime();
      *err |= run_once(c, op, impl, bytes);
      sum[impl] += MPI_Wtime() - t0;
    }
  double tmax[2];
  MPI_Allreduce(sum, tmax, 2, MPI_DOUBLE, MPI_MAX, c->comm);
  t[0] = tmax[0] / k;
  t[1] = tmax[1] / k;
}

static int max_iters = 200;

static int iters_for(size_t bytes) {
  size_t k = ((size_t)64 << 20) / (bytes ? bytes : 1);
  if (k < 2) k = 2;
  if (k > (size_t)max_iters) k = (size_t)max_iters;
  return (int)k;
}

static void emit(const char *op, const char *impl, size_t bytes, int p,
                 double *t, int reps, double bus, int iters) {
  double tmin = t[0];
  for (int r = 1; r < reps; ++r) tmin = t[r] < tmin ? t[r] : tmin;
  double med = median(t, reps);
  double gbps = (double)bytes / med / 1e9;
  printf(
      "{\"op\": \"%s\", \"impl\": \"%s\", \"bytes\": %zu, \"ranks\": %d, \"median_s\": %.6e, "
      "\"min_s\": %.6e, \"gbps\": %.4g, \"busbw_gbps\": %.4g, \"reps\": %d, \"iters\": %d}\n",
      op, impl, bytes, p, med, tmin, gbps, gbps * bus, reps, iters);
  fflush(stdout);
}

static void bench_collective(ctx *c, op_kind op, size_t bytes, int reps,
                             int warmup, int *err) {
  const char *name = op == OP_ALLREDUCE ? "allreduce" : "alltoall";
  /* all-to-all needs a multiple of p floats */
  if (op == OP_ALLTOALL)
    bytes = bytes / (sizeof(float) * (size_t)c->p) * sizeof(float) *
            (size_t)c->p;
  if (bytes == 0) return;
  int k = iters_for(bytes);
  double t[2][MAX_REPS], pair[2];
  for (int w = 0; w < warmup; ++w) time_pair(c, op, bytes, 1, pair, err);
  for (int r = 0; r < reps; ++r) {
    time_pair(c, op, bytes, k, pair, err);
    t[0][r] = pair[0];
    t[1][r] = pair[1];
  }
  double bus = op == OP_ALLREDUCE ? 2.0 * (c->p - 1) / c->p
                                  : (double)(c->p - 1) / c->p;
  if (c->rank == 0) {
    double ratio[MAX_REPS];
    for (int r = 0; r < reps; ++r) ratio[r] = t[0][r] / t[1][r];
    double mr = median(ratio, reps);
    emit(name, "sg", bytes, c->p, t[0], reps, bus, k);
    emit(name, "mpi", bytes, c->p, t[1], reps, bus, k);
    printf(
        "{\"op\": \"%s\", \"impl\": \"ratio\", \"bytes\": %zu, \"ranks\": %d, "
        "\"sg_over_mpi\": %.4f}\n",
        name, bytes, c->p, mr);
    fflush(stdout);
  }
}

static void bench_pingpong(ctx *c, size_t bytes, int reps, int warmup) {
  if (c->p < 2) return;
  int k = iters_for(bytes);
  double t[MAX_REPS];
  char *buf = (char *)c->send;
  int peer = c->rank == 0 ? 1 : 0;
  for (int r = -warmup; r < reps; ++r) {
    MPI_Barrier(c->comm);
    double t0 = MPI_Wtime();
    int kk = r < 0 ? 1 : k;
    for (int i = 0; i < kk && c->rank < 2; ++i) {
      if (c->rank == 0) {
        MPI_Send(buf, (int)bytes, MPI_BYTE, peer, 7, c->comm);
        MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, 7, c->comm,
                 MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, 7, c->comm,
                 MPI_STATUS_IGNORE);
        MPI_Send(buf, (int)bytes, MPI_BYTE, peer, 7, c->comm);
      }
    }
    if (r >= 0) t[r] = (MPI_Wtime() - t0) / kk / 2; /* one way */
  }
  if (c->rank == 0) emit("pingpong", "mpi", bytes, 2, t, reps, 1.0, k);
}

static int parse_size(const char *s, size_t *out) {
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s) return 0;
  if (*end == 'K' || *end == 'k')
    v <<= 10, ++end;
  else if (*end == 'M' || *end == 'm')
    v <<= 20, ++end;
  else if (*end == 'G' || *end == 'g')
    v <<= 30, ++end;
  if (*end == 'i' || *end == 'B') ++end;
  if (*end == 'B') ++end;
  if (*end) return 0;
  *out = (size_t)v;
  return 1;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  ctx c;
  memset(&c, 0, sizeof c);
  MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c.p);
  size_t min_b = 1 << 10, max_b = (size_t)64 << 20;
  int reps = 11, warmup = 2;
  for (int i = 1; i < argc; ++i) {
    int ok = i + 1 < argc;
    if (ok && strcmp(argv[i], "--min-bytes") == 0)
      ok = parse_size(argv[++i], &min_b);
    else if (ok && strcmp(argv[i], "--max-bytes") == 0)
      ok = parse_size(argv[++i], &max_b);
    else if (ok && strcmp(argv[i], "--reps") == 0)
      reps = atoi(argv[++i]);
    else if (ok && strcmp(argv[i], "--warmup") == 0)
      warmup = atoi(argv[++i]);
    else if (ok && strcmp(argv[i], "--max-iters") == 0)
      max_iters = atoi(argv[++i]);
    else
      ok = 0;
    if (!ok || reps < 1 || reps > MAX_REPS || warmup < 0 || max_iters < 1 ||
        min_b < 4 || max_b < min_b || max_b > ((size_t)1 << 30)) {
      if (c.rank == 0)
        fprintf(stderr,
                "sg-bench-comm: error: bad or unknown argument '%s' (options: "
                "--min-bytes B --max-bytes B (<= 1GiB) --reps 1..%d --warmup W "
                "--max-iters K)\n",
                argv[i], MAX_REPS);
      MPI_Finalize();
      return 2;
    }
  }
  char spec[64];
  snprintf(spec, sizeof spec, "world=%d", c.p);
  sg_mesh_t mesh = NULL;
  if (sg_mesh_create(MPI_COMM_WORLD, spec, &mesh) != SG_OK ||
      sg_mesh_group(mesh, 1u, &c.g) != SG_OK) {
    if (c.rank == 0)
      fprintf(stderr, "sg-bench-comm: error: %s\n", sg_last_error());
    MPI_Finalize();
    return 1;
  }
  c.comm = sg_group_comm(c.g); /* raw MPI runs on the very same communicator */
  c.send = malloc(max_b);
  c.recv = malloc(max_b);
  if (!c.send || !c.recv) {
    fprintf(stderr, "sg-bench-comm: error: out of memory for 2 x %zu bytes\n",
            max_b);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (size_t i = 0; i < max_b / sizeof(float); ++i) {
    c.send[i] = (float)((i * 7 + (size_t)c.rank) % 13) * 0.25f;
    c.recv[i] = 0.0f;
  }
  int err = 0;
  for (size_t b = min_b; b <= max_b; b *= 4) {
    bench_collective(&c, OP_ALLREDUCE, b, reps, warmup, &err);
    bench_collective(&c, OP_ALLTOALL, b, reps, warmup, &err);
    bench_pingpong(&c, b, reps, warmup);
  }
  int any = 0;
  MPI_Allreduce(&err, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any && c.rank == 0)
    fprintf(stderr, "sg-bench-comm: error: a call failed\n");
  free(c.send);
  free(c.recv);
  sg_mesh_destroy(&mesh);
  MPI_Finalize();
  return any ? 1 : 0;
}
