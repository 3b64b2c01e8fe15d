/* The op device table (models/sg_op_device.h) against the op registry
 * (sg_op_registry.h): every op of the registry has exactly one entry,
 * every entry names an op of the registry, and each entry either names
 * both CUDA entry points or is host-only with a reason (never both, never
 * half). The checker is also fed broken tables (a missing op, a
 * duplicate, a reason-less host-only entry, a half CUDA entry) and must
 * reject each. Prints the coverage: n of m ops with CUDA kernels. Runs in
 * every build (release and cuda); needs no GPU. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "sg_op_device.h"
#include "sg_op_registry.h"

#define MAXE 128

static int in_registry(const char *op) {
  return op && sg_ag_op_find(op) != NULL;
}

/* Problems of table e[0..n) (printed when loud); 0 when it is complete. */
static int check(const sg_op_device *e, int n, int loud) {
  int bad = 0;
  for (int i = 0; i < sg_ag_op_count(); ++i) {
    const char *op = sg_ag_op(i)->name;
    int seen = 0;
    for (int j = 0; j < n; ++j) seen += e[j].op && !strcmp(e[j].op, op);
    if (seen != 1) {
      if (loud)
        printf("op '%s' of the registry is %s the device table "
               "(models/op_device.c)\n",
               op, seen ? "listed twice in" : "missing from");
      ++bad;
    }
  }
  for (int j = 0; j < n; ++j) {
    const char *why = NULL;
    int fwd = e[j].cuda_fwd && e[j].cuda_fwd[0];
    int bwd = e[j].cuda_bwd && e[j].cuda_bwd[0];
    int host = e[j].host_only != NULL;
    if (!in_registry(e[j].op))
      why = "is not an op of the registry";
    else if (host && !e[j].host_only[0])
      why = "is host-only without a reason";
    else if (host && (fwd || bwd))
      why = "is both host-only and on cuda";
    else if (!host && !(fwd && bwd))
      why = "needs both CUDA entry points or a host-only reason";
    if (why) {
      if (loud) printf("device table entry '%s' %s\n", e[j].op, why);
      ++bad;
    }
  }
  return bad;
}

/* The broken variants of the real table t[0..n) must each be rejected. */
static int check_rejects(const sg_op_device *t, int n) {
  sg_op_device e[MAXE + 1];
  int fails = 0;
  memcpy(e, t, (size_t)n * sizeof *e);
  if (!check(e + 1, n - 1, 0)) /* the first op missing */
    fails += printf("FAIL: a table without '%s' was accepted\n", t[0].op) > 0;
  e[n] = t[n - 1]; /* the last op twice */
  if (!check(e, n + 1, 0))
    fails += printf("FAIL: a duplicate entry was accepted\n") > 0;
  sg_op_device noreason = {t[0].op, NULL, NULL, ""};
  e[0] = noreason;
  if (!check(e, n, 0))
    fails += printf("FAIL: host-only without a reason was accepted\n") > 0;
  sg_op_device half = {t[0].op, "fwd", NULL, NULL};
  e[0] = half;
  if (!check(e, n, 0))
    fails += printf("FAIL: a CUDA forward without backward was accepted\n") > 0;
  return fails;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  sg_op_device t[MAXE];
  int n = sg_op_device_count(), fails = 0;
  if (n < 1 || n > MAXE) {
    printf("FAIL: %d entries in the device table\n", n);
    fails = 1;
  } else {
    for (int i = 0; i < n; ++i) t[i] = *sg_op_device_at(i);
    fails += check(t, n, rank == 0);
    fails += check_rejects(t, n);
  }
  if (rank == 0 && !fails) {
    int on = 0;
    for (int i = 0; i < n; ++i) on += sg_op_device_on_cuda(&t[i]);
    printf("cuda coverage: %d of %d ops have CUDA forward and backward "
           "kernels:",
           on, sg_ag_op_count());
    for (int i = 0; i < n; ++i)
      if (sg_op_device_on_cuda(&t[i])) printf(" %s", t[i].op);
    printf("\n");
  }
  if (rank == 0) printf("%s\n", fails ? "FAILED" : "PASSED");
  MPI_Finalize();
  return fails ? 1 : 0;
}
