/* bench/comm: the communication layer against raw MPI.
 *
 *   mpiexec -n P sg-bench-comm [--min-bytes B] [--max-bytes B] [--reps R]
 *                             [--warmup W] [--max-iters K]
 *
 * For message sizes from 1 KiB to 64 MiB per rank (x4 steps), times
 * all-reduce (sum, f32) and all-to-all through sg_allreduce / sg_alltoall
 * and through MPI_Allreduce / MPI_Alltoall on the same communicator with the
 * same buffers, plus a plain MPI ping-pong between ranks 0 and 1. The two
 * implementations alternate within every repetition so machine noise hits
 * both alike. A repetition times k back-to-back calls (k shrinks with the
 * size) and takes the slowest rank; the median over repetitions is printed
 * as one JSON line per (op, impl, bytes) on rank 0:
 *   {"op": "allreduce", "impl": "sg", "bytes": 1048576, "ranks": 4,
 *    "median_s": ..., "gbps": ..., "busbw_gbps": ..., "reps": R, "iters": k}
 * gbps is bytes per rank / time (all-to-all: bytes sent per rank; ping-pong:
 * one-way bytes / one-way time); busbw_gbps follows nccl-tests: all-reduce
 * x 2(P-1)/P, all-to-all x (P-1)/P. Then one "ratio" line per size: the
 * layer's median over raw MPI's. */
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
      return sg_allreduce(c->g, c->send, c->recv, n, SG_DTYPE_F32, SG_REDUCE_SUM) != SG_OK;
    return MPI_Allreduce(c->send, c->recv, (int)n, MPI_FLOAT, MPI_SUM, c->comm) != MPI_SUCCESS;
  }
  int64_t per = n / c->p;
  if (impl == 0) return sg_alltoall(c->g, c->send, c->recv, per, SG_DTYPE_F32) != SG_OK;
  return MPI_Alltoall(c->send, (int)per, MPI_FLOAT, c->recv, (int)per, MPI_FLOAT, c->comm) !=
         MPI_SUCCESS;
}

/* Seconds per call of k calls, slowest rank. */
static double time_calls(ctx *c, op_kind op, int impl, size_t bytes, int k, int *err) {
  MPI_Barrier(c->comm);
  double t0 = MPI_Wtime();
  for (int i = 0; i < k; ++i) *err |= run_once(c, op, impl, bytes);
  double t = (MPI_Wtime() - t0) / k, tmax = 0;
  MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, c->comm);
  return tmax;
}

static int max_iters = 200;

static int iters_for(size_t bytes) {
  size_t k = ((size_t)64 << 20) / (bytes ? bytes : 1);
  if (k < 2) k = 2;
  if (k > (size_t)max_iters) k = (size_t)max_iters;
  return (int)k;
}

static void emit(const char *op, const char *impl, size_t bytes, int p, double t, double bus,
                 int reps, int iters) {
  double gbps = (double)bytes / t / 1e9;
  printf("{\"op\": \"%s\", \"impl\": \"%s\", \"bytes\": %zu, \"ranks\": %d, \"median_s\": %.6e, "
         "\"gbps\": %.4f, \"busbw_gbps\": %.4f, \"reps\": %d, \"iters\": %d}\n",
         op, impl, bytes, p, t, gbps, gbps * bus, reps, iters);
  fflush(stdout);
}

static void bench_collective(ctx *c, op_kind op, size_t bytes, int reps, int warmup, int *err) {
  const char *name = op == OP_ALLREDUCE ? "allreduce" : "alltoall";
  /* all-to-all needs a multiple of p floats */
  if (op == OP_ALLTOALL) bytes = bytes / (sizeof(float) * (size_t)c->p) * sizeof(float) * (size_t)c->p;
  if (bytes == 0) return;
  int k = iters_for(bytes);
  double t[2][MAX_REPS];
  for (int w = 0; w < warmup; ++w)
    for (int impl = 0; impl < 2; ++impl) time_calls(c, op, impl, bytes, 1, err);
  for (int r = 0; r < reps; ++r)
    for (int i = 0; i < 2; ++i) {
      int impl = (r + i) % 2; /* alternate which goes first */
      t[impl][r] = time_calls(c, op, impl, bytes, k, err);
    }
  double m_sg = median(t[0], reps), m_mpi = median(t[1], reps);
  double bus = op == OP_ALLREDUCE ? 2.0 * (c->p - 1) / c->p : (double)(c->p - 1) / c->p;
  if (c->rank == 0) {
    emit(name, "sg", bytes, c->p, m_sg, bus, reps, k);
    emit(name, "mpi", bytes, c->p, m_mpi, bus, reps, k);
    printf("{\"op\": \"%s\", \"impl\": \"ratio\", \"bytes\": %zu, \"ranks\": %d, "
           "\"sg_over_mpi\": %.4f}\n",
           name, bytes, c->p, m_sg / m_mpi);
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
        MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, 7, c->comm, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, 7, c->comm, MPI_STATUS_IGNORE);
        MPI_Send(buf, (int)bytes, MPI_BYTE, peer, 7, c->comm);
      }
    }
    if (r >= 0) t[r] = (MPI_Wtime() - t0) / kk / 2; /* one way */
  }
  if (c->rank == 0) emit("pingpong", "mpi", bytes, 2, median(t, reps), 1.0, reps, k);
}

static int parse_size(const char *s, size_t *out) {
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s) return 0;
  if (*end == 'K' || *end == 'k') v <<= 10, ++end;
  else if (*end == 'M' || *end == 'm') v <<= 20, ++end;
  else if (*end == 'G' || *end == 'g') v <<= 30, ++end;
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
    if (ok && strcmp(argv[i], "--min-bytes") == 0) ok = parse_size(argv[++i], &min_b);
    else if (ok && strcmp(argv[i], "--max-bytes") == 0) ok = parse_size(argv[++i], &max_b);
    else if (ok && strcmp(argv[i], "--reps") == 0) reps = atoi(argv[++i]);
    else if (ok && strcmp(argv[i], "--warmup") == 0) warmup = atoi(argv[++i]);
    else if (ok && strcmp(argv[i], "--max-iters") == 0) max_iters = atoi(argv[++i]);
    else ok = 0;
    if (!ok || reps < 1 || reps > MAX_REPS || warmup < 0 || max_iters < 1 || min_b < 4 || max_b < min_b ||
        max_b > ((size_t)1 << 30)) {
      if (c.rank == 0)
        fprintf(stderr, "sg-bench-comm: error: bad or unknown argument '%s' (options: "
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
    if (c.rank == 0) fprintf(stderr, "sg-bench-comm: error: %s\n", sg_last_error());
    MPI_Finalize();
    return 1;
  }
  c.comm = sg_group_comm(c.g); /* raw MPI runs on the very same communicator */
  c.send = malloc(max_b);
  c.recv = malloc(max_b);
  if (!c.send || !c.recv) {
    fprintf(stderr, "sg-bench-comm: error: out of memory for 2 x %zu bytes\n", max_b);
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
  if (any && c.rank == 0) fprintf(stderr, "sg-bench-comm: error: a call failed\n");
  free(c.send);
  free(c.recv);
  sg_mesh_destroy(&mesh);
  MPI_Finalize();
  return any ? 1 : 0;
}
