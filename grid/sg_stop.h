/* shardgrid — a clean stop on SIGTERM and SIGINT.
 *
 * Batch systems end a run with SIGTERM (scancel, the warning before a time
 * limit), users with SIGINT (Ctrl-C); MPICH's mpiexec (hydra) forwards both
 * to every rank (SIGINT the first time; a second Ctrl-C kills the job).
 * Killed by the default action, a training run loses everything since its
 * last checkpoint. With the handlers installed a signal is only recorded;
 * the program acts at a point where stopping is safe (a step boundary):
 *
 *   sg_stop_install();                       // once, after MPI_Init
 *   for (step = 1; step <= steps; ++step) {
 *     ... the step ...
 *     int sig = 0;
 *     SG_TRY(sg_stop_agree(MPI_COMM_WORLD, SG_OK, &sig));
 *     if (sig) { write a checkpoint; exit with sg_stop_exit_code(sig); }
 *   }
 *   sg_stop_uninstall();                     // default handling again
 *
 * Any rank signalled means every rank stops, at the same boundary (the
 * first agreement after the signal): a signal sent to one rank only (a
 * scheduler, `kill` by hand) stops the whole job. The exit status is 128 + the signal, the shell's
 * convention (143 for SIGTERM, 130 for SIGINT); hydra's mpiexec returns it.
 */
#ifndef SG_STOP_H
#define SG_STOP_H

#include <mpi.h>

#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Record SIGTERM and SIGINT instead of dying (SA_RESTART: interrupted
 * system calls resume). Idempotent. Not collective. */
sg_status sg_stop_install(void);

/* Restore the dispositions sg_stop_install replaced. A signal recorded but
 * not yet agreed on is raised again, so it has its default effect (the
 * process ends as if no handler had been installed). Not collective. */
sg_status sg_stop_uninstall(void);

/* The signal this rank received since sg_stop_install (the last one), 0 if
 * none. Not collective. */
int sg_stop_pending(void);

/* The failure agreement of sg_agree (local is this rank's status) and, in
 * the same all-reduce, *signo = the largest signal number any rank of comm
 * received, 0 if none. Collective over comm. */
sg_status sg_stop_agree(MPI_Comm comm, sg_status local, int *signo);

/* 128 + signo: the status to exit with after a stop. */
int sg_stop_exit_code(int signo);

/* "SIGTERM", "SIGINT", else "signal N" (static storage). */
const char *sg_stop_signal_name(int signo);

/* A time budget for a training loop, the other clean stop at a step
 * boundary: limit seconds (<= 0: none) of wall time, or, with cpu_clock,
 * of CPU time summed over the ranks (every thread of each). The readings
 * are reduced to rank 0 of comm and broadcast, so every rank takes the
 * same decision at the same boundary:
 *
 *   sg_budget b;
 *   sg_budget_start(&b, MPI_COMM_WORLD, limit, 0);
 *   for (step = 1; step <= steps; ++step) {
 *     ... the step ...
 *     int spent;
 *     SG_TRY(sg_budget_spent(&b, &spent));
 *     if (spent) break;   // then checkpoint and evaluate as usual
 *   }
 */
typedef struct sg_budget {
  double limit, wall0, cpu0;
  int cpu;
  MPI_Comm comm;
} sg_budget;

/* Record the clocks now. Not collective. */
void sg_budget_start(sg_budget *b, MPI_Comm comm, double limit, int cpu_clock);

/* The seconds since sg_budget_start as rank 0 of comm sees them after the
 * reduction: *wall the maximum over the ranks, *cpu the sum; every rank
 * gets the same values. Collective over comm. */
sg_status sg_budget_used(const sg_budget *b, double *wall, double *cpu);

/* *spent = 1 once the budget's clock reached its limit (no budget: 0, and
 * no communication). Collective over comm when a limit is set. */
sg_status sg_budget_spent(const sg_budget *b, int *spent);

#ifdef __cplusplus
}
#endif

#endif /* SG_STOP_H */
