/* shardgrid — the io layer's own agreements and synchronisation, with waits
 * that give the core away.
 *
 * MPICH's blocking collectives busy-poll. When ranks outnumber cores (4
 * ranks on a 2-core node), a rank spinning in a collective holds a core
 * that the peer it waits for needs, until the scheduler preempts it: every
 * collective then costs about a scheduler time slice (20-50 ms measured at
 * 4 ranks on 2 cores). The io layer's own collectives (failure agreement,
 * communicator duplication, barriers) therefore start a non-blocking
 * operation and wait for it with MPI_Test, sched_yield() between tests and
 * short sleeps once the wait is long. When every rank has a core the
 * operation completes within the first few tests, as a blocking one would.
 *
 * SG_IO_WAIT=spin in the environment makes these waits plain MPI_Wait (for
 * A/B measurements). */
#define _GNU_SOURCE
#include "io_impl.h"

#include "sg_comm.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int wait_mode = -1; /* 0 yield (default), 1 spin */

static int spin_waits(void) {
  if (wait_mode < 0) {
    const char *e = getenv("SG_IO_WAIT");
    wait_mode = e && strcmp(e, "spin") == 0;
  }
  return wait_mode;
}

int sg_io_wait(MPI_Request *req, MPI_Status *status) {
  MPI_Status ignored;
  if (!status) status = &ignored;
  if (spin_waits()) return MPI_Wait(req, status);
  long ns = 20000; /* first sleep 20 us, doubling up to 1 ms */
  for (int k = 0;; ++k) {
    int done = 0;
    int rc = MPI_Test(req, &done, status);
    if (rc != MPI_SUCCESS || done) return rc;
    if (k < 64) {
      sched_yield();
    } else {
      struct timespec ts = {0, ns};
      nanosleep(&ts, NULL);
      if (ns < 1000000) ns *= 2;
    }
  }
}

sg_status sg_io_agree_max(MPI_Comm comm, sg_status local, int *vals, int n) {
  int rank = 0, size = 1, buf[9];
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (n > 8) n = 8;
  if (n < 0) n = 0;
  buf[0] = local != SG_OK ? size - rank : 0; /* max: the lowest failing */
  for (int i = 0; i < n; ++i) buf[i + 1] = vals[i];
  if (MPI_Iallreduce(MPI_IN_PLACE, buf, n + 1, MPI_INT, MPI_MAX, comm,
                     &req) != MPI_SUCCESS ||
      sg_io_wait(&req, NULL) != MPI_SUCCESS)
    return sg_error_set(SG_ERR_MPI, __FILE__, __LINE__,
                        "MPI_Iallreduce failed during failure agreement");
  for (int i = 0; i < n; ++i) vals[i] = buf[i + 1];
  if (buf[0] == 0) return SG_OK;
  const int first = size - buf[0];
  struct {
    int status;
    char msg[1024];
  } m;
  memset(&m, 0, sizeof m);
  if (rank == first) {
    m.status = (int)local;
    const char *e = sg_last_error();
    if (e[0])
      snprintf(m.msg, sizeof m.msg, "%s", e);
    else
      snprintf(m.msg, sizeof m.msg, "[rank %d] %s", rank,
               sg_status_string(local));
  }
  if (MPI_Ibcast(&m, (int)sizeof m, MPI_BYTE, first, comm, &req) !=
          MPI_SUCCESS ||
      sg_io_wait(&req, NULL) != MPI_SUCCESS)
    return sg_error_set(SG_ERR_MPI, __FILE__, __LINE__,
                        "MPI_Ibcast failed during failure agreement");
  m.msg[sizeof m.msg - 1] = '\0';
  if (rank != first) {
    char b[1100];
    snprintf(b, sizeof b, "[rank %d] peer failed: %s", rank, m.msg);
    sg_error_set_raw(b);
  }
  return m.status > SG_OK && m.status < SG_STATUS_COUNT ? (sg_status)m.status
                                                       : SG_ERR_PEER;
}

sg_status sg_io_agree(MPI_Comm comm, sg_status local) {
  return sg_io_agree_max(comm, local, NULL, 0);
}

sg_status sg_io_allreduce_i64_max(MPI_Comm comm, int64_t *vals, int n) {
  return sg_io_allreduce(comm, vals, n, MPI_INT64_T, MPI_MAX);
}

sg_status sg_io_allreduce(MPI_Comm comm, void *buf, int n, MPI_Datatype type,
                          MPI_Op op) {
  MPI_Request req = MPI_REQUEST_NULL;
  if (MPI_Iallreduce(MPI_IN_PLACE, buf, n, type, op, comm, &req) !=
          MPI_SUCCESS ||
      sg_io_wait(&req, NULL) != MPI_SUCCESS)
    return sg_error_set(SG_ERR_MPI, __FILE__, __LINE__,
                        "MPI_Iallreduce failed");
  return SG_OK;
}

sg_status sg_io_barrier(MPI_Comm comm) {
  MPI_Request req = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(comm, &req) != MPI_SUCCESS ||
      sg_io_wait(&req, NULL) != MPI_SUCCESS)
    return sg_error_set(SG_ERR_MPI, __FILE__, __LINE__, "MPI_Ibarrier failed");
  return SG_OK;
}

sg_status sg_io_comm_dup(MPI_Comm comm, MPI_Comm *out) {
  MPI_Request req = MPI_REQUEST_NULL;
  *out = MPI_COMM_NULL;
  if (MPI_Comm_idup(comm, out, &req) != MPI_SUCCESS ||
      sg_io_wait(&req, NULL) != MPI_SUCCESS) {
    *out = MPI_COMM_NULL;
    return sg_error_set(SG_ERR_MPI, __FILE__, __LINE__, "MPI_Comm_idup failed");
  }
  return SG_OK;
}
