/* shardgrid — status codes and error reporting. */
#include "sg_status.h"

#include "sg_config.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if SG_HAVE_NETCDF
#include <netcdf.h>
#endif
#if SG_HAVE_PNETCDF
#include <pnetcdf.h>
#endif
#if SG_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#if SG_HAVE_NCCL
#include <nccl.h>
#endif

#define SG_ERRMSG_MAX 1024

static _Thread_local char sg_errmsg[SG_ERRMSG_MAX];

static const struct {
  const char *name;
  const char *text;
} sg_status_table[SG_STATUS_COUNT] = {
    [SG_OK] = {"SG_OK", "success"},
    [SG_ERR_INVALID_ARG] = {"SG_ERR_INVALID_ARG", "invalid argument"},
    [SG_ERR_SHAPE] = {"SG_ERR_SHAPE", "shape mismatch"},
    [SG_ERR_ALLOC] = {"SG_ERR_ALLOC", "out of memory"},
    [SG_ERR_MESH] = {"SG_ERR_MESH", "invalid mesh"},
    [SG_ERR_CONFIG] = {"SG_ERR_CONFIG", "invalid configuration"},
    [SG_ERR_HALO] = {"SG_ERR_HALO", "shard thinner than its halo"},
    [SG_ERR_PEER] = {"SG_ERR_PEER", "another rank failed"},
    [SG_ERR_NOT_SUPPORTED] = {"SG_ERR_NOT_SUPPORTED", "not supported"},
    [SG_ERR_NO_DEVICE] = {"SG_ERR_NO_DEVICE", "no such device"},
    [SG_ERR_IO] = {"SG_ERR_IO", "I/O error"},
    [SG_ERR_CORRUPT] = {"SG_ERR_CORRUPT", "corrupt or truncated file"},
    [SG_ERR_MPI] = {"SG_ERR_MPI", "MPI error"},
    [SG_ERR_NCCL] = {"SG_ERR_NCCL", "NCCL error"},
    [SG_ERR_CUDA] = {"SG_ERR_CUDA", "CUDA error"},
    [SG_ERR_CUBLAS] = {"SG_ERR_CUBLAS", "cuBLAS error"},
    [SG_ERR_CUFFT] = {"SG_ERR_CUFFT", "cuFFT error"},
    [SG_ERR_FFTW] = {"SG_ERR_FFTW", "FFTW error"},
    [SG_ERR_NETCDF] = {"SG_ERR_NETCDF", "netCDF error"},
    [SG_ERR_PNETCDF] = {"SG_ERR_PNETCDF", "PnetCDF error"},
    [SG_ERR_INTERNAL] = {"SG_ERR_INTERNAL", "internal error"},
    [SG_ERR_TIMEOUT] = {"SG_ERR_TIMEOUT", "timed out waiting for other ranks"},
};

const char *sg_status_name(sg_status st) {
  if ((int)st < 0 || st >= SG_STATUS_COUNT) return "SG_ERR_UNKNOWN";
  return sg_status_table[st].name;
}

const char *sg_status_string(sg_status st) {
  if ((int)st < 0 || st >= SG_STATUS_COUNT) return "unknown status";
  return sg_status_table[st].text;
}

const char *sg_last_error(void) { return sg_errmsg; }

void sg_clear_error(void) { sg_errmsg[0] = '\0'; }

void sg_error_set_raw(const char *msg) {
  snprintf(sg_errmsg, sizeof sg_errmsg, "%s", msg ? msg : "");
}

static int sg_world_rank(void) {
  int init = 0, fin = 0, rank = -1;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

sg_status sg_error_set(sg_status st, const char *file, int line,
                       const char *fmt, ...) {
  char body[SG_ERRMSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof body, fmt, ap);
  va_end(ap);
  const char *base = file ? strrchr(file, '/') : NULL;
  base = base ? base + 1 : (file ? file : "?");
  int rank = sg_world_rank();
  char where[128] = "";
  if (rank >= 0) snprintf(where, sizeof where, "[rank %d] ", rank);
  size_t n = strlen(where);
  memcpy(sg_errmsg, where, n + 1);
  /* body first, then " (file:line)"; truncation keeps the start */
  size_t room = sizeof sg_errmsg - n;
  size_t blen = strnlen(body, room - 1);
  memcpy(sg_errmsg + n, body, blen);
  sg_errmsg[n + blen] = '\0';
  n += blen;
  if (n + 1 < sizeof sg_errmsg)
    snprintf(sg_errmsg + n, sizeof sg_errmsg - n, " (%.64s:%d)", base, line);
  return st;
}

void sg_error_prepend(const char *prefix) {
  if (!prefix || !*prefix) return;
  char tmp[SG_ERRMSG_MAX];
  size_t head = 0; /* keep "[rank N] " first */
  if (strncmp(sg_errmsg, "[rank ", 6) == 0) {
    const char *e = strstr(sg_errmsg, "] ");
    if (e) head = (size_t)(e + 2 - sg_errmsg);
  }
  /* head, prefix, rest: truncation keeps the start */
  size_t n = head, pl = strlen(prefix), rl = strlen(sg_errmsg + head);
  memcpy(tmp, sg_errmsg, head);
  if (pl > sizeof tmp - 1 - n) pl = sizeof tmp - 1 - n;
  memcpy(tmp + n, prefix, pl);
  n += pl;
  if (rl > sizeof tmp - 1 - n) rl = sizeof tmp - 1 - n;
  memcpy(tmp + n, sg_errmsg + head, rl);
  tmp[n + rl] = '\0';
  memcpy(sg_errmsg, tmp, n + rl + 1);
}

sg_status sg_error_mpi(int rc, const char *call, const char *file, int line) {
  char text[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
    snprintf(text, sizeof text, "MPI error code %d", rc);
  return sg_error_set(SG_ERR_MPI, file, line, "%s failed: %s", call, text);
}

sg_status sg_error_netcdf(int rc, const char *call, const char *file,
                          int line) {
#if SG_HAVE_NETCDF
  const char *text = nc_strerror(rc);
#else
  const char *text = "netCDF support not built";
#endif
  return sg_error_set(SG_ERR_NETCDF, file, line, "%s failed: %s (code %d)",
                      call, text, rc);
}

sg_status sg_error_pnetcdf(int rc, const char *call, const char *file,
                           int line) {
#if SG_HAVE_PNETCDF
  const char *text = ncmpi_strerror(rc);
#else
  const char *text = "PnetCDF support not built";
#endif
  return sg_error_set(SG_ERR_PNETCDF, file, line, "%s failed: %s (code %d)",
                      call, text, rc);
}

sg_status sg_error_cuda(int rc, const char *call, const char *file, int line) {
#if SG_HAVE_CUDA
  const char *text = cudaGetErrorString((cudaError_t)rc);
#else
  const char *text = "CUDA support not built";
#endif
  return sg_error_set(SG_ERR_CUDA, file, line, "%s failed: %s (code %d)", call,
                      text, rc);
}

sg_status sg_error_nccl(int rc, const char *call, const char *file, int line) {
#if SG_HAVE_NCCL
  const char *text = ncclGetErrorString((ncclResult_t)rc);
#else
  const char *text = "NCCL support not built";
#endif
  return sg_error_set(SG_ERR_NCCL, file, line, "%s failed: %s (code %d)", call,
                      text, rc);
}

/* ---- timeouts -------------------------------------------------------------*/

static atomic_int sg_timeout_flag;
static char sg_timeout_msg[SG_ERRMSG_MAX];
static int sg_timeout_keyval = MPI_KEYVAL_INVALID;

/* Called at the start of MPI_Finalize (MPI_COMM_SELF's attributes are
 * deleted first): a timed-out collective is still pending, and the peers it
 * waits for may be dead: abort instead of finalising. */
static int timeout_at_finalize(MPI_Comm comm, int keyval, void *attr,
                               void *extra) {
  (void)comm, (void)keyval, (void)attr, (void)extra;
  if (atomic_load(&sg_timeout_flag)) {
    fprintf(
        stderr,
        "shardgrid: error: %s\nshardgrid: aborting in MPI_Finalize: a collective timed out "
        "and cannot complete\n",
        sg_timeout_msg);
    sg_abort_world(1);
  }
  return MPI_SUCCESS;
}

sg_status sg_error_timeout(const char *file, int line, const char *fmt, ...) {
  char body[SG_ERRMSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof body, fmt, ap);
  va_end(ap);
  sg_status st = sg_error_set(SG_ERR_TIMEOUT, file, line, "%s", body);
  if (atomic_exchange(&sg_timeout_flag, 1) == 0) {
    snprintf(sg_timeout_msg, sizeof sg_timeout_msg, "%s", sg_errmsg);
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin && sg_timeout_keyval == MPI_KEYVAL_INVALID &&
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, timeout_at_finalize,
                               &sg_timeout_keyval, NULL) == MPI_SUCCESS)
      MPI_Comm_set_attr(MPI_COMM_SELF, sg_timeout_keyval, NULL);
  }
  return st;
}

int sg_timed_out(void) { return atomic_load(&sg_timeout_flag); }

const char *sg_timeout_message(void) { return sg_timeout_msg; }

void sg_abort_world(int code) {
  fflush(stdout);
  fflush(stderr);
  struct timespec ts = {0, 300000000L};
  while (nanosleep(&ts, &ts) != 0) {}
  MPI_Abort(MPI_COMM_WORLD, code);
  exit(code); /* MPI_Abort does not return; for the compiler */
}

/* Print, then finalise (or abort: a timed-out collective cannot complete)
 * and exit. */
static void die_exit(int abort_run, int code) {
  fflush(stderr);
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) {
    if (abort_run)
      sg_abort_world(code);
    else
      MPI_Finalize();
  }
  exit(code);
}

void sg_die(const char *prog, sg_status st, int code) {
  const char *who = prog ? prog : "shardgrid", *msg = sg_last_error();
  if (st == SG_ERR_TIMEOUT || sg_timed_out()) {
    fprintf(stderr, "%s: error: %s\n", who,
            msg[0] ? msg : sg_status_string(st));
    if (sg_timeout_msg[0] && strcmp(sg_timeout_msg, msg) != 0)
      fprintf(stderr, "%s: error: %s\n", who, sg_timeout_msg);
    fprintf(stderr,
            "%s: aborting: a collective timed out and cannot complete\n", who);
    die_exit(1, code);
  }
  if (msg[0])
    fprintf(stderr, "%s: error: %s\n", who, msg);
  else
    fprintf(stderr, "%s: error: %s (%s)\n", who, sg_status_string(st),
            sg_status_name(st));
  die_exit(0, code);
}

void sg_die_local(const char *prog, sg_status st, int code) {
  const char *msg = sg_last_error();
  fprintf(stderr, "%s: fatal: %s\n", prog ? prog : "shardgrid",
          msg[0] ? msg : sg_status_string(st));
  die_exit(1, code);
}
