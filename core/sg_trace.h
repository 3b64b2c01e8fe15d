/* shardgrid — wall-clock timers and Chrome-trace timelines.
 *
 * Named regions nest: sg_trace_begin("halo") ... sg_trace_end("halo").
 * Every region adds its duration to a per-process total under its name
 * (sg_timer_total), which the training drivers use for their time split
 * (compute / halo / collectives / io). When tracing is enabled the regions
 * are also kept as events and sg_trace_write gathers them from all ranks
 * into one Chrome-trace JSON file (chrome://tracing, Perfetto), one process
 * row per rank. Region names must be string literals or otherwise outlive
 * the trace. Not thread-safe: call from the thread that drives MPI.
 */
#ifndef SG_TRACE_H
#define SG_TRACE_H

#include <mpi.h>
#include <stdint.h>

#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds since an arbitrary fixed point (monotonic). Not collective. */
double sg_wtime(void);

/* Keep events for a timeline (1) or only totals (0, the default). */
void sg_trace_enable(int on);
int sg_trace_enabled(void);

/* Open and close a region. end must match the innermost open begin. */
void sg_trace_begin(const char *name);
void sg_trace_end(const char *name);

/* Record a finished event [t0, t1] (sg_wtime seconds) under name, which
 * is copied (it may be built on the stack, e.g. "F3" of a pipeline
 * action). Only when tracing is enabled; adds to no timer total. */
void sg_trace_add(const char *name, double t0, double t1);

/* Total seconds and number of closed regions under a name (0 if none). */
double sg_timer_total(const char *name);
int64_t sg_timer_count(const char *name);
/* Reset all totals (events are kept). */
void sg_timer_reset(void);

/* Drop all recorded events and totals. */
void sg_trace_clear(void);

/* Gather every rank's events to rank 0 of comm and write them as one
 * Chrome-trace JSON file at path (pid = rank in comm). Collective over comm;
 * every rank returns the same status. */
sg_status sg_trace_write(const char *path, MPI_Comm comm);

#ifdef __cplusplus
}
#endif
#endif /* SG_TRACE_H */
