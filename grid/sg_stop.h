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

#ifdef __cplusplus
}
#endif

#endif /* SG_STOP_H */
