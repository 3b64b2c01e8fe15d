/* shardgrid — internals of the communication layer (not installed): the
 * per-call allocations, the MPI calls with int64 counts and the
 * deterministic reductions (comm_mpi.c), shared with comm.c (requests,
 * collectives, point to point). */
#ifndef SG_COMM_IMPL_H
#define SG_COMM_IMPL_H

#include <limits.h>
#include <mpi.h>
#include <stdint.h>

#include "mesh_impl.h"
#include "sg_comm.h"

#if MPI_VERSION >= 4
#define SG_MPI_LARGE 1
#else
#define SG_MPI_LARGE 0
#endif

static inline int sg_comm_fits_int(int64_t c) { return c >= 0 && c <= INT_MAX; }

#if SG_MPI_LARGE
#define SG_MPI_LARGE_CALL(fn, call) SG_MPI(call)
#else
#define SG_MPI_LARGE_CALL(fn, call)                  \
  SG_RAISE(SG_ERR_NOT_SUPPORTED,                     \
           "%s: counts above INT_MAX need an MPI-4 " \
           "library (this one is MPI %d.%d)",        \
           fn, MPI_VERSION, MPI_SUBVERSION)
#endif

/* Allocations a call (or a request) owns until it completes. */
typedef struct sg_comm_keep {
  void *p[8];
  int n;
} sg_comm_keep;

/* A deterministic reduction in flight. Blocks: rank b owns counts[b]
 * elements at offset displs[b] of the full vector. */
typedef struct sg_comm_det_op {
  sg_group_t g;
  sg_dtype dt;
  sg_reduce_op op;
  MPI_Datatype t;
  int allreduce; /* 1: then all-gather the blocks into recv */
  void *recv;
  void *out;     /* where this rank's reduced block goes */
  void *scratch; /* p blocks of counts[me] elements, rank order */
  int64_t *counts, *displs, *sc, *sd, *rc, *rd;
} sg_comm_det_op;

/* ---- comm_mpi.c -------------------------------------------------------------*/

void sg_comm_keep_free(sg_comm_keep *k);

/* Check n counts and displacements (displs[r], or the packed offset when
 * displs is NULL); *all_fit = 0 when one does not fit in int. */
sg_status sg_comm_counts_check(const char *fn, const char *what, int n,
                               const int64_t *counts, const int64_t *displs,
                               int *all_fit);

/* The MPI calls, blocking when req is NULL; allocations the call needs
 * until it completes go to k. */
sg_status sg_comm_mpi_allreduce(sg_group_t g, const void *send, void *recv,
                                int64_t count, MPI_Datatype t, MPI_Op op,
                                MPI_Request *req);
sg_status sg_comm_mpi_allgatherv(sg_group_t g, const void *send,
                                 int64_t sendcount, void *recv,
                                 const int64_t *counts, const int64_t *displs,
                                 MPI_Datatype t, sg_comm_keep *k,
                                 MPI_Request *req);
sg_status sg_comm_mpi_alltoallv(sg_group_t g, const void *send,
                                const int64_t *sc, const int64_t *sd,
                                void *recv, const int64_t *rc,
                                const int64_t *rd, MPI_Datatype t,
                                sg_comm_keep *k, MPI_Request *req);
sg_status sg_comm_mpi_reduce_scatter(sg_group_t g, const void *send, void *recv,
                                     const int64_t *counts, MPI_Datatype t,
                                     MPI_Op op, sg_comm_keep *k,
                                     MPI_Request *req);

/* Deterministic reductions: plan and start (or run, when req is NULL) the
 * all-to-all-v phase; after it, reduce the own block and start (or run)
 * the all-gather-v of an all-reduce (*more = 1 if it was started); free.
 * det_run does all of it, blocking. */
void sg_comm_det_free(sg_comm_det_op *d);
sg_status sg_comm_det_start(sg_group_t g, const void *send, void *recv,
                            int64_t count, const int64_t *blocks, sg_dtype dt,
                            sg_reduce_op op, MPI_Datatype t, sg_comm_keep *k,
                            sg_comm_det_op **out, MPI_Request *req);
sg_status sg_comm_det_finish(sg_comm_det_op *d, sg_comm_keep *k,
                             MPI_Request *req, int *more);
sg_status sg_comm_det_run(sg_group_t g, const void *send, void *recv,
                          int64_t count, const int64_t *blocks, sg_dtype dt,
                          sg_reduce_op op, MPI_Datatype t);

#endif /* SG_COMM_IMPL_H */
