/* shardgrid — the communication layer over mesh groups.
 *
 * Collectives and point-to-point calls on a group, with element counts
 * (int64_t) and shardgrid dtypes. Every function here is collective over its
 * group unless it says otherwise, and returns the same status on every rank
 * for errors all ranks can see (bad counts, dtypes); an MPI failure is
 * reported where it happens.
 *
 * Host buffers go through MPI. When shardgrid is built with CUDA and NCCL
 * and sg_mesh_enable_nccl was called, buffers in CUDA device memory go
 * through NCCL on a communicator that matches the group.
 *
 * In-place: pass send == recv where MPI allows MPI_IN_PLACE: allreduce;
 * allgather(v) with send pointing at the own block inside recv;
 * reduce_scatter (recv holds the whole input, the result is its first
 * recvcounts[rank] elements); alltoall(v) (the data sent is taken from recv
 * with the receive counts and displacements).
 *
 * Counts and displacements are int64_t elements. Those that fit in int use
 * the classic MPI calls; larger ones the MPI-4 large-count (_c) calls, or
 * SG_ERR_NOT_SUPPORTED with an MPI-3 library. Host buffers are handed to
 * MPI as they are (no staging copies).
 *
 * Deterministic mode (sg_comm_set_deterministic(1), or the _det variants):
 * reductions gather every contribution and sum them in group-rank order on
 * every rank, so the result is bitwise the same on every rank and every run,
 * independent of the MPI library's algorithm choice. The vector is split in
 * p balanced blocks: an all-to-all-v gathers block b on rank b, which sums
 * it in rank order, and an all-gather-v spreads the result (traffic of a
 * ring all-reduce, count elements of scratch). reduce_scatter follows the
 * same rule in deterministic mode. A non-blocking deterministic all-reduce
 * advances its second phase inside sg_test/sg_wait.
 */
#ifndef SG_COMM_H
#define SG_COMM_H

#include <mpi.h>
#include <stdint.h>

#include "sg_dtype.h"
#include "sg_mesh.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sg_reduce_op {
  SG_REDUCE_SUM = 0,
  SG_REDUCE_MAX,
  SG_REDUCE_MIN
} sg_reduce_op;

/* The MPI datatype and op of a shardgrid dtype/op. bf16 maps to a 2-byte
 * contiguous type (moves only; reductions on bf16 are not supported).
 * Not collective. */
MPI_Datatype sg_dtype_mpi(sg_dtype dt);
MPI_Op sg_reduce_op_mpi(sg_reduce_op op);

/* Process-wide default for reductions; not collective (set it on all). */
void sg_comm_set_deterministic(int on);
int sg_comm_deterministic(void);

sg_status sg_allreduce(sg_group_t g, const void *send, void *recv,
                       int64_t count, sg_dtype dt, sg_reduce_op op);
/* Always deterministic (fixed order gather-then-sum). */
sg_status sg_allreduce_det(sg_group_t g, const void *send, void *recv,
                           int64_t count, sg_dtype dt, sg_reduce_op op);
sg_status sg_bcast(sg_group_t g, void *buf, int64_t count, sg_dtype dt,
                   int root);
/* Every rank contributes count elements; recv holds size*count. */
sg_status sg_allgather(sg_group_t g, const void *send, int64_t count,
                       void *recv, sg_dtype dt);
/* Rank r contributes recvcounts[r] elements placed at displs[r] (NULL
 * displs: packed in rank order). */
sg_status sg_allgatherv(sg_group_t g, const void *send, int64_t sendcount,
                        void *recv, const int64_t *recvcounts,
                        const int64_t *displs, sg_dtype dt);
/* send holds sum(recvcounts) elements; rank r receives the reduction of
 * block r (blocks packed in rank order) into recv. */
sg_status sg_reduce_scatter(sg_group_t g, const void *send, void *recv,
                            const int64_t *recvcounts, sg_dtype dt,
                            sg_reduce_op op);
/* count elements to every rank. */
sg_status sg_alltoall(sg_group_t g, const void *send, void *recv, int64_t count,
                      sg_dtype dt);
/* NULL displs: packed in rank order. */
sg_status sg_alltoallv(sg_group_t g, const void *send,
                       const int64_t *sendcounts, const int64_t *sdispls,
                       void *recv, const int64_t *recvcounts,
                       const int64_t *rdispls, sg_dtype dt);
/* Point to point; peer is a group rank. Collective only with the peer. */
sg_status sg_send(sg_group_t g, const void *buf, int64_t count, sg_dtype dt,
                  int dest, int tag);
sg_status sg_recv(sg_group_t g, void *buf, int64_t count, sg_dtype dt, int src,
                  int tag);

/* Non-blocking variants. A request must be completed with sg_wait (or
 * sg_waitall) which frees it; buffers must stay valid until then. */
typedef struct sg_request *sg_request_t;
sg_status sg_iallreduce(sg_group_t g, const void *send, void *recv,
                        int64_t count, sg_dtype dt, sg_reduce_op op,
                        sg_request_t *req);
sg_status sg_iallgatherv(sg_group_t g, const void *send, int64_t sendcount,
                         void *recv, const int64_t *recvcounts,
                         const int64_t *displs, sg_dtype dt, sg_request_t *req);
sg_status sg_ireduce_scatter(sg_group_t g, const void *send, void *recv,
                             const int64_t *recvcounts, sg_dtype dt,
                             sg_reduce_op op, sg_request_t *req);
sg_status sg_ialltoallv(sg_group_t g, const void *send,
                        const int64_t *sendcounts, const int64_t *sdispls,
                        void *recv, const int64_t *recvcounts,
                        const int64_t *rdispls, sg_dtype dt, sg_request_t *req);
sg_status sg_ibcast(sg_group_t g, void *buf, int64_t count, sg_dtype dt,
                    int root, sg_request_t *req);
sg_status sg_isend(sg_group_t g, const void *buf, int64_t count, sg_dtype dt,
                   int dest, int tag, sg_request_t *req);
sg_status sg_irecv(sg_group_t g, void *buf, int64_t count, sg_dtype dt, int src,
                   int tag, sg_request_t *req);
/* Complete and free; NULL requests are fine. Not collective. With a
 * timeout (sg_comm_set_timeout) it may return SG_ERR_TIMEOUT: *req is then
 * set to NULL but the operation stays pending (its buffers must stay
 * valid: abort the run); sg_waitall abandons the remaining requests alike. */
sg_status sg_wait(sg_request_t *req);
sg_status sg_waitall(int n, sg_request_t *reqs);
/* *done = 1 if complete (the request is then freed and set to NULL). */
sg_status sg_test(sg_request_t *req, int *done);

/* Failure agreement. Every rank of comm passes its local status; all return
 * the same status: SG_OK if every rank succeeded, else the status of the
 * lowest failing rank, whose error message is copied to every rank's
 * sg_last_error() (prefixed by that rank's own "[rank R]"). A rank that
 * succeeded locally but learns of a peer's failure thus reports the peer's
 * error instead of waiting in a later collective. Collective over comm.
 * Its waits yield the core (sg_wait_yield) when this node's ranks
 * outnumber its cores (the launcher's local rank count), else spin
 * (SG_AGREE_WAIT=spin|yield forces one); with a timeout set it returns
 * SG_ERR_TIMEOUT naming the ranks of comm that did not arrive. */
sg_status sg_agree(MPI_Comm comm, sg_status local);
sg_status sg_group_agree(sg_group_t g, sg_status local);

/* The same agreement, and the element-wise maximum over the ranks of n
 * (<= SG_AGREE_MAX_VALS) ints in vals, in the same one all-reduce. With
 * yield, the waits give the core away (sg_wait_yield): for code whose
 * ranks may outnumber the cores (the io layer). Collective over comm. */
#define SG_AGREE_MAX_VALS 8
sg_status sg_agree_vals(MPI_Comm comm, sg_status local, int *vals, int n,
                        int yield);

/* Wait for a request by MPI_Test with sched_yield() between tests and, once
 * the wait is long, sleeps of 20 us doubling to 1 ms. MPICH's blocking
 * waits busy-poll: when ranks outnumber cores, a spinning rank holds the
 * core its peer needs until the scheduler preempts it (a time slice per
 * collective). With a core per rank it returns within the first tests.
 * Returns the MPI error code; with a timeout set (below) and passed, it
 * records SG_ERR_TIMEOUT (sg_error_timeout) and returns MPI_ERR_OTHER.
 * Not collective. */
int sg_wait_yield(MPI_Request *req, MPI_Status *status);

/* ---- timeouts --------------------------------------------------------------
 * A rank that dies without the launcher killing its peers (a lost node,
 * MPICH's -disable-auto-cleanup) would leave them waiting forever. With a
 * timeout, every wait of shardgrid (sg_agree, sg_wait and the blocking
 * calls of this header, the halo exchange, the FFT transposes, the io
 * layer's waits) gives up after `seconds` with SG_ERR_TIMEOUT and a message
 * naming the collective and, where it can be known, the ranks that did not
 * arrive (a point-to-point or shared-memory wait knows its peer; a
 * collective on a communicator asks its ranks: those waiting on it answer
 * within a second, the others are listed). MPI cannot cancel a collective:
 * after a timeout the operation stays pending (its buffers must stay
 * valid) and the run must end with MPI_Abort: sg_die does that after a
 * timeout, and MPI_Finalize on a rank that saw one prints the message and
 * aborts (see sg_error_timeout in sg_status.h).
 * Process-wide, not collective (set the same value on every rank); 0 (the
 * default) means no timeout and waits cost what they did. The environment
 * variable SG_TIMEOUT=<seconds> sets the initial value. Set it well above
 * the longest legitimate wait (a slow rank's checkpoint write, a first
 * step's plan creation, a whole checkpoint write: sg_watchdog_begin). */
void sg_comm_set_timeout(double seconds);
double sg_comm_timeout(void);

/* For the library's own wait loops (halo, FFT): a deadline from the
 * current timeout. sg_deadline_passed is cheap (reads the clock every 64
 * calls) and always 0 without a timeout. Not collective. */
typedef struct sg_deadline {
  double limit, t0;
  unsigned polls;
} sg_deadline;
void sg_deadline_start(sg_deadline *d);
int sg_deadline_passed(sg_deadline *d);
/* The error of a passed deadline: with peer >= 0, "waiting for rank peer
 * of comm, which did not arrive"; else the ranks of comm that do not
 * answer (comm may be MPI_COMM_NULL: not known). Returns SG_ERR_TIMEOUT.
 * Not collective (peers that wait on comm answer). */
sg_status sg_timeout_error(const sg_deadline *d, const char *what,
                           MPI_Comm comm, int peer);
/* A watchdog for blocking calls that cannot time out themselves: the MPI-IO
 * collectives inside PnetCDF's create, open, writes and close (a rank lost
 * in a checkpoint write leaves the others there; found by the fault tests).
 * With a timeout set (sg_comm_set_timeout, SG_TIMEOUT), a watchdog thread
 * aborts the job (MPI_Abort) when the calls between sg_watchdog_begin and
 * sg_watchdog_end take longer than the timeout, after printing "WHAT: timed
 * out after N s (SG_TIMEOUT) in a blocking MPI-IO call ...". Calls nest
 * (the outermost deadline counts); without a timeout they cost nothing.
 * Not collective; from the thread that calls MPI. */
void sg_watchdog_begin(const char *what);
void sg_watchdog_end(void);

/* Wait for an MPI request with the timeout (MPI_Wait without one; yield:
 * sg_wait_yield's sleeps); what names the operation in the message, comm
 * (or MPI_COMM_NULL) is asked who did not arrive. On SG_ERR_TIMEOUT the
 * request stays pending. Not collective. */
sg_status sg_wait_timed(MPI_Request *req, MPI_Status *status, int yield,
                        const char *what, MPI_Comm comm);

/* CUDA + NCCL: create NCCL communicators matching every group of the mesh
 * (collective over the mesh). SG_ERR_NOT_SUPPORTED when not built with
 * NCCL; SG_ERR_NO_DEVICE when no GPU is usable. Afterwards, calls whose
 * buffers are CUDA device memory go through NCCL on the default stream and
 * are complete when they return (a non-blocking call then returns a NULL
 * request); deterministic reductions and in-place reduce_scatter/alltoall(v)
 * on device buffers return SG_ERR_NOT_SUPPORTED. */
sg_status sg_mesh_enable_nccl(sg_mesh_t mesh);
/* 1 when g has an NCCL communicator (sg_mesh_enable_nccl), so its calls
 * on CUDA device buffers go through NCCL; else 0 (NULL g too). Not
 * collective. */
int sg_group_nccl(sg_group_t g);
/* The NCCL library's version (ncclGetVersion: e.g. 22703 for 2.27.3) when
 * built with NCCL, else 0 (also 0 if the library does not answer). Not
 * collective. */
int sg_nccl_version(void);

/* Whether the MPI library can take CUDA device buffers: 1 yes, 0 no, -1
 * unknown (MPIX_Query_cuda_support of MPICH >= 4 and of Open MPI built
 * with its CUDA extension; other MPIs cannot say). Not collective. */
int sg_mpi_cuda_aware(void);

#ifdef __cplusplus
}
#endif
#endif /* SG_COMM_H */
