/* shardgrid — the communication layer over mesh groups (host buffers via
 * MPI; device buffers via NCCL when enabled, see cuda/nccl.c).
 *
 * Host buffers are handed to MPI as they are: no staging copies. Counts are
 * int64_t; counts and displacements that fit in int use the classic calls,
 * larger ones the MPI-4 large-count (_c) calls, or SG_ERR_NOT_SUPPORTED on
 * an MPI-3 library.
 *
 * Deterministic reductions: contributions to each element are summed in
 * group-rank order, ((x0 + x1) + x2) + ..., by exactly one rank. The vector
 * is split into p balanced blocks; an all-to-all-v hands block b of every
 * rank to rank b (a gather of that block), rank b sums in rank order, and an
 * all-gather-v spreads the result: bitwise the same on every rank and every
 * run, with the traffic of a ring all-reduce and count extra elements of
 * scratch (instead of p * count for a whole gather). */
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
/* Open MPI's extensions (MPIX_CUDA_AWARE_SUPPORT, sg_mpi_cuda_aware) */
#if defined(OPEN_MPI) && OPEN_MPI && defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif

/* ---- dtypes and ops -------------------------------------------------------*/

static MPI_Datatype sg_bf16_type = MPI_DATATYPE_NULL;
static pthread_once_t sg_bf16_once = PTHREAD_ONCE_INIT;

/* Freed when MPI_COMM_SELF's attributes are deleted, first thing in
 * MPI_Finalize. */
static int bf16_type_free(MPI_Comm comm, int key, void *val, void *extra) {
  (void)comm;
  (void)key;
  (void)val;
  (void)extra;
  if (sg_bf16_type != MPI_DATATYPE_NULL) MPI_Type_free(&sg_bf16_type);
  return MPI_SUCCESS;
}

static void bf16_type_create(void) {
  MPI_Datatype t;
  if (MPI_Type_contiguous(2, MPI_BYTE, &t) != MPI_SUCCESS) return;
  if (MPI_Type_commit(&t) != MPI_SUCCESS) return;
  sg_bf16_type = t;
  int key = MPI_KEYVAL_INVALID;
  if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, bf16_type_free, &key,
                             NULL) == MPI_SUCCESS)
    MPI_Comm_set_attr(MPI_COMM_SELF, key, NULL);
}

MPI_Datatype sg_dtype_mpi(sg_dtype dt) {
  switch (dt) {
  case SG_DTYPE_F32: return MPI_FLOAT;
  case SG_DTYPE_F64: return MPI_DOUBLE;
  case SG_DTYPE_I32: return MPI_INT32_T;
  case SG_DTYPE_I64: return MPI_INT64_T;
  case SG_DTYPE_BF16: {
    int init = 0;
    MPI_Initialized(&init);
    if (!init) return MPI_DATATYPE_NULL;
    pthread_once(&sg_bf16_once, bf16_type_create);
    return sg_bf16_type;
  }
  default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op sg_reduce_op_mpi(sg_reduce_op op) {
  switch (op) {
  case SG_REDUCE_SUM: return MPI_SUM;
  case SG_REDUCE_MAX: return MPI_MAX;
  case SG_REDUCE_MIN: return MPI_MIN;
  default: return MPI_OP_NULL;
  }
}

static atomic_int sg_det_default;

void sg_comm_set_deterministic(int on) {
  atomic_store(&sg_det_default, on != 0);
}
int sg_comm_deterministic(void) { return atomic_load(&sg_det_default); }

/* ---- argument checks ------------------------------------------------------*/

static sg_status check_args(const char *fn, sg_group_t g, sg_dtype dt,
                            MPI_Datatype *t) {
  sg_status st = SG_OK;
  if (!g) SG_RAISE(SG_ERR_INVALID_ARG, "%s: group is NULL", fn);
  if (!sg_dtype_valid(dt))
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: invalid dtype %d", fn, (int)dt);
  *t = sg_dtype_mpi(dt);
  if (*t == MPI_DATATYPE_NULL)
    SG_RAISE(SG_ERR_MPI, "%s: no MPI datatype for %s (is MPI initialised?)", fn,
             sg_dtype_name(dt));
fail:
  return st;
}

static sg_status check_reduce(const char *fn, sg_dtype dt, sg_reduce_op op) {
  sg_status st = SG_OK;
  if (dt == SG_DTYPE_BF16)
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "%s: reductions on bf16 are not "
             "supported (bf16 is a storage type: reduce in f32)",
             fn);
  if (sg_reduce_op_mpi(op) == MPI_OP_NULL)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: invalid reduce op %d", fn, (int)op);
fail:
  return st;
}

static sg_status check_count(const char *fn, int64_t count) {
  if (count < 0)
    return sg_error_set(SG_ERR_SHAPE, __FILE__, __LINE__,
                        "%s: count %lld is negative", fn, (long long)count);
  return SG_OK;
}

static sg_status check_root(const char *fn, sg_group_t g, int root,
                            const char *what) {
  if (root < 0 || root >= g->size)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "%s: %s %d is not a rank of the group (0..%d)", fn,
                        what, root, g->size - 1);
  return SG_OK;
}

/* ---- requests -------------------------------------------------------------*/

struct sg_request {
  MPI_Request mpi;
  const char *fn; /* the call that started it (timeout messages) */
  MPI_Comm comm;  /* its communicator (the timeout's census) */
  sg_comm_keep k;
  sg_comm_det_op *det; /* deterministic reduction: more work after mpi
                         completes */
  int stage; /* det: 1 all-to-all-v in flight, 2 all-gather-v in flight */
};

static sg_status request_new(sg_request_t *req, const char *fn,
                             sg_request_t *out) {
  sg_status st = SG_OK;
  if (!req) SG_RAISE(SG_ERR_INVALID_ARG, "%s: req is NULL", fn);
  *req = NULL;
  sg_request_t r = calloc(1, sizeof *r);
  if (!r) SG_RAISE(SG_ERR_ALLOC, "%s: out of memory for a request", fn);
  r->mpi = MPI_REQUEST_NULL;
  r->fn = fn;
  r->comm = MPI_COMM_NULL;
  *out = r;
fail:
  return st;
}

static void request_free(sg_request_t *req) {
  sg_request_t r = *req;
  if (!r) return;
  sg_comm_keep_free(&r->k);
  sg_comm_det_free(r->det);
  free(r);
  *req = NULL;
}

/* A call that may be non-blocking: with req, a new request *r whose MPI
 * request (*mr) the call starts; without, *mr = NULL and the call blocks.
 * The caller hands *r over with request_done, or frees it on failure. */
static sg_status request_open(const char *fn, sg_group_t g, sg_request_t *req,
                              sg_request_t *r, MPI_Request **mr) {
  *mr = NULL;
  if (!req) return SG_OK;
  sg_status st = request_new(req, fn, r);
  if (st == SG_OK) {
    *mr = &(*r)->mpi;
    (*r)->comm = g->comm;
  }
  return st;
}

/* The call started: the request (if any) is the caller's now. */
static void request_done(sg_request_t *req, sg_request_t *r) {
  if (req) *req = *r;
  *r = NULL;
}

/* The error of a non-blocking entry point called without a request. */
static sg_status request_missing(const char *fn) {
  return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__, "%s: req is NULL",
                      fn);
}

/* Advance a request; block when wait is set (with the timeout). *done = 1
 * when complete. */
static sg_status request_progress(sg_request_t r, int wait, int *done) {
  sg_status st = SG_OK;
  *done = 0;
  for (;;) {
    int flag = 0;
    if (wait) {
      SG_TRY(sg_wait_timed(&r->mpi, NULL, 0, r->fn, r->comm));
      flag = 1;
    } else {
      SG_MPI(MPI_Test(&r->mpi, &flag, MPI_STATUS_IGNORE));
    }
    if (!flag) return SG_OK;
    if (r->det && r->stage == 1) {
      int more = 0;
      r->stage = 2;
      SG_TRY(sg_comm_det_finish(r->det, &r->k, &r->mpi, &more));
      if (more) continue;
    }
    *done = 1;
    return SG_OK;
  }
fail:
  return st;
}

sg_status sg_wait(sg_request_t *req) {
  sg_status st = SG_OK;
  if (!req || !*req) return SG_OK;
  int done = 0;
  st = request_progress(*req, 1, &done);
  if (st == SG_ERR_TIMEOUT)
    *req =
        NULL; /* still pending in MPI: its request and buffers must live on */
  else
    request_free(req);
  return st;
}

sg_status sg_waitall(int n, sg_request_t *reqs) {
  sg_status first = SG_OK;
  if (n > 0 && !reqs)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_waitall: reqs is NULL");
  char msg[1024] = "";
  for (int i = 0; i < n; ++i) {
    if (first == SG_ERR_TIMEOUT) { /* one timed out: abandon the rest */
      reqs[i] = NULL;
      continue;
    }
    sg_status st = sg_wait(&reqs[i]);
    if (st != SG_OK && first == SG_OK) {
      first = st;
      snprintf(msg, sizeof msg, "%s", sg_last_error());
    }
  }
  if (first != SG_OK) sg_error_set_raw(msg);
  return first;
}

sg_status sg_test(sg_request_t *req, int *done) {
  sg_status st = SG_OK;
  if (!done) SG_RAISE(SG_ERR_INVALID_ARG, "sg_test: done is NULL");
  *done = 1;
  if (!req || !*req) return SG_OK;
  *done = 0;
  st = request_progress(*req, 0, done);
  if (st != SG_OK || *done) request_free(req);
fail:
  return st;
}

/* ---- NCCL dispatch --------------------------------------------------------*/

#if SG_HAVE_NCCL
#define SG_ON_DEVICE(g, buf) ((g)->nccl && sg_nccl_is_device(buf))
#else
#define SG_ON_DEVICE(g, buf) 0
#endif

/* ---- collectives ----------------------------------------------------------*/

/* Blocking entry points: with a timeout set (sg_comm_set_timeout) they
 * start the non-blocking call and complete it with sg_wait, which times
 * out; else MPI's blocking call. */
static sg_status wait_started(sg_status st, sg_request_t *r) {
  return st == SG_OK ? sg_wait(r) : st;
}
#define SG_BLOCKING(impl, ...)                                  \
  do {                                                          \
    if (sg_comm_timeout() > 0) {                                \
      sg_request_t blk_r_ = NULL;                               \
      return wait_started(impl(__VA_ARGS__, &blk_r_), &blk_r_); \
    }                                                           \
    return impl(__VA_ARGS__, NULL);                             \
  } while (0)

static sg_status allreduce_impl(const char *fn, sg_group_t g, const void *send,
                                void *recv, int64_t count, sg_dtype dt,
                                sg_reduce_op op, int det, sg_request_t *req) {
  sg_status st = SG_OK;
  MPI_Datatype t;
  sg_request_t r = NULL;
  SG_TRY(check_args(fn, g, dt, &t));
  SG_TRY(check_reduce(fn, dt, op));
  SG_TRY(check_count(fn, count));
  if (req) *req = NULL;
  if (SG_ON_DEVICE(g, recv)) {
#if SG_HAVE_NCCL
    if (det)
      SG_RAISE(SG_ERR_NOT_SUPPORTED,
               "%s: deterministic reductions of device "
               "buffers are not supported (copy to the host)",
               fn);
    SG_TRY(sg_nccl_allreduce(g, send, recv, count, dt, op));
    return SG_OK;
#endif
  }
  if (!req) {
    if (det && g->size > 1)
      return sg_comm_det_run(g, send, recv, count, NULL, dt, op, t);
    if (g->size == 1) {
      if (send != recv && count > 0)
        memcpy(recv, send, (size_t)count * sg_dtype_size(dt));
      return SG_OK;
    }
    return sg_comm_mpi_allreduce(g, send, recv, count, t, sg_reduce_op_mpi(op),
                                 NULL);
  }
  SG_TRY(request_new(req, fn, &r));
  r->comm = g->comm;
  if (det) {
    SG_TRY(sg_comm_det_start(g, send, recv, count, NULL, dt, op, t, &r->k,
                             &r->det, &r->mpi));
    r->stage = 1;
  } else {
    SG_TRY(sg_comm_mpi_allreduce(g, send, recv, count, t, sg_reduce_op_mpi(op),
                                 &r->mpi));
  }
  *req = r;
  return SG_OK;
fail:
  request_free(&r);
  return st;
}

sg_status sg_allreduce(sg_group_t g, const void *send, void *recv,
                       int64_t count, sg_dtype dt, sg_reduce_op op) {
  SG_BLOCKING(allreduce_impl, "sg_allreduce", g, send, recv, count, dt, op,
              sg_comm_deterministic());
}

sg_status sg_allreduce_det(sg_group_t g, const void *send, void *recv,
                           int64_t count, sg_dtype dt, sg_reduce_op op) {
  SG_BLOCKING(allreduce_impl, "sg_allreduce_det", g, send, recv, count, dt, op,
              1);
}

sg_status sg_iallreduce(sg_group_t g, const void *send, void *recv,
                        int64_t count, sg_dtype dt, sg_reduce_op op,
                        sg_request_t *req) {
  if (!req) return request_missing("sg_iallreduce");
  return allreduce_impl("sg_iallreduce", g, send, recv, count, dt, op,
                        sg_comm_deterministic(), req);
}

static sg_status bcast_impl(const char *fn, sg_group_t g, void *buf,
                            int64_t count, sg_dtype dt, int root,
                            sg_request_t *req) {
  sg_status st = SG_OK;
  MPI_Datatype t;
  sg_request_t r = NULL;
  if (req) *req = NULL;
  SG_TRY(check_args(fn, g, dt, &t));
  SG_TRY(check_count(fn, count));
  SG_TRY(check_root(fn, g, root, "root"));
  if (SG_ON_DEVICE(g, buf)) {
#if SG_HAVE_NCCL
    SG_TRY(sg_nccl_bcast(g, buf, count, dt, root));
    return SG_OK;
#endif
  }
  MPI_Request *mr;
  SG_TRY(request_open(fn, g, req, &r, &mr));
  if (sg_comm_fits_int(count)) {
    if (mr)
      SG_MPI(MPI_Ibcast(buf, (int)count, t, root, g->comm, mr));
    else
      SG_MPI(MPI_Bcast(buf, (int)count, t, root, g->comm));
  } else if (mr) {
    SG_MPI_LARGE_CALL(fn, MPI_Ibcast_c(buf, (MPI_Count)count, t, root, g->comm,
                                       mr));
  } else {
    SG_MPI_LARGE_CALL(fn, MPI_Bcast_c(buf, (MPI_Count)count, t, root, g->comm));
  }
  request_done(req, &r);
fail:
  request_free(&r);
  return st;
}

sg_status sg_bcast(sg_group_t g, void *buf, int64_t count, sg_dtype dt,
                   int root) {
  SG_BLOCKING(bcast_impl, "sg_bcast", g, buf, count, dt, root);
}

sg_status sg_ibcast(sg_group_t g, void *buf, int64_t count, sg_dtype dt,
                    int root, sg_request_t *req) {
  if (!req) return request_missing("sg_ibcast");
  return bcast_impl("sg_ibcast", g, buf, count, dt, root, req);
}

sg_status sg_allgather(sg_group_t g, const void *send, int64_t count,
                       void *recv, sg_dtype dt) {
  sg_status st = SG_OK;
  MPI_Datatype t;
  SG_TRY(check_args("sg_allgather", g, dt, &t));
  SG_TRY(check_count("sg_allgather", count));
  if (SG_ON_DEVICE(g, recv)) {
#if SG_HAVE_NCCL
    SG_TRY(sg_nccl_allgather(g, send, count, recv, dt));
    return SG_OK;
#endif
  }
  const void *s = send == (const char *)recv + (size_t)g->rank * (size_t)count *
                                                   sg_dtype_size(dt)
                      ? MPI_IN_PLACE
                      : send;
  if (sg_comm_fits_int(count) && sg_comm_timeout() > 0 && g->size > 1) {
    MPI_Request r = MPI_REQUEST_NULL;
    SG_MPI(MPI_Iallgather(s, (int)count, t, recv, (int)count, t, g->comm, &r));
    SG_TRY(sg_wait_timed(&r, NULL, 0, "sg_allgather", g->comm));
  } else if (sg_comm_fits_int(count))
    SG_MPI(MPI_Allgather(s, (int)count, t, recv, (int)count, t, g->comm));
  else
    SG_MPI_LARGE_CALL("sg_allgather",
                      MPI_Allgather_c(s, (MPI_Count)count, t, recv,
                                      (MPI_Count)count, t, g->comm));
fail:
  return st;
}

static sg_status allgatherv_impl(const char *fn, sg_group_t g, const void *send,
                                 int64_t sendcount, void *recv,
                                 const int64_t *recvcounts,
                                 const int64_t *displs, sg_dtype dt,
                                 sg_request_t *req) {
  sg_status st = SG_OK;
  MPI_Datatype t;
  sg_request_t r = NULL;
  sg_comm_keep k = {{0}, 0};
  if (req) *req = NULL;
  SG_TRY(check_args(fn, g, dt, &t));
  SG_TRY(check_count(fn, sendcount));
  if (!recvcounts) SG_RAISE(SG_ERR_INVALID_ARG, "%s: recvcounts is NULL", fn);
  if (SG_ON_DEVICE(g, recv)) {
#if SG_HAVE_NCCL
    SG_TRY(
        sg_nccl_allgatherv(g, send, sendcount, recv, recvcounts, displs, dt));
    return SG_OK;
#endif
  }
  MPI_Request *mr;
  SG_TRY(request_open(fn, g, req, &r, &mr));
  SG_TRY(sg_comm_mpi_allgatherv(g, send, sendcount, recv, recvcounts, displs, t,
                                r ? &r->k : &k, mr));
  request_done(req, &r);
fail:
  sg_comm_keep_free(&k);
  request_free(&r);
  return st;
}

sg_status sg_allgatherv(sg_group_t g, const void *send, int64_t sendcount,
                        void *recv, const int64_t *recvcounts,
                        const int64_t *displs, sg_dtype dt) {
  SG_BLOCKING(allgatherv_impl, "sg_allgatherv", g, send, sendcount, recv,
              recvcounts, displs, dt);
}

sg_status sg_iallgatherv(sg_group_t g, const void *send, int64_t sendcount,
                         void *recv, const int64_t *recvcounts,
                         const int64_t *displs, sg_dtype dt,
                         sg_request_t *req) {
  if (!req) return request_missing("sg_iallgatherv");
  return allgatherv_impl("sg_iallgatherv", g, send, sendcount, recv, recvcounts,
                         displs, dt, req);
}

static sg_status reduce_scatter_impl(const char *fn, sg_group_t g,
                                     const void *send, void *recv,
                                     const int64_t *recvcounts, sg_dtype dt,
                                     sg_reduce_op op, sg_request_t *req) {
  sg_status st = SG_OK;
  MPI_Datatype t;
  sg_request_t r = NULL;
  sg_comm_keep k = {{0}, 0};
  int det = sg_comm_deterministic();
  if (req) *req = NULL;
  SG_TRY(check_args(fn, g, dt, &t));
  SG_TRY(check_reduce(fn, dt, op));
  int fit = 1;
  SG_TRY(
      sg_comm_counts_check(fn, "recvcounts", g->size, recvcounts, NULL, &fit));
  if (SG_ON_DEVICE(g, recv)) {
#if SG_HAVE_NCCL
    if (det)
      SG_RAISE(SG_ERR_NOT_SUPPORTED,
               "%s: deterministic reductions of device "
               "buffers are not supported (copy to the host)",
               fn);
    SG_TRY(sg_nccl_reduce_scatter(g, send, recv, recvcounts, dt, op));
    return SG_OK;
#endif
  }
  MPI_Request *mr;
  SG_TRY(request_open(fn, g, req, &r, &mr));
  if (det) {
    sg_comm_det_op *d = NULL;
    int more = 0;
    SG_TRY(sg_comm_det_start(g, send, recv, 0, recvcounts, dt, op, t,
                             r ? &r->k : &k, &d, mr));
    if (r) {
      r->det = d;
      r->stage = 1;
    } else {
      st = sg_comm_det_finish(d, &k, NULL, &more);
      sg_comm_det_free(d);
      SG_TRY(st);
    }
  } else {
    SG_TRY(sg_comm_mpi_reduce_scatter(g, send, recv, recvcounts, t,
                                      sg_reduce_op_mpi(op), r ? &r->k : &k,
                                      mr));
  }
  request_done(req, &r);
fail:
  sg_comm_keep_free(&k);
  request_free(&r);
  return st;
}

sg_status sg_reduce_scatter(sg_group_t g, const void *send, void *recv,
                            const int64_t *recvcounts, sg_dtype dt,
                            sg_reduce_op op) {
  SG_BLOCKING(reduce_scatter_impl, "sg_reduce_scatter", g, send, recv,
              recvcounts, dt, op);
}

sg_status sg_ireduce_scatter(sg_group_t g, const void *send, void *recv,
                             const int64_t *recvcounts, sg_dtype dt,
                             sg_reduce_op op, sg_request_t *req) {
  if (!req) return request_missing("sg_ireduce_scatter");
  return reduce_scatter_impl("sg_ireduce_scatter", g, send, recv, recvcounts,
                             dt, op, req);
}

sg_status sg_alltoall(sg_group_t g, const void *send, void *recv, int64_t count,
                      sg_dtype dt) {
  sg_status st = SG_OK;
  MPI_Datatype t;
  SG_TRY(check_args("sg_alltoall", g, dt, &t));
  SG_TRY(check_count("sg_alltoall", count));
  if (SG_ON_DEVICE(g, recv)) {
#if SG_HAVE_NCCL
    SG_TRY(sg_nccl_alltoall(g, send, count, recv, dt));
    return SG_OK;
#endif
  }
  const void *s = send == recv ? MPI_IN_PLACE : send;
  if (sg_comm_fits_int(count) && sg_comm_timeout() > 0 && g->size > 1) {
    MPI_Request r = MPI_REQUEST_NULL;
    SG_MPI(MPI_Ialltoall(s, (int)count, t, recv, (int)count, t, g->comm, &r));
    SG_TRY(sg_wait_timed(&r, NULL, 0, "sg_alltoall", g->comm));
  } else if (sg_comm_fits_int(count))
    SG_MPI(MPI_Alltoall(s, (int)count, t, recv, (int)count, t, g->comm));
  else
    SG_MPI_LARGE_CALL("sg_alltoall",
                      MPI_Alltoall_c(s, (MPI_Count)count, t, recv,
                                     (MPI_Count)count, t, g->comm));
fail:
  return st;
}

static sg_status alltoallv_impl(const char *fn, sg_group_t g, const void *send,
                                const int64_t *sendcounts,
                                const int64_t *sdispls, void *recv,
                                const int64_t *recvcounts,
                                const int64_t *rdispls, sg_dtype dt,
                                sg_request_t *req) {
  sg_status st = SG_OK;
  MPI_Datatype t;
  sg_request_t r = NULL;
  sg_comm_keep k = {{0}, 0};
  if (req) *req = NULL;
  SG_TRY(check_args(fn, g, dt, &t));
  if (SG_ON_DEVICE(g, recv)) {
#if SG_HAVE_NCCL
    SG_TRY(sg_nccl_alltoallv(g, send, sendcounts, sdispls, recv, recvcounts,
                             rdispls, dt));
    return SG_OK;
#endif
  }
  MPI_Request *mr;
  SG_TRY(request_open(fn, g, req, &r, &mr));
  SG_TRY(sg_comm_mpi_alltoallv(g, send, sendcounts, sdispls, recv, recvcounts,
                               rdispls, t, r ? &r->k : &k, mr));
  request_done(req, &r);
fail:
  sg_comm_keep_free(&k);
  request_free(&r);
  return st;
}

sg_status sg_alltoallv(sg_group_t g, const void *send,
                       const int64_t *sendcounts, const int64_t *sdispls,
                       void *recv, const int64_t *recvcounts,
                       const int64_t *rdispls, sg_dtype dt) {
  SG_BLOCKING(alltoallv_impl, "sg_alltoallv", g, send, sendcounts, sdispls,
              recv, recvcounts, rdispls, dt);
}

sg_status sg_ialltoallv(sg_group_t g, const void *send,
                        const int64_t *sendcounts, const int64_t *sdispls,
                        void *recv, const int64_t *recvcounts,
                        const int64_t *rdispls, sg_dtype dt,
                        sg_request_t *req) {
  if (!req) return request_missing("sg_ialltoallv");
  return alltoallv_impl("sg_ialltoallv", g, send, sendcounts, sdispls, recv,
                        recvcounts, rdispls, dt, req);
}

/* ---- point to point -------------------------------------------------------*/

static sg_status p2p_impl(const char *fn, int is_send, sg_group_t g, void *buf,
                          int64_t count, sg_dtype dt, int peer, int tag,
                          sg_request_t *req) {
  sg_status st = SG_OK;
  MPI_Datatype t;
  sg_request_t r = NULL;
  if (req) *req = NULL;
  SG_TRY(check_args(fn, g, dt, &t));
  SG_TRY(check_count(fn, count));
  if (peer != MPI_PROC_NULL && !(is_send == 0 && peer == MPI_ANY_SOURCE))
    SG_TRY(check_root(fn, g, peer, is_send ? "dest" : "src"));
  if (tag < 0 && !(is_send == 0 && tag == MPI_ANY_TAG))
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: tag %d is negative", fn, tag);
  if (SG_ON_DEVICE(g, buf) && peer != MPI_PROC_NULL) {
#if SG_HAVE_NCCL
    SG_TRY(sg_nccl_p2p(g, is_send, buf, count, dt, peer));
    return SG_OK;
#endif
  }
  MPI_Request *mr;
  SG_TRY(request_open(fn, g, req, &r, &mr));
  if (sg_comm_fits_int(count)) {
    int c = (int)count;
    if (is_send && mr)
      SG_MPI(MPI_Isend(buf, c, t, peer, tag, g->comm, mr));
    else if (is_send)
      SG_MPI(MPI_Send(buf, c, t, peer, tag, g->comm));
    else if (mr)
      SG_MPI(MPI_Irecv(buf, c, t, peer, tag, g->comm, mr));
    else
      SG_MPI(MPI_Recv(buf, c, t, peer, tag, g->comm, MPI_STATUS_IGNORE));
  } else {
    MPI_Count c = (MPI_Count)count;
    (void)c;
    if (is_send && mr)
      SG_MPI_LARGE_CALL(fn, MPI_Isend_c(buf, c, t, peer, tag, g->comm, mr));
    else if (is_send)
      SG_MPI_LARGE_CALL(fn, MPI_Send_c(buf, c, t, peer, tag, g->comm));
    else if (mr)
      SG_MPI_LARGE_CALL(fn, MPI_Irecv_c(buf, c, t, peer, tag, g->comm, mr));
    else
      SG_MPI_LARGE_CALL(fn, MPI_Recv_c(buf, c, t, peer, tag, g->comm,
                                       MPI_STATUS_IGNORE));
  }
  request_done(req, &r);
fail:
  request_free(&r);
  return st;
}

sg_status sg_send(sg_group_t g, const void *buf, int64_t count, sg_dtype dt,
                  int dest, int tag) {
  SG_BLOCKING(p2p_impl, "sg_send", 1, g, (void *)buf, count, dt, dest, tag);
}

sg_status sg_recv(sg_group_t g, void *buf, int64_t count, sg_dtype dt, int src,
                  int tag) {
  SG_BLOCKING(p2p_impl, "sg_recv", 0, g, buf, count, dt, src, tag);
}

sg_status sg_isend(sg_group_t g, const void *buf, int64_t count, sg_dtype dt,
                   int dest, int tag, sg_request_t *req) {
  if (!req) return request_missing("sg_isend");
  return p2p_impl("sg_isend", 1, g, (void *)buf, count, dt, dest, tag, req);
}

sg_status sg_irecv(sg_group_t g, void *buf, int64_t count, sg_dtype dt, int src,
                   int tag, sg_request_t *req) {
  if (!req) return request_missing("sg_irecv");
  return p2p_impl("sg_irecv", 0, g, buf, count, dt, src, tag, req);
}

/* ---- NCCL -----------------------------------------------------------------*/

#if !SG_HAVE_NCCL
int sg_nccl_version(void) { return 0; }
#endif

int sg_mpi_cuda_aware(void) {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() ? 1 : 0; /* Open MPI with CUDA */
#elif defined(MPIX_CUDA_AWARE_SUPPORT)
  return 0; /* Open MPI built without CUDA */
#elif defined(MPICH_NUMVERSION) && MPICH_NUMVERSION >= 40000000
  return MPIX_Query_cuda_support() ? 1 : 0;
#else
  return -1;
#endif
}

int sg_group_nccl(sg_group_t g) { return g && g->nccl != NULL; }

sg_status sg_mesh_enable_nccl(sg_mesh_t mesh) {
  sg_status st = SG_OK;
  if (!mesh) SG_RAISE(SG_ERR_INVALID_ARG, "sg_mesh_enable_nccl: mesh is NULL");
#if SG_HAVE_NCCL
  SG_TRY(sg_nccl_mesh_enable(mesh));
#else
  SG_RAISE(SG_ERR_NOT_SUPPORTED,
           "sg_mesh_enable_nccl: shardgrid was built "
           "without CUDA/NCCL (configure with -DSG_ENABLE_CUDA=ON)");
#endif
fail:
  return st;
}
