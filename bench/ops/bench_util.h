/* shardgrid — helpers shared by the op benchmarks: a monotonic clock, the
 * median of timings, reproducible random inputs. */
#ifndef SG_BENCH_UTIL_H
#define SG_BENCH_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* SG_BENCH_CLOCK=cpu: the process's CPU time instead of wall time. On a
 * shared machine a one-thread run is then charged only while it is
 * scheduled (time slices lost to other jobs drop out; their cache pollution
 * does not). Meaningful for one thread only: more threads' times add. */
static inline double now(void) {
  static int cpu = -1;
  if (cpu < 0) {
    const char *e = getenv("SG_BENCH_CLOCK");
    cpu = e && e[0] == 'c';
  }
  struct timespec t;
  clock_gettime(cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Sorts v. */
static inline double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* n uniform values in [-0.5, 0.5), the same every run (malloc'd). */
static inline float *frand(int64_t n) {
  float *p = malloc((size_t)n * sizeof *p);
  uint64_t s = 12345;
  for (int64_t i = 0; p && i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5);
  }
  return p;
}

#endif /* SG_BENCH_UTIL_H */
