/* shardgrid — status codes and error reporting.
 *
 * Every library function returns an sg_status. The library never exits or
 * aborts on a user error: it records a message (call, file, line, rank) that
 * sg_last_error() returns and hands the status back. Only programs and tests
 * fail fast (see sg_die()).
 *
 * Inside the library a function follows one pattern:
 *
 *   sg_status f(...) {
 *     sg_status st = SG_OK;
 *     SG_TRY(g());                       // propagate a status
 *     SG_MPI(MPI_Allreduce(...));        // wrap a foreign call
 *     if (n < 0) SG_RAISE(SG_ERR_INVALID_ARG, "n must be >= 0, got %d", n);
 *   fail:
 *     free(...);                         // one exit path
 *     return st;
 *   }
 */
#ifndef SG_STATUS_H
#define SG_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sg_status {
  SG_OK = 0,
  SG_ERR_INVALID_ARG,   /* a bad argument or option */
  SG_ERR_SHAPE,         /* shapes or counts that do not match */
  SG_ERR_ALLOC,         /* out of memory */
  SG_ERR_MESH,          /* mesh does not fit the processes, bad mesh spec */
  SG_ERR_CONFIG,        /* malformed configuration */
  SG_ERR_HALO,          /* a shard thinner than the halo it must supply */
  SG_ERR_PEER,          /* another rank of the group failed */
  SG_ERR_NOT_SUPPORTED, /* not implemented for this combination (yet) */
  SG_ERR_NO_DEVICE,     /* the requested device kind is not available */
  SG_ERR_IO,            /* a file system error */
  SG_ERR_CORRUPT,       /* a file that is truncated or fails its checksum */
  SG_ERR_MPI,
  SG_ERR_NCCL,
  SG_ERR_CUDA,
  SG_ERR_CUBLAS,
  SG_ERR_CUFFT,
  SG_ERR_FFTW,
  SG_ERR_NETCDF,
  SG_ERR_PNETCDF,
  SG_ERR_INTERNAL, /* a bug in shardgrid: please report it */
  SG_ERR_TIMEOUT,  /* a wait ran past the timeout (sg_comm_set_timeout,
                           SG_TIMEOUT): a peer died or never arrived; the
                           operation stays pending, the run must abort */
  SG_STATUS_COUNT
} sg_status;

/* Short name of a status, e.g. "SG_ERR_MESH". Never NULL. Not collective. */
const char *sg_status_name(sg_status st);

/* Human description of a status, e.g. "mesh does not fit". Not collective. */
const char *sg_status_string(sg_status st);

/* The message of the last error recorded on this thread ("" if none).
 * Not collective. */
const char *sg_last_error(void);
/* Put `prefix` before the last error's text (after its "[rank N] "), e.g.
 * the file and line of a config entry, keeping one rank and one source
 * location. Not collective. */
void sg_error_prepend(const char *prefix);

/* Clear the last error of this thread. Not collective. */
void sg_clear_error(void);

/* Record an error message for this thread and return st. The message is
 * prefixed with "[rank R] " (world rank, when MPI is initialised) and
 * suffixed with " (file:line)". Not collective. */
sg_status sg_error_set(sg_status st, const char *file, int line,
                       const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* Record a message as the last error exactly as given (no prefix/suffix);
 * used to propagate a peer's message. Not collective. */
void sg_error_set_raw(const char *msg);

/* Record a timeout (SG_ERR_TIMEOUT, message as sg_error_set) and mark the
 * process as having a collective that can never complete: from then on
 * sg_timed_out() is 1, sg_die aborts instead of finalising, and
 * MPI_Finalize on this rank prints the message and calls MPI_Abort (an
 * attribute delete callback on MPI_COMM_SELF: finalising with a pending
 * collective is erroneous, and would wait for the dead peer). For the
 * library's waits (grid, halo, fft). Not collective. */
sg_status sg_error_timeout(const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* 1 once a wait of this process timed out (sg_error_timeout). The message
 * of the first timeout: sg_timeout_message() ("" if none). Not collective. */
int sg_timed_out(void);
const char *sg_timeout_message(void);

/* For programs and tests only; the library never calls them.
 * sg_die: print "prog: error: <last error>" to stderr, finalise MPI and
 * exit(code). Collective over MPI_COMM_WORLD (MPI_Finalize): call it on every
 * rank, after the ranks agreed on the failure (sg_group_agree). After a
 * timeout (st == SG_ERR_TIMEOUT, or sg_timed_out()) it prints the timeout's
 * message too and calls MPI_Abort(MPI_COMM_WORLD, code) instead: the peers
 * that never arrived cannot finalise (not collective then).
 * sg_die_local: for a failure only this rank knows of: print and
 * MPI_Abort(code). Not collective. */
void sg_die(const char *prog, sg_status st, int code);
void sg_die_local(const char *prog, sg_status st, int code);

/* MPI_Abort(MPI_COMM_WORLD, code) after flushing stdout and stderr and
 * giving the process manager a moment (0.3 s) to forward them: hydra's
 * proxy tears the job down as soon as the abort reaches it, and output
 * still in the rank's pipe is then lost (seen: a timeout's message missing
 * about once in 40 runs). Every abort of the library and the programs goes
 * through here. Not collective; does not return. */
void sg_abort_world(int code);

#define SG_RAISE(status, ...)                                     \
  do {                                                            \
    st = sg_error_set((status), __FILE__, __LINE__, __VA_ARGS__); \
    goto fail;                                                    \
  } while (0)

#define SG_TRY(call)               \
  do {                             \
    sg_status sg_try_st_ = (call); \
    if (sg_try_st_ != SG_OK) {     \
      st = sg_try_st_;             \
      goto fail;                   \
    }                              \
  } while (0)

/* Wrap an MPI call: on failure record the call, MPI's message, file, line,
 * rank. */
#define SG_MPI(call)                                            \
  do {                                                          \
    int sg_mpi_rc_ = (call);                                    \
    if (sg_mpi_rc_ != 0 /* MPI_SUCCESS */) {                    \
      st = sg_error_mpi(sg_mpi_rc_, #call, __FILE__, __LINE__); \
      goto fail;                                                \
    }                                                           \
  } while (0)

/* Wrap an FFTW plan creation: a NULL plan is a failure. */
#define SG_FFTW_PLAN(plan, call)                                   \
  do {                                                             \
    (plan) = (call);                                               \
    if (!(plan)) SG_RAISE(SG_ERR_FFTW, "%s returned NULL", #call); \
  } while (0)

/* Wrap a netCDF-C call (nc_*): nonzero is a failure with nc_strerror. */
#define SG_NC(call)                                               \
  do {                                                            \
    int sg_nc_rc_ = (call);                                       \
    if (sg_nc_rc_ != 0) {                                         \
      st = sg_error_netcdf(sg_nc_rc_, #call, __FILE__, __LINE__); \
      goto fail;                                                  \
    }                                                             \
  } while (0)

/* Wrap a PnetCDF call (ncmpi_*): nonzero is a failure with ncmpi_strerror. */
#define SG_PNC(call)                                                \
  do {                                                              \
    int sg_pnc_rc_ = (call);                                        \
    if (sg_pnc_rc_ != 0) {                                          \
      st = sg_error_pnetcdf(sg_pnc_rc_, #call, __FILE__, __LINE__); \
      goto fail;                                                    \
    }                                                               \
  } while (0)

/* Wrap CUDA runtime / cuBLAS / cuFFT / NCCL calls (only in CUDA files). */
#define SG_CUDA(call)                                           \
  do {                                                          \
    int sg_cu_rc_ = (int)(call);                                \
    if (sg_cu_rc_ != 0) {                                       \
      st = sg_error_cuda(sg_cu_rc_, #call, __FILE__, __LINE__); \
      goto fail;                                                \
    }                                                           \
  } while (0)
#define SG_CUBLAS(call)                                                   \
  do {                                                                    \
    int sg_cb_rc_ = (int)(call);                                          \
    if (sg_cb_rc_ != 0) {                                                 \
      st = sg_error_set(SG_ERR_CUBLAS, __FILE__, __LINE__,                \
                        "%s failed: cuBLAS status %d", #call, sg_cb_rc_); \
      goto fail;                                                          \
    }                                                                     \
  } while (0)
#define SG_CUFFT(call)                                                   \
  do {                                                                   \
    int sg_cf_rc_ = (int)(call);                                         \
    if (sg_cf_rc_ != 0) {                                                \
      st = sg_error_set(SG_ERR_CUFFT, __FILE__, __LINE__,                \
                        "%s failed: cuFFT status %d", #call, sg_cf_rc_); \
      goto fail;                                                         \
    }                                                                    \
  } while (0)
#define SG_NCCL(call)                                             \
  do {                                                            \
    int sg_nccl_rc_ = (int)(call);                                \
    if (sg_nccl_rc_ != 0) {                                       \
      st = sg_error_nccl(sg_nccl_rc_, #call, __FILE__, __LINE__); \
      goto fail;                                                  \
    }                                                             \
  } while (0)

/* Helpers behind the macros. Not collective. */
sg_status sg_error_mpi(int rc, const char *call, const char *file, int line);
sg_status sg_error_netcdf(int rc, const char *call, const char *file, int line);
sg_status sg_error_pnetcdf(int rc, const char *call, const char *file,
                           int line);
sg_status sg_error_cuda(int rc, const char *call, const char *file, int line);
sg_status sg_error_nccl(int rc, const char *call, const char *file, int line);

#ifdef __cplusplus
}
#endif
#endif /* SG_STATUS_H */
