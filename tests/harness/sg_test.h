/* shardgrid — a small test harness for MPI tests.
 *
 *   int main(int argc, char **argv) {
 *     sg_test_init(&argc, &argv);
 *     SG_CHECK(x == 1, "x is %d", x);
 *     SG_CHECK_OK(sg_something(...));
 *     return sg_test_finish();
 *   }
 *
 * Checks count per rank; sg_test_finish reduces the verdict over all ranks
 * (MPI_Allreduce), prints "N passed, N failed[, N skipped]" on rank 0,
 * finalises MPI and returns the exit code: 0 pass, 1 fail, 77 skip (CTest's
 * SKIP_RETURN_CODE). A check never stops the test, so every rank reaches
 * the final reduction; a test that cannot go on uses SG_REQUIRE, which
 * jumps to the label "done" that each test function provides.
 */
#ifndef SG_TEST_H
#define SG_TEST_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

extern int64_t sg_test_passed;
extern int64_t sg_test_failed;
extern int sg_test_rank;
extern int sg_test_size;

void sg_test_init(int *argc, char ***argv);
int sg_test_finish(void);
/* Mark the whole test as skipped (reason printed on rank 0). Agreed at
 * finish: if any rank skipped and none failed, the test is skipped. */
void sg_test_skip(const char *reason);
void sg_test_fail_at(const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* 1 if every rank of comm passes ok != 0 (collective). */
int sg_test_all(MPI_Comm comm, int ok);

/* Compare arrays; returns the number of mismatches and reports the first.
 * rel/abs tolerances: |a-b| <= abs + rel*|b|. NaN/Inf never pass. */
int64_t sg_test_cmp_f32(const char *what, const float *a, const float *b,
                        int64_t n, double rel, double abs);
int64_t sg_test_cmp_f64(const char *what, const double *a, const double *b,
                        int64_t n, double rel, double abs);
/* Bitwise equality of n bytes. */
int64_t sg_test_cmp_bytes(const char *what, const void *a, const void *b,
                          size_t n);

#define SG_CHECK(cond, ...)                             \
  do {                                                  \
    if (cond)                                           \
      ++sg_test_passed;                                 \
    else                                                \
      sg_test_fail_at(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

#define SG_CHECK_OK(call)                                      \
  do {                                                         \
    sg_status sg_chk_st_ = (call);                             \
    SG_CHECK(sg_chk_st_ == SG_OK, "%s returned %s: %s", #call, \
             sg_status_name(sg_chk_st_), sg_last_error());     \
  } while (0)

#define SG_CHECK_STATUS(call, expected)                                    \
  do {                                                                     \
    sg_status sg_chk_st_ = (call);                                         \
    SG_CHECK(sg_chk_st_ == (expected), "%s returned %s, expected %s (%s)", \
             #call, sg_status_name(sg_chk_st_), sg_status_name(expected),  \
             sg_last_error());                                             \
  } while (0)

/* Like SG_CHECK_OK but jumps to "done" on failure. */
#define SG_REQUIRE_OK(call)                                    \
  do {                                                         \
    sg_status sg_chk_st_ = (call);                             \
    SG_CHECK(sg_chk_st_ == SG_OK, "%s returned %s: %s", #call, \
             sg_status_name(sg_chk_st_), sg_last_error());     \
    if (sg_chk_st_ != SG_OK) goto done;                        \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif /* SG_TEST_H */
