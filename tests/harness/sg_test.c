/* shardgrid — a small test harness for MPI tests. */
#include "sg_test.h"

#include "sg_comm.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int64_t sg_test_passed;
int64_t sg_test_failed;
int sg_test_rank;
int sg_test_size = 1;
static int sg_test_skipped;
static char sg_test_skip_reason[256];
static int sg_test_reports;

void sg_test_init(int *argc, char ***argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &sg_test_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &sg_test_size);
  /* errors come back as codes so the library can report them */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

void sg_test_fail_at(const char *file, int line, const char *fmt, ...) {
  ++sg_test_failed;
  if (sg_test_reports++ >= 20) return; /* keep logs readable */
  char msg[1536];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *base = strrchr(file, '/');
  fprintf(stderr, "FAIL [rank %d/%d] %s:%d: %s\n", sg_test_rank, sg_test_size,
          base ? base + 1 : file, line, msg);
  fflush(stderr);
}

void sg_test_skip(const char *reason) {
  sg_test_skipped = 1;
  snprintf(sg_test_skip_reason, sizeof sg_test_skip_reason, "%s", reason);
}

int sg_test_all(MPI_Comm comm, int ok) {
  int all = 0;
  MPI_Request req;
  ok = ok != 0;
  /* a yielding wait: with more ranks than cores a busy-polling all-reduce
   * costs a time slice (tests run up to 4 ranks on 2 cores) */
  if (MPI_Iallreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm, &req) !=
          MPI_SUCCESS ||
      sg_wait_yield(&req, MPI_STATUS_IGNORE) != MPI_SUCCESS)
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm);
  return all;
}

int sg_test_finish(void) {
  int64_t local[2] = {sg_test_passed, sg_test_failed}, total[2] = {0, 0};
  int skipped = 0;
  MPI_Allreduce(local, total, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&sg_test_skipped, &skipped, 1, MPI_INT, MPI_MAX,
                MPI_COMM_WORLD);
  int code = total[1] ? 1 : (skipped ? 77 : 0);
  if (sg_test_rank == 0) {
    if (skipped && !total[1])
      printf("SKIPPED: %s\n",
             sg_test_skip_reason[0] ? sg_test_skip_reason : "(no reason)");
    printf("%lld passed, %lld failed%s (over %d ranks)\n", (long long)total[0],
           (long long)total[1], skipped ? ", 1 skipped" : "", sg_test_size);
    fflush(stdout);
  }
  MPI_Finalize();
  return code;
}

static int64_t sg_test_cmp_impl(const char *what, int64_t n, double rel,
                                double abs_tol,
                                double (*get)(const void *, int64_t),
                                const void *a, const void *b) {
  int64_t bad = 0, first = -1;
  double worst = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    double x = get(a, i), y = get(b, i);
    double d = fabs(x - y);
    int ok = isfinite(x) && isfinite(y) && d <= abs_tol + rel * fabs(y);
    if (!ok) {
      if (first < 0) first = i;
      ++bad;
    }
    if (isfinite(d) && d > worst) worst = d;
  }
  if (bad) {
    sg_test_fail_at(__FILE__, __LINE__,
                    "%s: %lld of %lld differ; first at %lld: %.17g vs %.17g "
                    "(max abs diff %.3g, rel %.1g abs %.1g)",
                    what, (long long)bad, (long long)n, (long long)first,
                    get(a, first), get(b, first), worst, rel, abs_tol);
  } else {
    ++sg_test_passed;
  }
  return bad;
}

static double sg_get_f32(const void *p, int64_t i) {
  return ((const float *)p)[i];
}
static double sg_get_f64(const void *p, int64_t i) {
  return ((const double *)p)[i];
}

int64_t sg_test_cmp_f32(const char *what, const float *a, const float *b,
                        int64_t n, double rel, double abs_tol) {
  return sg_test_cmp_impl(what, n, rel, abs_tol, sg_get_f32, a, b);
}

int64_t sg_test_cmp_f64(const char *what, const double *a, const double *b,
                        int64_t n, double rel, double abs_tol) {
  return sg_test_cmp_impl(what, n, rel, abs_tol, sg_get_f64, a, b);
}

int64_t sg_test_cmp_bytes(const char *what, const void *a, const void *b,
                          size_t n) {
  const unsigned char *x = a, *y = b;
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < n; ++i)
    if (x[i] != y[i]) {
      if (first < 0) first = (int64_t)i;
      ++bad;
    }
  if (bad)
    sg_test_fail_at(__FILE__, __LINE__,
                    "%s: %lld of %zu bytes differ, first at byte %lld", what,
                    (long long)bad, n, (long long)first);
  else
    ++sg_test_passed;
  return bad;
}
