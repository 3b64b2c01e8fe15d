/* shardgrid — waits: the timeout (sg_comm_set_timeout, SG_TIMEOUT), the
 * census of a timed-out wait, the yielding wait, and the failure agreement
 * (sg_agree) built on them. See docs/reliability.md. */
#define _GNU_SOURCE
#include "mesh_impl.h"
#include "sg_comm.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- timeouts --------------------------------------------------------------*/

static pthread_once_t timeout_once = PTHREAD_ONCE_INIT;
static _Atomic double timeout_s;

static void timeout_from_env(void) {
  const char *e = getenv("SG_TIMEOUT");
  if (!e || !*e) return;
  char *end = NULL;
  double v = strtod(e, &end);
  if (end == e || *end != '\0' || !(v >= 0) || v > 1e9) {
    fprintf(
        stderr,
        "shardgrid: warning: SG_TIMEOUT='%s' is not a number of seconds >= 0; "
        "no timeout\n",
        e);
    return;
  }
  atomic_store(&timeout_s, v);
}

void sg_comm_set_timeout(double seconds) {
  pthread_once(&timeout_once, timeout_from_env);
  atomic_store(&timeout_s, seconds > 0 && seconds <= 1e9 ? seconds : 0.0);
}

double sg_comm_timeout(void) {
  pthread_once(&timeout_once, timeout_from_env);
  return atomic_load(&timeout_s);
}

void sg_deadline_start(sg_deadline *d) {
  d->limit = sg_comm_timeout();
  d->t0 = d->limit > 0 ? MPI_Wtime() : 0.0;
  d->polls = 0;
}

int sg_deadline_passed(sg_deadline *d) {
  if (d->limit <= 0 || (++d->polls & 63u) != 0) return 0;
  return MPI_Wtime() - d->t0 >= d->limit;
}

/* World rank of rank r of comm (-1 if unknown). */
static int world_rank_of(MPI_Comm comm, int r) {
  MPI_Group g = MPI_GROUP_NULL, w = MPI_GROUP_NULL;
  int out = -1;
  if (MPI_Comm_group(comm, &g) == MPI_SUCCESS &&
      MPI_Comm_group(MPI_COMM_WORLD, &w) == MPI_SUCCESS)
    MPI_Group_translate_ranks(g, 1, &r, w, &out);
  if (g != MPI_GROUP_NULL) MPI_Group_free(&g);
  if (w != MPI_GROUP_NULL) MPI_Group_free(&w);
  return out == MPI_UNDEFINED ? -1 : out;
}

/* The census of a timed-out wait on a communicator: which ranks are waiting
 * on it too. A rank whose wait on comm timed out sends a ping to every
 * other rank and listens for a grace period; ranks waiting on comm (in
 * sg_agree, sg_wait, a blocking sg_* call) answer pings while they wait, and
 * ranks that time out themselves ping. Ranks heard from are waiting on the
 * communicator; the others did not arrive (dead, stuck elsewhere, or in a
 * blocking MPI call). The messages use a reserved tag on comm; nothing
 * happens on the success path but an MPI_Iprobe per poll while a timeout
 * is set. */
enum { CENSUS_TAG = 32001, CENSUS_PING = 1, CENSUS_PONG = 2 };

typedef struct census {
  MPI_Comm comm;
  int size, me;
  unsigned char *heard; /* heard[r]: rank r answered or pinged */
} census;

static void census_init(census *c, MPI_Comm comm) {
  memset(c, 0, sizeof *c);
  c->comm = MPI_COMM_NULL;
  if (comm == MPI_COMM_NULL) return;
  int inter = 0;
  if (MPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) return;
  if (MPI_Comm_size(comm, &c->size) != MPI_SUCCESS || c->size < 2) return;
  MPI_Comm_rank(comm, &c->me);
  c->heard = calloc((size_t)c->size, 1);
  if (c->heard) c->comm = comm;
}

static void census_free(census *c) {
  free(c->heard);
  c->heard = NULL;
}

static void census_send(census *c, int to, int what) {
  static int msg[2] = {CENSUS_PING,
                       CENSUS_PONG}; /* static: outlives the send */
  MPI_Request r = MPI_REQUEST_NULL;
  if (MPI_Isend(&msg[what == CENSUS_PONG], 1, MPI_INT, to, CENSUS_TAG, c->comm,
                &r) == MPI_SUCCESS)
    MPI_Request_free(&r);
}

/* Answer pings, note who was heard. */
static void census_poll(census *c) {
  if (c->comm == MPI_COMM_NULL) return;
  for (;;) {
    int flag = 0, msg = 0;
    MPI_Status s;
    if (MPI_Iprobe(MPI_ANY_SOURCE, CENSUS_TAG, c->comm, &flag, &s) !=
            MPI_SUCCESS ||
        !flag)
      return;
    if (MPI_Recv(&msg, 1, MPI_INT, s.MPI_SOURCE, CENSUS_TAG, c->comm,
                 MPI_STATUS_IGNORE) != MPI_SUCCESS)
      return;
    if (s.MPI_SOURCE >= 0 && s.MPI_SOURCE < c->size) c->heard[s.MPI_SOURCE] = 1;
    if (msg == CENSUS_PING) census_send(c, s.MPI_SOURCE, CENSUS_PONG);
  }
}

/* Ping everyone, listen for `grace` seconds; write the ranks not heard
 * from into out. */
static void census_run(census *c, double grace, char *out, size_t n) {
  out[0] = '\0';
  if (c->comm == MPI_COMM_NULL) return;
  for (int r = 0; r < c->size; ++r)
    if (r != c->me) census_send(c, r, CENSUS_PING);
  const double t0 = MPI_Wtime();
  int all = 0;
  while (!all && MPI_Wtime() - t0 < grace) {
    census_poll(c);
    all = 1;
    for (int r = 0; r < c->size && all; ++r) all = r == c->me || c->heard[r];
    struct timespec ts = {0, 1000000};
    if (!all) nanosleep(&ts, NULL);
  }
  size_t len = 0;
  int missing = 0;
  for (int r = 0; r < c->size; ++r) {
    if (r == c->me || c->heard[r]) continue;
    if (missing++ < 16 && len + 32 < n) {
      int w = world_rank_of(c->comm, r);
      len += (size_t)snprintf(out + len, n - len, "%s%d (world rank %d)",
                              missing > 1 ? ", " : "", r, w);
    }
  }
  if (missing > 16 && len + 32 < n)
    snprintf(out + len, n - len, " and %d more", missing - 16);
  if (!missing)
    snprintf(out, n, "none (every rank is waiting on this communicator)");
}

/* Record the timeout of a wait on comm ("what" names the collective). */
static sg_status timeout_raise(census *c, const sg_deadline *d,
                               const char *what) {
  char who[512] = "";
  if (c->comm != MPI_COMM_NULL) {
    const double grace = d->limit < 1.0 ? d->limit : 1.0;
    census_run(c, grace, who, sizeof who);
    return sg_error_timeout(
        __FILE__, __LINE__,
        "%s: timed out after %.3g s (SG_TIMEOUT) waiting for the other ranks of a "
        "communicator of %d (this is its rank %d); ranks that did not arrive (no "
        "answer within %.3g s): %s; the operation cannot be cancelled: abort the run",
        what, d->limit, c->size, c->me, grace, who);
  }
  return sg_error_timeout(
      __FILE__, __LINE__,
      "%s: timed out after %.3g s (SG_TIMEOUT) waiting for other ranks (which "
      "ones is not known here); the operation cannot be cancelled: abort the run",
      what, d->limit);
}

/* The sleeps of a yielding wait: after 64 yields, 20 us, then 40 us. Short,
 * because the rank waited for is usually runnable, only descheduled: a
 * longer sleep (this was 20 us doubling to 1 ms) holds the waiter asleep
 * well after its peer has arrived, at every one of a step's hundreds of
 * waits. Measured on 2 cores (bench/RESULTS.md, "sg_agree's waits"): a
 * 10-step ViT on dp=4 5.0-6.2 s -> 1.5 s, on dp=2,tp=2,h=2 (8 ranks) 24.0 ->
 * 10.0 s, the FNO on h=2,w=2 3.9 -> 1.3 s; 100 us caps were in between. */
static void yield_step(int k, long *ns) {
  if (k < 64) {
    sched_yield();
  } else {
    struct timespec ts = {0, *ns};
    nanosleep(&ts, NULL);
    if (*ns < 40000) *ns *= 2;
  }
}

/* Wait for an MPI request: MPI_Wait (yield 0) or sg_wait_yield's policy
 * (yield 1); with a timeout set, MPI_Test polls (with those sleeps when
 * yield) until the deadline, answering the census of comm (may be
 * MPI_COMM_NULL) meanwhile. On a timeout *req stays pending (never free
 * it or its buffers) and the status is SG_ERR_TIMEOUT. */
static sg_status wait_timed(MPI_Request *req, MPI_Status *status, int yield,
                            const char *what, MPI_Comm comm) {
  sg_status st = SG_OK;
  MPI_Status ignored;
  if (!status) status = &ignored;
  sg_deadline d;
  sg_deadline_start(&d);
  if (d.limit <= 0) {
    int rc = MPI_SUCCESS;
    if (!yield) {
      rc = MPI_Wait(req, status);
    } else {
      long ns = 20000;
      for (int k = 0;; ++k) {
        int done = 0;
        rc = MPI_Test(req, &done, status);
        if (rc != MPI_SUCCESS || done) break;
        yield_step(k, &ns);
      }
    }
    return rc == MPI_SUCCESS ? SG_OK
                             : sg_error_mpi(rc, what, __FILE__, __LINE__);
  }
  census c;
  census_init(&c, comm);
  long ns = 20000;
  for (int k = 0;; ++k) {
    int done = 0;
    int rc = MPI_Test(req, &done, status);
    if (rc != MPI_SUCCESS) {
      st = sg_error_mpi(rc, what, __FILE__, __LINE__);
      break;
    }
    if (done) break;
    census_poll(&c);
    if (sg_deadline_passed(&d)) {
      st = timeout_raise(&c, &d, what);
      break;
    }
    if (yield) yield_step(k, &ns);
  }
  census_free(&c);
  return st;
}

sg_status sg_wait_timed(MPI_Request *req, MPI_Status *status, int yield,
                        const char *what, MPI_Comm comm) {
  return wait_timed(req, status, yield, what ? what : "a wait", comm);
}

sg_status sg_timeout_error(const sg_deadline *d, const char *what,
                           MPI_Comm comm, int peer) {
  if (peer >= 0 && comm != MPI_COMM_NULL)
    return sg_error_timeout(
        __FILE__, __LINE__,
        "%s: timed out after %.3g s (SG_TIMEOUT) waiting for rank %d (world rank %d), "
        "which did not arrive; the operation cannot be cancelled: abort the run",
        what, d->limit, peer, world_rank_of(comm, peer));
  census c;
  census_init(&c, comm);
  sg_status st = timeout_raise(&c, d, what);
  census_free(&c);
  return st;
}

/* ---- failure agreement ----------------------------------------------------*/

int sg_wait_yield(MPI_Request *req, MPI_Status *status) {
  sg_status st = wait_timed(req, status, 1, "a yielding wait (sg_wait_yield)",
                            MPI_COMM_NULL);
  return st == SG_OK ? MPI_SUCCESS : MPI_ERR_OTHER;
}

sg_status sg_agree_vals(MPI_Comm comm, sg_status local, int *vals, int n,
                        int yield) {
  sg_status st = SG_OK;
  int me = 0, size = 1, stack_buf[1 + SG_AGREE_MAX_VALS];
  MPI_Request req = MPI_REQUEST_NULL;
  struct agree_info {
    int status;
    char msg[1024];
  } stack_info, *info = &stack_info;
  int *buf = stack_buf;
  /* with a timeout the buffers live on the heap: after a timeout the
   * operation stays pending in MPI and may still write them */
  const int timed = sg_comm_timeout() > 0;
  if (n < 0 || n > SG_AGREE_MAX_VALS || (n > 0 && !vals))
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_agree_vals: n = %d values (0..%d)", n,
                        SG_AGREE_MAX_VALS);
  SG_MPI(MPI_Comm_rank(comm, &me));
  SG_MPI(MPI_Comm_size(comm, &size));
  if (timed && !(buf = malloc(sizeof stack_buf)))
    return sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__,
                        "sg_agree: out of memory");
  /* success path: one all-reduce (max of size - rank: the lowest failing
   * rank, 0 when none failed), the values riding along */
  buf[0] = local != SG_OK ? size - me : 0;
  for (int i = 0; i < n; ++i) buf[i + 1] = vals[i];
  SG_MPI(
      MPI_Iallreduce(MPI_IN_PLACE, buf, n + 1, MPI_INT, MPI_MAX, comm, &req));
  SG_TRY(wait_timed(&req, NULL, yield, "sg_agree", comm));
  for (int i = 0; i < n; ++i) vals[i] = buf[i + 1];
  if (buf[0] == 0) goto fail;
  const int lowest = size - buf[0];
  /* failure: the lowest failing rank tells everyone its status and why */
  if (timed && !(info = malloc(sizeof *info)))
    SG_RAISE(SG_ERR_ALLOC, "sg_agree: out of memory");
  memset(info, 0, sizeof *info);
  if (me == lowest) {
    info->status = (int)local;
    const char *m = sg_last_error();
    if (m[0])
      snprintf(info->msg, sizeof info->msg, "%s", m);
    else
      snprintf(info->msg, sizeof info->msg, "[rank %d] %s (%s)", me,
               sg_status_string(local), sg_status_name(local));
  }
  SG_MPI(MPI_Ibcast(info, (int)sizeof *info, MPI_BYTE, lowest, comm, &req));
  SG_TRY(wait_timed(&req, NULL, yield, "sg_agree (the failing rank's message)",
                    comm));
  info->msg[sizeof info->msg - 1] = '\0';
  sg_error_set_raw(info->msg);
  st = info->status > SG_OK && info->status < SG_STATUS_COUNT
           ? (sg_status)info->status
           : SG_ERR_PEER;
fail:
  if (st != SG_ERR_TIMEOUT) { /* a timed-out operation keeps its buffer */
    if (buf != stack_buf) free(buf);
    if (info != &stack_info) free(info);
  }
  return st;
}

/* Whether sg_agree's waits yield: when this node's ranks outnumber its
 * cores (the launcher's local rank count: MPICH's MPI_LOCALNRANKS, Open
 * MPI's OMPI_COMM_WORLD_LOCAL_SIZE; unknown: spin, as before), as the halo
 * layer's waits do. A spinning rank then holds the core the rank it waits
 * for needs (bench/RESULTS.md, "sg_agree's waits"). SG_AGREE_WAIT=spin or
 * yield forces one (A/B measurements). */
static pthread_once_t agree_once = PTHREAD_ONCE_INIT;
static int agree_yields;

static void agree_wait_from_env(void) {
  const char *e = getenv("SG_AGREE_WAIT");
  if (e && !strcmp(e, "spin")) return;
  if (e && !strcmp(e, "yield")) {
    agree_yields = 1;
    return;
  }
  const char *n = getenv("MPI_LOCALNRANKS");
  if (!n) n = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  long local = n ? strtol(n, NULL, 10) : 0,
       cores = sysconf(_SC_NPROCESSORS_ONLN);
  agree_yields = local > 0 && cores > 0 && local > cores;
}

sg_status sg_agree(MPI_Comm comm, sg_status local) {
  pthread_once(&agree_once, agree_wait_from_env);
  return sg_agree_vals(comm, local, NULL, 0, agree_yields);
}

sg_status sg_group_agree(sg_group_t g, sg_status local) {
  if (!g)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_group_agree: group is NULL");
  return sg_agree(g->comm, local);
}


/* ---- the watchdog of blocking calls ----------------------------------------
 * One thread, started at the first armed call, sleeps on a condition until
 * the deadline of the outermost armed section; sections end by disarming.
 * The abort comes from the watchdog thread while the main thread is blocked
 * inside MPI: MPICH's MPI_Abort only asks the process manager to end the
 * job and exits, which is what a job stuck for good needs. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int depth;       /* nesting of the caller's sections */
  unsigned gen;    /* sections started: a new one re-arms */
  double deadline; /* of the outermost section (CLOCK_REALTIME seconds) */
  double limit;
  char what[160];
  int started;
  int rank; /* world rank, asked by the calling thread (the MPI one) */
} wd = {PTHREAD_MUTEX_INITIALIZER,
        PTHREAD_COND_INITIALIZER,
        0,
        0,
        0.0,
        0.0,
        "",
        0,
        -1};

static double realtime_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *watchdog_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&wd.mu);
  for (;;) {
    while (wd.depth == 0) pthread_cond_wait(&wd.cv, &wd.mu);
    const unsigned g = wd.gen;
    struct timespec ts = {(time_t)wd.deadline,
                          (long)((wd.deadline - (double)(time_t)wd.deadline) *
                                 1e9)};
    int rc = 0;
    while (wd.depth > 0 && wd.gen == g && rc != ETIMEDOUT)
      rc = pthread_cond_timedwait(&wd.cv, &wd.mu, &ts);
    if (wd.depth > 0 && wd.gen == g && rc == ETIMEDOUT) {
      fprintf(
          stderr,
          "shardgrid: error: [rank %d] %s: timed out after %.3g s (SG_TIMEOUT) in a blocking MPI-IO "
          "call: another rank did not arrive (which one is not known here); aborting the job\n",
          wd.rank, wd.what, wd.limit);
      sg_abort_world(1);
    }
  }
  return NULL;
}

void sg_watchdog_begin(const char *what) {
  const double limit = sg_comm_timeout();
  if (limit <= 0) return;
  int me = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  pthread_mutex_lock(&wd.mu);
  wd.rank = me;
  if (!wd.started) {
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    wd.started = pthread_create(&th, &at, watchdog_main, NULL) == 0;
    pthread_attr_destroy(&at);
  }
  if (wd.depth++ == 0) {
    ++wd.gen;
    wd.limit = limit;
    wd.deadline = realtime_now() + limit;
    snprintf(wd.what, sizeof wd.what, "%s", what ? what : "a blocking call");
    pthread_cond_signal(&wd.cv);
  }
  pthread_mutex_unlock(&wd.mu);
}

void sg_watchdog_end(void) {
  if (!wd.started) return; /* set under the lock by this (the calling) thread */
  pthread_mutex_lock(&wd.mu);
  if (wd.depth > 0 && --wd.depth == 0) pthread_cond_signal(&wd.cv);
  pthread_mutex_unlock(&wd.mu);
}
