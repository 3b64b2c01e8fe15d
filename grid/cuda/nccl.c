/* shardgrid — NCCL communicators for mesh groups and the collectives on
 * CUDA device buffers (compiled only with the CUDA backend).
 *
 * One ncclComm per group, made at sg_mesh_enable_nccl: group rank 0 gets a
 * unique id, broadcasts it over the group's MPI communicator, and every
 * member calls ncclCommInitRank with its group rank. Groups are visited in
 * the same order (by dim mask) on every rank, so the blocking inits never
 * cross. The calls below run on the default stream and synchronise it
 * before returning, so the non-blocking API completes them at once.
 * Moves are byte copies (any dtype, bf16 included); variable-count
 * collectives are NCCL groups of broadcasts, reduces or send/recv pairs. */
#include "mesh_impl.h"
#include "sg_comm.h"
#include "sg_device.h"
#include "sg_threads.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SG_NCCL_STREAM ((cudaStream_t)0)

static ncclComm_t comm_of(struct sg_group *g) { return (ncclComm_t)g->nccl; }

int sg_nccl_is_device(const void *p) {
  if (!p) return 0;
  struct cudaPointerAttributes a;
  memset(&a, 0, sizeof a);
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError(); /* clear the sticky-free error state */
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static sg_status nccl_type(sg_dtype dt, ncclDataType_t *t) {
  switch (dt) {
  case SG_DTYPE_F32: *t = ncclFloat32; return SG_OK;
  case SG_DTYPE_F64: *t = ncclFloat64; return SG_OK;
  case SG_DTYPE_I32: *t = ncclInt32; return SG_OK;
  case SG_DTYPE_I64: *t = ncclInt64; return SG_OK;
  default:
    return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                        "NCCL reductions on %s are not supported",
                        sg_dtype_name(dt));
  }
}

static ncclRedOp_t nccl_op(sg_reduce_op op) {
  return op == SG_REDUCE_MAX   ? ncclMax
         : op == SG_REDUCE_MIN ? ncclMin
                               : ncclSum;
}

static sg_status sync_stream(void) {
  sg_status st = SG_OK;
  SG_CUDA(cudaStreamSynchronize(SG_NCCL_STREAM));
fail:
  return st;
}

/* Close an NCCL group whose calls stopped at the first failure rc
 * (ncclSuccess: none failed), report that failure or the group's own, and
 * wait for the stream. */
static sg_status group_end(ncclResult_t rc) {
  sg_status st = SG_OK;
  if (rc != ncclSuccess) {
    ncclGroupEnd();
    SG_NCCL(rc);
  }
  SG_NCCL(ncclGroupEnd());
  SG_TRY(sync_stream());
fail:
  return st;
}

sg_status sg_nccl_group_free(struct sg_group *g) {
  sg_status st = SG_OK;
  if (g && g->nccl) {
    ncclResult_t rc = ncclCommDestroy(comm_of(g));
    g->nccl = NULL;
    if (rc != ncclSuccess)
      st = sg_error_nccl((int)rc, "ncclCommDestroy", __FILE__, __LINE__);
  }
  return st;
}

static sg_status group_init(struct sg_group *g) {
  sg_status st = SG_OK;
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  sg_status local = SG_OK;
  if (g->rank == 0) {
    ncclResult_t rc = ncclGetUniqueId(&id);
    if (rc != ncclSuccess)
      local = sg_error_nccl((int)rc, "ncclGetUniqueId", __FILE__, __LINE__);
  }
  SG_TRY(sg_agree(g->comm, local));
  SG_MPI(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, g->comm));
  ncclComm_t c = NULL;
  SG_NCCL(ncclCommInitRank(&c, g->size, id, g->rank));
  g->nccl = c;
fail:
  return st;
}

int sg_nccl_version(void) {
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}

sg_status sg_nccl_mesh_enable(sg_mesh_t m) {
  sg_status st = SG_OK;
  if (m->nccl_enabled) return SG_OK;
  int ndev = 0;
  sg_status local = sg_device_count(SG_DEVICE_CUDA, &ndev);
  if (local == SG_OK && ndev == 0)
    local = sg_error_set(SG_ERR_NO_DEVICE, __FILE__, __LINE__,
                         "sg_mesh_enable_nccl: no usable CUDA device");
  SG_TRY(sg_agree(m->comm, local));
  /* one rank per GPU: the device of the node-local rank is the current
   * one for the communicators (and the caller's later CUDA calls) */
  int dev = -1;
  local = sg_cuda_device_local(m->comm, &dev);
  if (local == SG_OK && dev >= 0 && cudaSetDevice(dev) != cudaSuccess)
    local = sg_error_set(SG_ERR_NO_DEVICE, __FILE__, __LINE__,
                         "sg_mesh_enable_nccl: cudaSetDevice(%d) failed", dev);
  SG_TRY(sg_agree(m->comm, local));
  for (unsigned mask = 0; mask < (1u << m->ndims); ++mask) {
    struct sg_group *g = m->groups[mask];
    if (!g) continue;
    /* a failed init on any rank stops every rank before the next group */
    SG_TRY(sg_agree(m->comm, group_init(g)));
  }
  m->nccl_enabled = 1;
  return SG_OK;
fail:
  for (unsigned mask = 0; mask < (1u << m->ndims); ++mask)
    sg_nccl_group_free(m->groups[mask]);
  return st;
}

sg_status sg_nccl_allreduce(struct sg_group *g, const void *send, void *recv,
                            int64_t count, sg_dtype dt, sg_reduce_op op) {
  sg_status st = SG_OK;
  ncclDataType_t t = ncclFloat32;
  SG_TRY(nccl_type(dt, &t));
  SG_NCCL(ncclAllReduce(send, recv, (size_t)count, t, nccl_op(op), comm_of(g),
                        SG_NCCL_STREAM));
  SG_TRY(sync_stream());
fail:
  return st;
}

sg_status sg_nccl_bcast(struct sg_group *g, void *buf, int64_t count,
                        sg_dtype dt, int root) {
  sg_status st = SG_OK;
  size_t bytes = (size_t)count * sg_dtype_size(dt);
  SG_NCCL(ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_of(g),
                        SG_NCCL_STREAM));
  SG_TRY(sync_stream());
fail:
  return st;
}

sg_status sg_nccl_allgather(struct sg_group *g, const void *send, int64_t count,
                            void *recv, sg_dtype dt) {
  sg_status st = SG_OK;
  size_t bytes = (size_t)count * sg_dtype_size(dt);
  SG_NCCL(
      ncclAllGather(send, recv, bytes, ncclUint8, comm_of(g), SG_NCCL_STREAM));
  SG_TRY(sync_stream());
fail:
  return st;
}

sg_status sg_nccl_allgatherv(struct sg_group *g, const void *send,
                             int64_t sendcount, void *recv,
                             const int64_t *recvcounts, const int64_t *displs,
                             sg_dtype dt) {
  sg_status st = SG_OK;
  size_t es = sg_dtype_size(dt);
  if (sendcount != recvcounts[g->rank])
    SG_RAISE(SG_ERR_SHAPE,
             "sg_allgatherv: sendcount %lld differs from "
             "recvcounts[%d] = %lld",
             (long long)sendcount, g->rank, (long long)recvcounts[g->rank]);
  SG_NCCL(ncclGroupStart());
  ncclResult_t rc = ncclSuccess;
  int64_t off = 0;
  for (int r = 0; r < g->size && rc == ncclSuccess; ++r) {
    int64_t d = displs ? displs[r] : off;
    char *dst = (char *)recv + (size_t)d * es;
    const void *src = r == g->rank ? send : dst;
    rc = ncclBroadcast(src, dst, (size_t)recvcounts[r] * es, ncclUint8, r,
                       comm_of(g), SG_NCCL_STREAM);
    off += recvcounts[r];
  }
  SG_TRY(group_end(rc));
fail:
  return st;
}

sg_status sg_nccl_reduce_scatter(struct sg_group *g, const void *send,
                                 void *recv, const int64_t *recvcounts,
                                 sg_dtype dt, sg_reduce_op op) {
  sg_status st = SG_OK;
  ncclDataType_t t = ncclFloat32;
  SG_TRY(nccl_type(dt, &t));
  if (send == recv)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "sg_reduce_scatter: in place on device "
                                   "buffers is not supported");
  int even = 1;
  for (int r = 1; r < g->size; ++r) even &= recvcounts[r] == recvcounts[0];
  if (even) {
    SG_NCCL(ncclReduceScatter(send, recv, (size_t)recvcounts[0], t, nccl_op(op),
                              comm_of(g), SG_NCCL_STREAM));
    SG_TRY(sync_stream());
  } else {
    size_t es = sg_dtype_size(dt);
    ncclResult_t rc = ncclSuccess;
    int64_t off = 0;
    SG_NCCL(ncclGroupStart());
    for (int r = 0; r < g->size && rc == ncclSuccess; ++r) {
      rc = ncclReduce((const char *)send + (size_t)off * es, recv,
                      (size_t)recvcounts[r], t, nccl_op(op), r, comm_of(g),
                      SG_NCCL_STREAM);
      off += recvcounts[r];
    }
    SG_TRY(group_end(rc));
  }
fail:
  return st;
}

sg_status sg_nccl_alltoallv(struct sg_group *g, const void *send,
                            const int64_t *sendcounts, const int64_t *sdispls,
                            void *recv, const int64_t *recvcounts,
                            const int64_t *rdispls, sg_dtype dt) {
  sg_status st = SG_OK;
  size_t es = sg_dtype_size(dt);
  if (send == recv)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "sg_alltoallv: in place on device "
                                   "buffers is not supported");
  ncclResult_t rc = ncclSuccess;
  int64_t so = 0, ro = 0;
  SG_NCCL(ncclGroupStart());
  for (int r = 0; r < g->size && rc == ncclSuccess; ++r) {
    int64_t sd = sdispls ? sdispls[r] : so, rd = rdispls ? rdispls[r] : ro;
    rc = ncclSend((const char *)send + (size_t)sd * es,
                  (size_t)sendcounts[r] * es, ncclUint8, r, comm_of(g),
                  SG_NCCL_STREAM);
    if (rc == ncclSuccess)
      rc = ncclRecv((char *)recv + (size_t)rd * es, (size_t)recvcounts[r] * es,
                    ncclUint8, r, comm_of(g), SG_NCCL_STREAM);
    so += sendcounts[r];
    ro += recvcounts[r];
  }
  SG_TRY(group_end(rc));
fail:
  return st;
}

sg_status sg_nccl_alltoall(struct sg_group *g, const void *send, int64_t count,
                           void *recv, sg_dtype dt) {
  sg_status st = SG_OK;
  int64_t *c = malloc((size_t)g->size * sizeof *c);
  if (!c) SG_RAISE(SG_ERR_ALLOC, "out of memory for %d counts", g->size);
  for (int r = 0; r < g->size; ++r) c[r] = count;
  st = sg_nccl_alltoallv(g, send, c, NULL, recv, c, NULL, dt);
  free(c);
fail:
  return st;
}

sg_status sg_nccl_p2p(struct sg_group *g, int is_send, void *buf, int64_t count,
                      sg_dtype dt, int peer) {
  sg_status st = SG_OK;
  size_t bytes = (size_t)count * sg_dtype_size(dt);
  if (is_send)
    SG_NCCL(ncclSend(buf, bytes, ncclUint8, peer, comm_of(g), SG_NCCL_STREAM));
  else
    SG_NCCL(ncclRecv(buf, bytes, ncclUint8, peer, comm_of(g), SG_NCCL_STREAM));
  SG_TRY(sync_stream());
fail:
  return st;
}
