/* shardgrid — the io layer's own agreements and synchronisation, with waits
 * that give the core away.
 *
 * MPICH's blocking collectives busy-poll. When ranks outnumber cores (4
 * ranks on a 2-core node), a rank spinning in a collective holds a core
 * that the peer it waits for needs, until the scheduler preempts it: every
 * collective then costs about a scheduler time slice (20-50 ms measured at
 * 4 ranks on 2 cores). The io layer's own collectives (failure agreement,
 * communicator duplication, barriers) therefore start a non-blocking
 * operation and wait for it with sg_wait_yield (grid: MPI_Test,
 * sched_yield() between tests and short sleeps once the wait is long); the
 * failure agreement is grid's sg_agree_vals with yielding waits. When every
 * rank has a core the operation completes within the first few tests, as a
 * blocking one would.
 *
 * SG_IO_WAIT=spin in the environment makes these waits plain MPI_Wait (for
 * A/B measurements). */
#define _GNU_SOURCE
#include "io_impl.h"

#include "sg_comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int wait_mode = -1; /* 0 yield (default), 1 spin */

static int spin_waits(void) {
  if (wait_mode < 0) {
    const char *e = getenv("SG_IO_WAIT");
    wait_mode = e && strcmp(e, "spin") == 0;
  }
  return wait_mode;
}

/* The failure of an io collective: its timeout (SG_TIMEOUT) when a wait
 * gave up, else the MPI failure. */
static sg_status io_fail(const char *call, int line) {
  if (sg_timed_out())
    return sg_error_set(SG_ERR_TIMEOUT, __FILE__, line, "%s: %s", call,
                        sg_timeout_message());
  return sg_error_set(SG_ERR_MPI, __FILE__, line, "%s failed", call);
}

int sg_io_wait(MPI_Request *req, MPI_Status *status) {
  return spin_waits() ? MPI_Wait(req, status ? status : MPI_STATUS_IGNORE)
                      : sg_wait_yield(req, status);
}

sg_status sg_io_agree_max(MPI_Comm comm, sg_status local, int *vals, int n) {
  return sg_agree_vals(comm, local, vals, n, !spin_waits());
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
    return io_fail("MPI_Iallreduce", __LINE__);
  return SG_OK;
}

sg_status sg_io_barrier(MPI_Comm comm) {
  MPI_Request req = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(comm, &req) != MPI_SUCCESS ||
      sg_io_wait(&req, NULL) != MPI_SUCCESS)
    return io_fail("MPI_Ibarrier", __LINE__);
  return SG_OK;
}

sg_status sg_io_comm_dup(MPI_Comm comm, MPI_Comm *out) {
  MPI_Request req = MPI_REQUEST_NULL;
  *out = MPI_COMM_NULL;
  if (MPI_Comm_idup(comm, out, &req) != MPI_SUCCESS ||
      sg_io_wait(&req, NULL) != MPI_SUCCESS) {
    *out = MPI_COMM_NULL;
    return io_fail("MPI_Comm_idup", __LINE__);
  }
  return SG_OK;
}
