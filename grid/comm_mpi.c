/* shardgrid — the communication layer: per-call count arrays, the MPI
 * calls with int64 counts (classic or MPI-4 large-count), and the
 * deterministic reductions (see comm.c). */
#include "comm_impl.h"
#include "mesh_impl.h"
#include "sg_comm.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- per-call count arrays ------------------------------------------------*/


static void *keep_alloc(sg_comm_keep *k, size_t bytes) {
  if (k->n == (int)(sizeof k->p / sizeof k->p[0])) return NULL;
  void *q = malloc(bytes ? bytes : 1);
  if (q) k->p[k->n++] = q;
  return q;
}

void sg_comm_keep_free(sg_comm_keep *k) {
  for (int i = 0; i < k->n; ++i) free(k->p[i]);
  k->n = 0;
}

/* displs[r], or the packed offset when displs is NULL */
sg_status sg_comm_counts_check(const char *fn, const char *what, int n,
                               const int64_t *counts, const int64_t *displs,
                               int *all_fit) {
  sg_status st = SG_OK;
  if (!counts) SG_RAISE(SG_ERR_INVALID_ARG, "%s: %s is NULL", fn, what);
  int64_t off = 0;
  for (int r = 0; r < n; ++r) {
    int64_t d = displs ? displs[r] : off;
    if (counts[r] < 0 || d < 0)
      SG_RAISE(SG_ERR_SHAPE,
               "%s: %s[%d] = %lld (displacement %lld) is "
               "negative",
               fn, what, r, (long long)counts[r], (long long)d);
    if (!sg_comm_fits_int(counts[r]) || !sg_comm_fits_int(d)) *all_fit = 0;
    off += counts[r];
  }
fail:
  return st;
}

/* The counts and displacements (packed offsets when displs is NULL) as the
 * arrays an MPI call takes: CT/DT are int for the classic calls, MPI_Count
 * and MPI_Aint for the large-count ones. */
#define SG_COUNTS_CONVERT(name, CT, DT)                                \
  static sg_status name(sg_comm_keep *k, int n, const int64_t *counts, \
                        const int64_t *displs, CT **c, DT **d) {       \
    *c = keep_alloc(k, (size_t)n * sizeof **c);                        \
    *d = keep_alloc(k, (size_t)n * sizeof **d);                        \
    if (!*c || !*d)                                                    \
      return sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__,            \
                          "out of memory for %d counts", n);           \
    int64_t off = 0;                                                   \
    for (int r = 0; r < n; ++r) {                                      \
      (*c)[r] = (CT)counts[r];                                         \
      (*d)[r] = (DT)(displs ? displs[r] : off);                        \
      off += counts[r];                                                \
    }                                                                  \
    return SG_OK;                                                      \
  }

SG_COUNTS_CONVERT(counts_int, int, int)
#if SG_MPI_LARGE
SG_COUNTS_CONVERT(counts_large, MPI_Count, MPI_Aint)
#endif

/* ---- the MPI calls (blocking when req is NULL) ----------------------------*/

sg_status sg_comm_mpi_allreduce(sg_group_t g, const void *send, void *recv,
                                int64_t count, MPI_Datatype t, MPI_Op op,
                                MPI_Request *req) {
  sg_status st = SG_OK;
  const void *s = send == recv ? MPI_IN_PLACE : send;
  if (sg_comm_fits_int(count)) {
    if (req)
      SG_MPI(MPI_Iallreduce(s, recv, (int)count, t, op, g->comm, req));
    else
      SG_MPI(MPI_Allreduce(s, recv, (int)count, t, op, g->comm));
  } else if (req) {
    SG_MPI_LARGE_CALL("sg_iallreduce",
                      MPI_Iallreduce_c(s, recv, (MPI_Count)count, t, op,
                                       g->comm, req));
  } else {
    SG_MPI_LARGE_CALL("sg_allreduce", MPI_Allreduce_c(s, recv, (MPI_Count)count,
                                                      t, op, g->comm));
  }
fail:
  return st;
}

sg_status sg_comm_mpi_allgatherv(sg_group_t g, const void *send,
                                 int64_t sendcount, void *recv,
                                 const int64_t *counts, const int64_t *displs,
                                 MPI_Datatype t, sg_comm_keep *k,
                                 MPI_Request *req) {
  sg_status st = SG_OK;
  const char *fn = req ? "sg_iallgatherv" : "sg_allgatherv";
  int fit = sg_comm_fits_int(sendcount);
  SG_TRY(sg_comm_counts_check(fn, "recvcounts", g->size, counts, displs, &fit));
  if (sendcount != counts[g->rank])
    SG_RAISE(SG_ERR_SHAPE,
             "%s: sendcount %lld differs from recvcounts[%d] ="
             " %lld",
             fn, (long long)sendcount, g->rank, (long long)counts[g->rank]);
  int64_t own = displs ? displs[g->rank] : 0;
  if (!displs)
    for (int r = 0; r < g->rank; ++r) own += counts[r];
  int elsize = 0;
  SG_MPI(MPI_Type_size(t, &elsize));
  char *mine = (char *)recv + own * (int64_t)elsize;
  const void *s = send == mine ? MPI_IN_PLACE : send;
  if (g->size == 1) {
    /* MPICH 4.0 ignores displs[0] on a one-rank communicator: copy here */
    if (s != MPI_IN_PLACE && sendcount > 0)
      memmove(mine, send, (size_t)sendcount * (size_t)elsize);
    if (req) *req = MPI_REQUEST_NULL;
    return SG_OK;
  }
  if (fit) {
    int *c, *d;
    SG_TRY(counts_int(k, g->size, counts, displs, &c, &d));
    if (req)
      SG_MPI(
          MPI_Iallgatherv(s, (int)sendcount, t, recv, c, d, t, g->comm, req));
    else
      SG_MPI(MPI_Allgatherv(s, (int)sendcount, t, recv, c, d, t, g->comm));
  } else {
#if SG_MPI_LARGE
    MPI_Count *c;
    MPI_Aint *d;
    SG_TRY(counts_large(k, g->size, counts, displs, &c, &d));
    if (req)
      SG_MPI(MPI_Iallgatherv_c(s, (MPI_Count)sendcount, t, recv, c, d, t,
                               g->comm, req));
    else
      SG_MPI(
          MPI_Allgatherv_c(s, (MPI_Count)sendcount, t, recv, c, d, t, g->comm));
#else
    SG_MPI_LARGE_CALL(fn, 0);
#endif
  }
fail:
  return st;
}

sg_status sg_comm_mpi_alltoallv(sg_group_t g, const void *send,
                                const int64_t *sc, const int64_t *sd,
                                void *recv, const int64_t *rc,
                                const int64_t *rd, MPI_Datatype t,
                                sg_comm_keep *k, MPI_Request *req) {
  sg_status st = SG_OK;
  const char *fn = req ? "sg_ialltoallv" : "sg_alltoallv";
  int fit = 1;
  int inplace = send == recv;
  if (!inplace)
    SG_TRY(sg_comm_counts_check(fn, "sendcounts", g->size, sc, sd, &fit));
  SG_TRY(sg_comm_counts_check(fn, "recvcounts", g->size, rc, rd, &fit));
  const void *s = inplace ? MPI_IN_PLACE : send;
  if (inplace) sc = rc, sd = rd; /* ignored by MPI */
  if (fit) {
    int *c1, *d1, *c2, *d2;
    SG_TRY(counts_int(k, g->size, sc, sd, &c1, &d1));
    SG_TRY(counts_int(k, g->size, rc, rd, &c2, &d2));
    if (req)
      SG_MPI(MPI_Ialltoallv(s, c1, d1, t, recv, c2, d2, t, g->comm, req));
    else
      SG_MPI(MPI_Alltoallv(s, c1, d1, t, recv, c2, d2, t, g->comm));
  } else {
#if SG_MPI_LARGE
    MPI_Count *c1, *c2;
    MPI_Aint *d1, *d2;
    SG_TRY(counts_large(k, g->size, sc, sd, &c1, &d1));
    SG_TRY(counts_large(k, g->size, rc, rd, &c2, &d2));
    if (req)
      SG_MPI(MPI_Ialltoallv_c(s, c1, d1, t, recv, c2, d2, t, g->comm, req));
    else
      SG_MPI(MPI_Alltoallv_c(s, c1, d1, t, recv, c2, d2, t, g->comm));
#else
    SG_MPI_LARGE_CALL(fn, 0);
#endif
  }
fail:
  return st;
}

sg_status sg_comm_mpi_reduce_scatter(sg_group_t g, const void *send, void *recv,
                                     const int64_t *counts, MPI_Datatype t,
                                     MPI_Op op, sg_comm_keep *k,
                                     MPI_Request *req) {
  sg_status st = SG_OK;
  const char *fn = req ? "sg_ireduce_scatter" : "sg_reduce_scatter";
  int fit = 1;
  SG_TRY(sg_comm_counts_check(fn, "recvcounts", g->size, counts, NULL, &fit));
  const void *s = send == recv ? MPI_IN_PLACE : send;
  if (fit) {
    int *c, *d;
    SG_TRY(counts_int(k, g->size, counts, NULL, &c, &d));
    if (req)
      SG_MPI(MPI_Ireduce_scatter(s, recv, c, t, op, g->comm, req));
    else
      SG_MPI(MPI_Reduce_scatter(s, recv, c, t, op, g->comm));
  } else {
#if SG_MPI_LARGE
    MPI_Count *c;
    MPI_Aint *d;
    SG_TRY(counts_large(k, g->size, counts, NULL, &c, &d));
    if (req)
      SG_MPI(MPI_Ireduce_scatter_c(s, recv, c, t, op, g->comm, req));
    else
      SG_MPI(MPI_Reduce_scatter_c(s, recv, c, t, op, g->comm));
#else
    SG_MPI_LARGE_CALL(fn, 0);
#endif
  }
fail:
  return st;
}

/* ---- deterministic reductions ---------------------------------------------*/

/* out[i] = in[0][i] op in[1][i] op ... in rank order (blocks of n). */
#define SG_REDUCE_LOOP(T)                                                   \
  do {                                                                      \
    const T *x = (const T *)in;                                             \
    T *y = (T *)out;                                                        \
    if (y != x) memcpy(y, x, (size_t)n * sizeof(T));                        \
    for (int r = 1; r < p; ++r) {                                           \
      const T *xr = x + (int64_t)r * n;                                     \
      if (op == SG_REDUCE_SUM) {                                            \
        _Pragma("omp parallel for simd if (n > 65536) schedule(static)")    \
        for (int64_t i = 0; i < n; ++i) y[i] = y[i] + xr[i];                \
      } else if (op == SG_REDUCE_MAX) {                                     \
        _Pragma("omp parallel for simd if (n > 65536) schedule(static)")    \
        for (int64_t i = 0; i < n; ++i) y[i] = xr[i] > y[i] ? xr[i] : y[i]; \
      } else {                                                              \
        _Pragma("omp parallel for simd if (n > 65536) schedule(static)")    \
        for (int64_t i = 0; i < n; ++i) y[i] = xr[i] < y[i] ? xr[i] : y[i]; \
      }                                                                     \
    }                                                                       \
  } while (0)

static void reduce_blocks(sg_dtype dt, sg_reduce_op op, const void *in, int p,
                          int64_t n, void *out) {
  if (n == 0) return;
  switch (dt) {
  case SG_DTYPE_F32: SG_REDUCE_LOOP(float); break;
  case SG_DTYPE_F64: SG_REDUCE_LOOP(double); break;
  case SG_DTYPE_I32: SG_REDUCE_LOOP(int32_t); break;
  case SG_DTYPE_I64: SG_REDUCE_LOOP(int64_t); break;
  default: break;
  }
}

void sg_comm_det_free(sg_comm_det_op *d) {
  if (!d) return;
  free(d->scratch);
  free(d->counts); /* one allocation holds all six arrays */
  free(d);
}

/* Plan and start (or run, when req is NULL) the all-to-all-v phase. */
sg_status sg_comm_det_start(sg_group_t g, const void *send, void *recv,
                            int64_t count, const int64_t *blocks, sg_dtype dt,
                            sg_reduce_op op, MPI_Datatype t, sg_comm_keep *k,
                            sg_comm_det_op **out, MPI_Request *req) {
  sg_status st = SG_OK;
  int p = g->size, me = g->rank;
  if (p < 1 || me < 0 || me >= p)
    return sg_error_set(SG_ERR_INTERNAL, __FILE__, __LINE__,
                        "group rank %d of %d", me, p);
  sg_comm_det_op *d = calloc(1, sizeof *d);
  if (!d) SG_RAISE(SG_ERR_ALLOC, "out of memory for a reduction");
  d->g = g;
  d->dt = dt;
  d->op = op;
  d->t = t;
  d->allreduce = blocks == NULL;
  d->recv = recv;
  d->counts = malloc(6 * (size_t)p * sizeof(int64_t));
  if (!d->counts) SG_RAISE(SG_ERR_ALLOC, "out of memory for a reduction");
  d->displs = d->counts + p;
  d->sc = d->counts + 2 * p;
  d->sd = d->counts + 3 * p;
  d->rc = d->counts + 4 * p;
  d->rd = d->counts + 5 * p;
  int64_t off = 0;
  for (int r = 0; r < p; ++r) {
    d->counts[r] = blocks ? blocks[r] : count / p + (r < count % p);
    d->displs[r] = off;
    off += d->counts[r];
  }
  int64_t mine = d->counts[me];
  for (int r = 0; r < p; ++r) {
    d->sc[r] = d->counts[r];
    d->sd[r] = d->displs[r];
    d->rc[r] = mine;
    d->rd[r] = (int64_t)r * mine;
  }
  size_t es = sg_dtype_size(dt);
  d->out = blocks ? recv : (char *)recv + (size_t)d->displs[me] * es;
  /* never NULL, never equal to send (that would mean in place) */
  d->scratch = malloc(mine > 0 ? (size_t)p * (size_t)mine * es : 1);
  if (!d->scratch)
    SG_RAISE(SG_ERR_ALLOC, "out of memory for %lld scratch elements",
             (long long)p * mine);
  SG_TRY(sg_comm_mpi_alltoallv(g, send, d->sc, d->sd, d->scratch, d->rc, d->rd,
                               t, k, req));
  *out = d;
  return SG_OK;
fail:
  sg_comm_det_free(d);
  return st;
}

/* After the all-to-all-v: reduce the own block; start (or run) the
 * all-gather-v when this is an all-reduce. *more = 1 if it was started. */
sg_status sg_comm_det_finish(sg_comm_det_op *d, sg_comm_keep *k,
                             MPI_Request *req, int *more) {
  sg_status st = SG_OK;
  sg_group_t g = d->g;
  int me = g->rank;
  *more = 0;
  reduce_blocks(d->dt, d->op, d->scratch, g->size, d->counts[me], d->out);
  if (d->allreduce && g->size > 1) {
    SG_TRY(sg_comm_mpi_allgatherv(g, d->out, d->counts[me], d->recv, d->counts,
                                  d->displs, d->t, k, req));
    *more = req != NULL;
  }
fail:
  return st;
}

sg_status sg_comm_det_run(sg_group_t g, const void *send, void *recv,
                          int64_t count, const int64_t *blocks, sg_dtype dt,
                          sg_reduce_op op, MPI_Datatype t) {
  sg_status st = SG_OK;
  sg_comm_keep k = {{0}, 0};
  sg_comm_det_op *d = NULL;
  int more = 0;
  SG_TRY(
      sg_comm_det_start(g, send, recv, count, blocks, dt, op, t, &k, &d, NULL));
  SG_TRY(sg_comm_det_finish(d, &k, NULL, &more));
fail:
  sg_comm_det_free(d);
  sg_comm_keep_free(&k);
  return st;
}
