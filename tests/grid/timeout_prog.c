/* A program for the timeout tests (issue 20, defect 11), run under
 * tests/examples/expect_fail.sh: rank 1 does not arrive at a collective and
 * the others must fail within the timeout with a message that names the
 * collective and rank 1, then abort (sg_die), instead of waiting forever.
 *
 *   timeout_prog MODE [SECONDS]     (SECONDS: sg_comm_set_timeout; without
 *                                    it the SG_TIMEOUT environment applies)
 * MODE, what rank 1 does instead of joining the others:
 *   agree  skips an sg_agree and waits in MPI_Barrier on another
 *          communicator (blocking MPI: it cannot answer)
 *   wait   skips an sg_iallreduce + sg_wait on a mesh group (likewise)
 *   block  skips a blocking sg_allreduce (likewise)
 *   halo   skips an sg_halo_exchange along a split dim (SG_HALO_PATH
 *          chooses shared memory or MPI)
 *   fft    skips an sg_fft_forward of a 2-D grid split over all ranks
 *          (shared-memory transpose; SG_FFT_SHM_SYNC=mpi: its barrier is
 *          MPI's; argument 3 "mpi": the MPI_Alltoallv path)
 *   kill   raises SIGKILL before an sg_agree (MPICH's launcher then kills
 *          the others, also under -disable-auto-cleanup with hydra 4.0.2)
 *   stop   raises SIGSTOP before an sg_agree: a rank that stops answering
 *          without dying (a hung or unreachable node); the launcher sees
 *          nothing, only the timeout ends the run
 *   finalize  skips an sg_agree; the others then call MPI_Finalize (as the
 *          drivers' ranks other than 0 do), which must abort
 * Every other rank prints "timeout_prog: rank R: <call> returned <status>
 * after T s: <message>" and calls sg_die, which aborts after a timeout.
 * Exit 0 only if nobody timed out (a failure for these tests). */
#include "sg_comm.h"
#include "sg_fft.h"
#include "sg_halo.h"
#include "sg_mesh.h"

#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char *mode = argc > 1 ? argv[1] : "agree";
  if (argc > 2) sg_comm_set_timeout(atof(argv[2]));
  if (size < 2) {
    if (rank == 0) fprintf(stderr, "timeout_prog: needs 2 or more ranks\n");
    MPI_Finalize();
    return 77;
  }
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  sg_mesh_t mesh = NULL;
  char spec[32];
  snprintf(spec, sizeof spec, "h=%d", size);
  sg_status st = sg_mesh_create(MPI_COMM_WORLD, spec, &mesh);
  if (st != SG_OK) sg_die_local("timeout_prog", st, 2);
  sg_group_t g = NULL;
  st = sg_mesh_group(mesh, 1u, &g);
  if (st != SG_OK) sg_die_local("timeout_prog", st, 2);
  /* the collective objects every rank makes (collective creation) */
  sg_halo_plan_t halo = NULL;
  sg_fft_plan_t fft = NULL;
  void *block = NULL;
  double *fx = NULL, *fy = NULL;
  if (!strcmp(mode, "halo")) {
    sg_halo_desc hd;
    sg_halo_desc_init(&hd);
    hd.interior[0] = 4;
    hd.halo[0][0] = hd.halo[0][1] = 1;
    hd.mesh_dim[0] = 0;
    hd.boundary[0] = SG_BOUNDARY_PERIODIC;
    st = sg_halo_plan_create(mesh, &hd, &halo);
    if (st == SG_OK) st = sg_halo_plan_alloc_block(halo, &block);
    if (st != SG_OK) sg_die_local("timeout_prog", st, 2);
  } else if (!strcmp(mode, "fft")) {
    sg_fft_desc d;
    sg_fft_desc_init(&d);
    d.ndim = 2;
    d.shape[0] = d.shape[1] = 8;
    d.split[0] = 0;
    if (argc > 3 && !strcmp(argv[3], "mpi")) d.flags |= SG_FFT_MPI_ALLTOALL;
    st = sg_fft_plan_create(mesh, &d, &fft);
    if (st != SG_OK) sg_die_local("timeout_prog", st, 2);
    fx = calloc((size_t)sg_fft_plan_local_count(fft, SG_FFT_SPACE_REAL) + 1,
                sizeof *fx);
    fy = calloc((size_t)sg_fft_plan_local_count(fft, SG_FFT_SPACE_SPECTRAL) + 1,
                sizeof *fy);
  }
  const int absent = rank == 1;
  const double t0 = MPI_Wtime();
  const char *call = mode;
  double x = 1.0, y = 0.0;
  if (!strcmp(mode, "kill") && absent) raise(SIGKILL);
  if (!strcmp(mode, "stop") && absent)
    raise(SIGSTOP); /* killed (stopped) by the others' abort */
  if (absent) {
    MPI_Barrier(
        MPI_COMM_WORLD); /* the others never come: killed by their abort */
    st = SG_OK;
  } else if (!strcmp(mode, "agree") || !strcmp(mode, "kill") ||
             !strcmp(mode, "stop") || !strcmp(mode, "finalize")) {
    call = "sg_agree";
    st = sg_agree(dup, SG_OK);
  } else if (!strcmp(mode, "wait")) {
    call = "sg_iallreduce + sg_wait";
    sg_request_t req = NULL;
    st = sg_iallreduce(g, &x, &y, 1, SG_DTYPE_F64, SG_REDUCE_SUM, &req);
    if (st == SG_OK) st = sg_wait(&req);
  } else if (!strcmp(mode, "block")) {
    call = "sg_allreduce";
    st = sg_allreduce(g, &x, &y, 1, SG_DTYPE_F64, SG_REDUCE_SUM);
  } else if (!strcmp(mode, "halo")) {
    call = "sg_halo_exchange";
    st = sg_halo_exchange(halo, block);
  } else if (!strcmp(mode, "fft")) {
    call = "sg_fft_forward";
    st = sg_fft_forward(fft, fx, fy);
  } else {
    fprintf(stderr, "timeout_prog: unknown mode '%s'\n", mode);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  fprintf(stderr, "timeout_prog: rank %d: %s returned %s after %.1f s: %s\n",
          rank, call, sg_status_name(st), MPI_Wtime() - t0, sg_last_error());
  fflush(stderr);
  /* give the launcher time to forward this line before an abort tears the
   * job down (a line was once lost under load) */
  if (st != SG_OK) sleep(1);
  if (st != SG_OK && !strcmp(mode, "finalize")) {
    MPI_Finalize(); /* must not return: aborts after a timeout */
    return 4;
  }
  if (st != SG_OK) sg_die("timeout_prog", st, 3);
  sg_halo_plan_destroy(&halo);
  sg_fft_plan_destroy(&fft);
  free(fx), free(fy);
  sg_mesh_destroy(&mesh);
  MPI_Comm_free(&dup);
  MPI_Finalize();
  return 0;
}
