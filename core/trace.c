/* shardgrid — wall-clock timers and Chrome-trace timelines. */
#include "sg_trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SG_TIMER_MAX 64
#define SG_TRACE_DEPTH 64

typedef struct sg_timer_slot {
  const char *name;
  double total;
  int64_t count;
} sg_timer_slot;

typedef struct sg_trace_event {
  const char *name;
  double t0, t1;
  int owned; /* name is a copy (sg_trace_add), freed by sg_trace_clear */
} sg_trace_event;

static sg_timer_slot sg_timers[SG_TIMER_MAX];
static int sg_ntimers;
static struct {
  const char *name;
  double t0;
} sg_open[SG_TRACE_DEPTH];
static int sg_nopen;
static int sg_tracing;
static sg_trace_event *sg_events;
static int64_t sg_nevents, sg_cap_events;

double sg_wtime(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void sg_trace_enable(int on) { sg_tracing = on != 0; }
int sg_trace_enabled(void) { return sg_tracing; }

static sg_timer_slot *sg_timer_find(const char *name, int create) {
  for (int i = 0; i < sg_ntimers; ++i)
    if (sg_timers[i].name == name || strcmp(sg_timers[i].name, name) == 0)
      return &sg_timers[i];
  if (!create || sg_ntimers == SG_TIMER_MAX) return NULL;
  sg_timers[sg_ntimers].name = name;
  return &sg_timers[sg_ntimers++];
}

void sg_trace_begin(const char *name) {
  if (sg_nopen < SG_TRACE_DEPTH) {
    sg_open[sg_nopen].name = name;
    sg_open[sg_nopen].t0 = sg_wtime();
  }
  ++sg_nopen;
}

/* Keep an event; on no memory drop it rather than fail the caller. */
static int sg_event_push(const char *name, double t0, double t1, int owned) {
  if (sg_nevents == sg_cap_events) {
    int64_t cap = sg_cap_events ? 2 * sg_cap_events : 1024;
    sg_trace_event *e = realloc(sg_events, (size_t)cap * sizeof *e);
    if (!e) return 0;
    sg_events = e;
    sg_cap_events = cap;
  }
  sg_events[sg_nevents++] = (sg_trace_event){name, t0, t1, owned};
  return 1;
}

void sg_trace_end(const char *name) {
  if (sg_nopen <= 0) return;
  --sg_nopen;
  if (sg_nopen >= SG_TRACE_DEPTH) return;
  double t1 = sg_wtime();
  const char *n = sg_open[sg_nopen].name ? sg_open[sg_nopen].name : name;
  sg_timer_slot *s = sg_timer_find(n, 1);
  if (s) {
    s->total += t1 - sg_open[sg_nopen].t0;
    s->count += 1;
  }
  if (sg_tracing) sg_event_push(n, sg_open[sg_nopen].t0, t1, 0);
}

void sg_trace_add(const char *name, double t0, double t1) {
  if (!sg_tracing || !name) return;
  char *copy = malloc(strlen(name) + 1);
  if (!copy) return;
  strcpy(copy, name);
  if (!sg_event_push(copy, t0, t1, 1)) free(copy);
}

double sg_timer_total(const char *name) {
  sg_timer_slot *s = sg_timer_find(name, 0);
  return s ? s->total : 0.0;
}

int64_t sg_timer_count(const char *name) {
  sg_timer_slot *s = sg_timer_find(name, 0);
  return s ? s->count : 0;
}

void sg_timer_reset(void) {
  for (int i = 0; i < sg_ntimers; ++i) {
    sg_timers[i].total = 0.0;
    sg_timers[i].count = 0;
  }
}

void sg_trace_clear(void) {
  sg_ntimers = 0;
  sg_nopen = 0;
  for (int64_t i = 0; i < sg_nevents; ++i)
    if (sg_events[i].owned) free((void *)sg_events[i].name);
  free(sg_events);
  sg_events = NULL;
  sg_nevents = sg_cap_events = 0;
}

/* Events travel as text lines "name\tt0_us\tdur_us\n" so names need no
 * table; rank 0 writes them with pid = rank. */
sg_status sg_trace_write(const char *path, MPI_Comm comm) {
  sg_status st = SG_OK;
  char *mine = NULL, *all = NULL;
  int *counts = NULL, *displs = NULL;
  FILE *f = NULL;
  int rank = 0, size = 1, ok = 1, all_ok = 1;
  SG_MPI(MPI_Comm_rank(comm, &rank));
  SG_MPI(MPI_Comm_size(comm, &size));
  /* a common time origin: the earliest event start over all ranks (clocks
   * are per node; good enough for a timeline on one machine) */
  double t0 = sg_wtime(), tmin = 0.0; /* events are kept by their end */
  for (int64_t i = 0; i < sg_nevents; ++i)
    if (sg_events[i].t0 < t0) t0 = sg_events[i].t0;
  SG_MPI(MPI_Allreduce(&t0, &tmin, 1, MPI_DOUBLE, MPI_MIN, comm));
  size_t cap = 64 + (size_t)sg_nevents * 96, len = 0;
  mine = malloc(cap);
  if (!mine) ok = 0;
  for (int64_t i = 0; ok && i < sg_nevents; ++i) {
    int w = snprintf(mine + len, cap - len, "%.80s\t%.3f\t%.3f\n",
                     sg_events[i].name, (sg_events[i].t0 - tmin) * 1e6,
                     (sg_events[i].t1 - sg_events[i].t0) * 1e6);
    if (w < 0 || (size_t)w >= cap - len) {
      ok = 0;
      break;
    }
    len += (size_t)w;
  }
  SG_MPI(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm));
  if (!all_ok)
    SG_RAISE(SG_ERR_ALLOC, "sg_trace_write: out of memory on some rank");
  int mylen = (int)len;
  if (rank == 0) {
    counts = malloc((size_t)size * sizeof *counts);
    displs = malloc((size_t)size * sizeof *displs);
  }
  SG_MPI(MPI_Gather(&mylen, 1, MPI_INT, counts, 1, MPI_INT, 0, comm));
  size_t total = 0;
  if (rank == 0) {
    for (int r = 0; r < size; ++r) {
      displs[r] = (int)total;
      total += (size_t)counts[r];
    }
    all = malloc(total + 1);
  }
  SG_MPI(MPI_Gatherv(mine, mylen, MPI_CHAR, all, counts, displs, MPI_CHAR, 0,
                     comm));
  ok = 1;
  if (rank == 0) {
    f = fopen(path, "w");
    if (!f) {
      ok = 0;
    } else {
      fprintf(f, "{\"traceEvents\": [\n");
      int first = 1;
      for (int r = 0; r < size; ++r) {
        fprintf(
            f,
            "%s{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, "
            "\"args\": {\"name\": \"rank %d\"}}",
            first ? "" : ",\n", r, r);
        first = 0;
        char *p = all + displs[r], *end = p + counts[r];
        while (p < end) {
          char *nl = memchr(p, '\n', (size_t)(end - p));
          if (!nl) break;
          *nl = '\0';
          char *tab1 = strchr(p, '\t');
          char *tab2 = tab1 ? strchr(tab1 + 1, '\t') : NULL;
          if (tab1 && tab2) {
            *tab1 = *tab2 = '\0';
            fprintf(
                f,
                ",\n{\"name\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": 0, "
                "\"ts\": %s, \"dur\": %s}",
                p, r, tab1 + 1, tab2 + 1);
          }
          p = nl + 1;
        }
      }
      fprintf(f, "\n], \"displayTimeUnit\": \"ms\"}\n");
      if (fclose(f) != 0) ok = 0;
      f = NULL;
    }
  }
  SG_MPI(MPI_Bcast(&ok, 1, MPI_INT, 0, comm));
  if (!ok) SG_RAISE(SG_ERR_IO, "sg_trace_write: cannot write '%s'", path);
fail:
  if (f) fclose(f);
  free(mine);
  free(all);
  free(counts);
  free(displs);
  return st;
}
