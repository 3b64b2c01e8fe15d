/* sg_mpi_yield: a test-harness preload (LD_PRELOAD) that makes a rank
 * waiting on MPI give its core away.
 *
 * CTest runs 3 and 4 ranks on machines with 2 cores (CI's). MPICH's ch4:ucx
 * device waits by calling ucp_worker_progress() in a tight loop; a rank
 * whose peer is not running then spins for its whole time slice before the
 * peer gets the core, and every blocking exchange costs a slice. Measured
 * on the 2-core machine: test_halo at 3 ranks 8.9 s -> 0.27 s, test_spectral
 * at 4 ranks 29.5 s -> 3.6 s (at 2 ranks nothing changes: 0.1 s).
 *
 * This wrapper calls the real ucp_worker_progress() and, after every 64
 * calls in a row that made no progress, sched_yield(): the kernel runs a
 * peer waiting for the core, or returns at once when none is. Nothing else
 * changes: same messages, same order, same results. Where MPI does not use
 * UCX the symbol is never called and the preload does nothing. It is only
 * ever set by CTest (tests/CMakeLists.txt, SG_TEST_MPI_YIELD); the library
 * and the programs never load it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>

typedef unsigned (*sg_ucp_progress_fn)(void *worker);

static sg_ucp_progress_fn real_progress;
static unsigned idle_polls;

unsigned ucp_worker_progress(void *worker);
unsigned ucp_worker_progress(void *worker) {
  if (!real_progress) {
    real_progress = (sg_ucp_progress_fn)dlsym(RTLD_NEXT, "ucp_worker_progress");
    if (!real_progress)
      return 0; /* cannot happen: only UCX's callers call it */
  }
  unsigned n = real_progress(worker);
  if (n) {
    idle_polls = 0;
  } else if (++idle_polls == 64) {
    idle_polls = 0;
    sched_yield();
  }
  return n;
}
