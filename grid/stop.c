/* shardgrid — a clean stop on SIGTERM and SIGINT (see sg_stop.h). */
#include "sg_stop.h"

#include "sg_comm.h"
#include "sg_trace.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const int stop_signals[] = {SIGTERM, SIGINT};
#define NSTOP ((int)(sizeof stop_signals / sizeof stop_signals[0]))

static volatile sig_atomic_t pending; /* the last signal received */
static int agreed;                    /* a signal was agreed on: acted upon */
static int installed;
static struct sigaction saved[NSTOP];

/* Only records: everything else happens at the program's next boundary. */
static void on_signal(int signo) { pending = signo; }

sg_status sg_stop_install(void) {
  if (installed) return SG_OK;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int i = 0; i < NSTOP; ++i)
    if (sigaction(stop_signals[i], &sa, &saved[i]) != 0) {
      for (int k = 0; k < i; ++k) sigaction(stop_signals[k], &saved[k], NULL);
      return sg_error_set(SG_ERR_INTERNAL, __FILE__, __LINE__,
                          "sigaction(%s) failed",
                          sg_stop_signal_name(stop_signals[i]));
    }
  installed = 1;
  return SG_OK;
}

sg_status sg_stop_uninstall(void) {
  if (!installed) return SG_OK;
  for (int i = 0; i < NSTOP; ++i) sigaction(stop_signals[i], &saved[i], NULL);
  installed = 0;
  /* a signal nobody acted upon gets the effect it would have had */
  if (pending && !agreed) raise(pending);
  return SG_OK;
}

int sg_stop_pending(void) { return pending; }

sg_status sg_stop_agree(MPI_Comm comm, sg_status local, int *signo) {
  int v = pending;
  /* yielding waits: ranks may outnumber cores, and one all-reduce per
   * step does not need the lowest latency */
  sg_status st = sg_agree_vals(comm, local, &v, 1, 1);
  if (signo) *signo = st == SG_OK ? v : 0;
  if (st == SG_OK && v) agreed = 1;
  return st;
}

int sg_stop_exit_code(int signo) { return 128 + signo; }

const char *sg_stop_signal_name(int signo) {
  static char buf[32];
  if (signo == SIGTERM) return "SIGTERM";
  if (signo == SIGINT) return "SIGINT";
  snprintf(buf, sizeof buf, "signal %d", signo);
  return buf;
}

/* ---- the time budget ---------------------------------------------------- */

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void sg_budget_start(sg_budget *b, MPI_Comm comm, double limit, int cpu_clock) {
  b->limit = limit, b->cpu = cpu_clock != 0, b->comm = comm;
  b->wall0 = sg_wtime(), b->cpu0 = cpu_seconds();
}

sg_status sg_budget_used(const sg_budget *b, double *wall, double *cpu) {
  sg_status st = SG_OK;
  double mine[2] = {sg_wtime() - b->wall0, cpu_seconds() - b->cpu0}, v[2];
  SG_MPI(MPI_Reduce(&mine[0], &v[0], 1, MPI_DOUBLE, MPI_MAX, 0, b->comm));
  SG_MPI(MPI_Reduce(&mine[1], &v[1], 1, MPI_DOUBLE, MPI_SUM, 0, b->comm));
  SG_MPI(MPI_Bcast(v, 2, MPI_DOUBLE, 0, b->comm));
  *wall = v[0], *cpu = v[1];
fail:
  return st;
}

sg_status sg_budget_spent(const sg_budget *b, int *spent) {
  sg_status st = SG_OK;
  double wall = 0.0, cpu = 0.0;
  *spent = 0;
  if (b->limit <= 0.0) return SG_OK;
  SG_TRY(sg_budget_used(b, &wall, &cpu));
  *spent = (b->cpu ? cpu : wall) >= b->limit;
fail:
  return st;
}
