/* sg_stop: SIGTERM/SIGINT recorded by the handlers, agreed over the ranks
 * (any rank signalled => every rank learns the largest signal), combined
 * with the failure agreement; the exit code; uninstall restores the
 * default disposition. The signals are real (raise), on some ranks only. */
#include "sg_stop.h"
#include "sg_test.h"

#include <signal.h>
#include <string.h>

/* The disposition of signo is the default one. */
static int is_default(int signo) {
  struct sigaction sa;
  return sigaction(signo, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL;
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  const int last = sg_test_size - 1;
  int sig = -1;
  SG_REQUIRE_OK(sg_stop_install());
  SG_REQUIRE_OK(sg_stop_install()); /* idempotent */
  SG_CHECK(!is_default(SIGTERM) && !is_default(SIGINT),
           "handlers not installed");
  SG_CHECK_OK(sg_stop_agree(MPI_COMM_WORLD, SG_OK, &sig));
  SG_CHECK(sig == 0, "no signal sent, agreed %d", sig);

  /* SIGINT on the last rank only: every rank learns it */
  if (sg_test_rank == last) raise(SIGINT);
  SG_CHECK(sg_stop_pending() == (sg_test_rank == last ? SIGINT : 0),
           "pending %d", sg_stop_pending());
  SG_CHECK_OK(sg_stop_agree(MPI_COMM_WORLD, SG_OK, &sig));
  SG_CHECK(sig == SIGINT, "agreed %d, expected SIGINT", sig);
  SG_CHECK(sg_stop_exit_code(sig) == 130, "exit code %d",
           sg_stop_exit_code(sig));
  SG_CHECK(strcmp(sg_stop_signal_name(sig), "SIGINT") == 0, "name %s",
           sg_stop_signal_name(sig));

  /* then SIGTERM on rank 0: the largest signal wins */
  if (sg_test_rank == 0) raise(SIGTERM);
  SG_CHECK_OK(sg_stop_agree(MPI_COMM_WORLD, SG_OK, &sig));
  SG_CHECK(sig == SIGTERM, "agreed %d, expected SIGTERM", sig);
  SG_CHECK(sg_stop_exit_code(sig) == 143, "exit code %d",
           sg_stop_exit_code(sig));

  /* a failure on one rank: every rank fails, no signal reported */
  sg_status local = sg_test_rank == last
                        ? sg_error_set(SG_ERR_IO, __FILE__, __LINE__,
                                       "disk gone on rank %d", last)
                        : SG_OK;
  sg_status st = sg_stop_agree(MPI_COMM_WORLD, local, &sig);
  SG_CHECK(st != SG_OK, "a failed rank was not agreed on");
  SG_CHECK(sig == 0, "signal %d reported with a failure", sig);
  SG_CHECK(strstr(sg_last_error(), "disk gone") != NULL, "message: %s",
           sg_last_error());

  /* agreed signals were acted upon: uninstall only restores the defaults
   * (a pending one would be raised again) */
  SG_CHECK_OK(sg_stop_uninstall());
  SG_CHECK(is_default(SIGTERM) && is_default(SIGINT),
           "default dispositions not restored");
done:
  return sg_test_finish();
}
