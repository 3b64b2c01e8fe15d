/* sg-plan-calibrate: measure this machine into an sg-plan hardware file.
 *
 *   mpiexec -n 2 sg-plan-calibrate [--out this-machine] [--quick]
 *                                  [--cpu-time] [--name "..."]
 *
 * --cpu-time times the kernels in thread CPU time: on a machine shared
 * with other jobs, the rates of a core of one's own.
 *
 * Run it with as many ranks per node as the runs will use (one thread per
 * rank, OMP_NUM_THREADS=1, as sg-train runs): each compute rate is
 * measured on rank 0 alone (the single-stream rate) and on every rank at
 * once (the *_shared keys: a busy node's rate per rank). With 2 or more ranks it also measures
 * all-reduce by message size and group size (groups of the first g ranks)
 * and appends them to the file as comments, next to what the fitted
 * alpha + beta n predicts. */
#include "sg_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double allreduce_time(MPI_Comm comm, float *buf, int n, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(comm);
    const double t0 = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, comm);
    double t = MPI_Wtime() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
    if (t < best) best = t;
  }
  return best;
}

/* "# allreduce p=G bytes=B measured=T model=M" lines, groups of 2..size. */
static void group_table(FILE *f, const sg_plan_hw *hw, int quick) {
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int maxn = (quick ? 1 : 4) << 20; /* floats */
  float *buf = calloc((size_t)maxn, sizeof *buf);
  for (int g = 2; g <= size && buf; ++g) {
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, rank < g ? 0 : MPI_UNDEFINED, rank, &sub);
    for (int n = 2; n <= maxn; n *= 16) {
      if (sub == MPI_COMM_NULL) continue;
      const double t = allreduce_time(sub, buf, n, n < 65536 ? 20 : 5);
      const double m = sg_plan_allreduce_s(g, 4.0 * n, hw->alpha_intra,
                                           hw->beta_intra);
      if (rank == 0 && f)
        fprintf(f, "# allreduce p=%d bytes=%d measured=%.3g s model=%.3g s\n",
                g, 4 * n, t, m);
    }
    if (sub != MPI_COMM_NULL) MPI_Comm_free(&sub);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  free(buf);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, quick = 0;
  unsigned flags = 0;
  const char *out = "this-machine", *name = NULL;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--quick"))
      quick = 1, flags |= SG_PLAN_CAL_QUICK;
    else if (!strcmp(argv[i], "--cpu-time"))
      flags |= SG_PLAN_CAL_CPU_TIME;
    else if (!strcmp(argv[i], "--out") && i + 1 < argc)
      out = argv[++i];
    else if (!strcmp(argv[i], "--name") && i + 1 < argc)
      name = argv[++i];
    else {
      if (rank == 0)
        fprintf(stderr,
                "usage: sg-plan-calibrate [--out FILE] [--quick] [--cpu-time] "
                "[--name S]\n");
      MPI_Finalize();
      return 2;
    }
  }
  sg_plan_hw hw;
  sg_status st = sg_plan_calibrate(MPI_COMM_WORLD, flags, &hw);
  if (st == SG_OK && name) snprintf(hw.name, sizeof hw.name, "%s", name);
  if (st == SG_OK && rank == 0) st = sg_plan_hw_save(out, &hw);
  MPI_Bcast(&st, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (st != SG_OK) sg_die("sg-plan-calibrate", st, 1);
  FILE *f = rank == 0 ? fopen(out, "a") : NULL;
  group_table(f, &hw, quick);
  if (f) fclose(f);
  if (rank == 0)
    printf("%s: gemm %.3g flop/s, conv %.3g, fft %.3g, memory %.3g B/s, "
           "alpha %.3g s, bandwidth %.3g B/s\n",
           out, hw.gemm_flops, hw.conv_flops, hw.fft_flops, hw.mem_bw,
           hw.alpha_intra, 1.0 / hw.beta_intra);
  if (rank == 0 && hw.shared_ranks > 1)
    printf("%s: %d ranks at once, per rank: gemm %.3g flop/s, conv %.3g, "
           "fft %.3g, memory %.3g B/s\n",
           out, hw.shared_ranks, hw.shared.gemm_flops, hw.shared.conv_flops,
           hw.shared.fft_flops, hw.shared.mem_bw);
  MPI_Finalize();
  return 0;
}
