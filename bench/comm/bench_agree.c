/* sg-bench-agree: the cost of sg_agree's waits, spinning (MPI_Wait, as
 * MPICH busy-polls) against yielding (sg_wait_yield's policy), when ranks
 * outnumber cores (issue 20, "sg_agree's waits yield").
 *
 *   mpiexec -n 4 sg-bench-agree [--iters N] [--work-us W] [--reps R]
 *
 * Each rep runs N agreements per mode, each after W microseconds of busy
 * work on rank (i mod size) only (an imbalance: the others wait), and
 * prints one JSON line per mode with the median time per agreement over
 * the reps. The modes alternate within a rep so that load drifts hit both.
 * Collective over MPI_COMM_WORLD. */
#include "sg_comm.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void busy(double us) {
  const double t0 = MPI_Wtime();
  while ((MPI_Wtime() - t0) * 1e6 < us) {}
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1, iters = 2000, reps = 7;
  double work_us = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--iters"))
      iters = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--work-us"))
      work_us = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps"))
      reps = atoi(argv[i + 1]);
  }
  if (iters < 1) iters = 1;
  if (reps < 1 || reps > 64) reps = 7;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  double t[2][64];
  for (int r = 0; r < reps; ++r)
    for (int mode = 0; mode < 2; ++mode) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      for (int i = 0; i < iters; ++i) {
        if (work_us > 0 && i % size == rank) busy(work_us);
        sg_status st = sg_agree_vals(MPI_COMM_WORLD, SG_OK, NULL, 0, mode);
        if (st != SG_OK) sg_die_local("sg-bench-agree", st, 1);
      }
      double dt = (MPI_Wtime() - t0) / iters, worst = 0;
      MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      t[mode][r] = worst;
    }
  if (rank == 0)
    for (int mode = 0; mode < 2; ++mode) {
      qsort(t[mode], (size_t)reps, sizeof(double), cmp_d);
      printf(
          "{\"op\": \"agree\", \"wait\": \"%s\", \"ranks\": %d, \"iters\": %d, \"work_us\": %g, "
          "\"reps\": %d, \"median_us\": %.2f, \"min_us\": %.2f, \"max_us\": %.2f}\n",
          mode ? "yield" : "spin", size, iters, work_us, reps,
          1e6 * t[mode][reps / 2], 1e6 * t[mode][0], 1e6 * t[mode][reps - 1]);
    }
  MPI_Finalize();
  return 0;
}
