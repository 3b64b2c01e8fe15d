/* sg-bench-halo-pingpong — one-way MPI ping-pong time of 64 KiB - 4 MiB
 * with the send buffer unchanged between round trips (as the ping-pong and
 * raw-MPI references of sg-bench-halo) versus rewritten (memset) before
 * every send, as a freshly packed halo is. Median and minimum of 201
 * round trips; 2 ranks. Plain text. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  size_t sizes[] = {65536, 262144, 1048576, 4194304};
  for (int si = 0; si < 4; ++si) {
    size_t n = sizes[si];
    char *s = malloc(n), *b = malloc(n);
    memset(s, 1, n);
    for (int mode = 0; mode < 2; ++mode) {
      double t[201];
      for (int it = -5; it < 201; ++it) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (r == 0) {
          if (mode) memset(s, it & 0xff, n);
          MPI_Send(s, (int)n, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
          MPI_Recv(b, (int)n, MPI_BYTE, 1, 0, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
        } else {
          MPI_Recv(b, (int)n, MPI_BYTE, 0, 0, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
          if (mode) memset(s, it & 0xff, n);
          MPI_Send(s, (int)n, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        }
        double t1 = MPI_Wtime();
        if (it >= 0) t[it] = (t1 - t0) / 2;
      }
      /* memset time alone */
      double m0 = MPI_Wtime();
      for (int k = 0; k < 20; ++k) memset(s, k, n);
      double m1 = MPI_Wtime();
      qsort(t, 201, sizeof *t, cmp);
      if (r == 0)
        printf(
            "%zu KiB %s: one-way median %.1f us min %.1f us (memset alone %.1f us, counted in the rewritten case)\n",
            n / 1024, mode ? "rewritten" : "unchanged", t[100] * 1e6,
            t[0] * 1e6, (m1 - m0) / 20 * 1e6);
    }
    free(s);
    free(b);
  }
  MPI_Finalize();
}
