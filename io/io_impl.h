/* shardgrid — internals of the io layer (not installed). */
#ifndef SG_IO_IMPL_H
#define SG_IO_IMPL_H

#include "sg_config.h"
#include "sg_nc.h"

#include <mpi.h>
#include <stdint.h>

#if SG_HAVE_NETCDF
#include <netcdf.h>
#if SG_HAVE_NETCDF_PAR
#include <netcdf_par.h>
#endif
#endif
#if SG_HAVE_PNETCDF
#include <pnetcdf.h>
#endif

#define SG_NC_MAP_MAX 16
#define SG_IO_NAME_BUF 260 /* > NC_MAX_NAME */

typedef struct sg_nc_pending_coord {
  int varid;
  int64_t len;
  double *values;
} sg_nc_pending_coord;

struct sg_nc_t_ {
  MPI_Comm comm;
  int rank, size;
  sg_nc_backend backend;
  sg_nc_format format;
  int ncid;
  int writable;
  int define_mode;
  int ever_enddef;
  sg_status def_err; /* first error in define mode, agreed at enddef */
  char def_msg[1024];
  int64_t header_reserve;
  char path[4096];
  int nmap;
  char map_from[SG_NC_MAP_MAX][SG_NC_NAME_MAX];
  char map_to[SG_NC_MAP_MAX][SG_NC_NAME_MAX];
  int npending;
  sg_nc_pending_coord *pending;
  MPI_Info info;    /* hints given at create/open (MPI_INFO_NULL: none) */
  int independent;  /* netCDF-4: independent data access */
  int direct_read;  /* PnetCDF read-only: MPI-IO reads allowed */
  int direct_write; /* PnetCDF created file: MPI-IO writes allowed */
  int dfh_open;     /* dfh is open (on this rank: MPI_COMM_SELF) */
  MPI_File dfh;     /* MPI-IO handle of the direct reads or writes, opened
                         per rank on MPI_COMM_SELF: no collective inside */
  int pnc_dirty;    /* PnetCDF: data went through the library's own handle
                         since the last sync (see sg_nc_sync) */
  int shadow;       /* PnetCDF file being created with per-rank handles:
                         rank 0's handle is the file (MPI_COMM_SELF), the
                         others' a private copy of the header (shadow_path)
                         that sees the same define calls; see nc.c */
  char shadow_path[4096];
  int64_t *var_end; /* read-only classic file: the byte each variable's
                         data ends at, by varid (sg_io_classic_extent) */
  int nvar_end;
  int64_t file_size;     /* its size at open */
  int created;           /* made by sg_nc_create (not opened) */
  int atomic;            /* written as path ".partial", renamed at close */
  char final_path[4096]; /* atomic: the path it gets at a good close */
  int failed;            /* a collective call on the file failed (agreed) */
  int discard;           /* sg_nc_discard: remove the created file at close */
  sg_status fail_status;
  char fail_msg[1200];
  int local_handle; /* the library handle (ncid) is this rank's own, opened
                         on MPI_COMM_SELF (read-only files): its calls are
                         not collective, only the io layer's agreements are */
};

/* Parse "key=value,key=value" hints into a new MPI_Info (MPI_INFO_NULL for
 * NULL or ""). Not collective. */
sg_status sg_io_hints_info(const char *hints, MPI_Info *info);

/* ---- io_wait.c: the io layer's own collectives, with waits that yield
 * the core (MPI_Test + sched_yield/nanosleep; SG_IO_WAIT=spin: MPI_Wait) */

/* Wait for a request: sg_wait_yield (grid), or MPI_Wait with
 * SG_IO_WAIT=spin. MPI error code. */
int sg_io_wait(MPI_Request *req, MPI_Status *status);

/* Failure agreement over comm: every rank returns the status of the lowest
 * failing rank with its message. Collective (one MPI_Iallreduce; one
 * MPI_Ibcast more on failure). */
sg_status sg_io_agree(MPI_Comm comm, sg_status local);

/* The same, and the element-wise maximum over the ranks of n (<= 8) ints
 * in vals, in one allreduce: grid's sg_agree_vals with yielding waits.
 * Collective. */
sg_status sg_io_agree_max(MPI_Comm comm, sg_status local, int *vals, int n);

/* MPI_Allreduce in place (as MPI_Iallreduce), and its int64 maximum.
 * Collective. */
sg_status sg_io_allreduce(MPI_Comm comm, void *buf, int n, MPI_Datatype type,
                          MPI_Op op);
sg_status sg_io_allreduce_i64_max(MPI_Comm comm, int64_t *vals, int n);

/* Barrier (MPI_Ibarrier). Collective. */
sg_status sg_io_barrier(MPI_Comm comm);

/* MPI_Comm_dup (as MPI_Comm_idup). Collective. */
sg_status sg_io_comm_dup(MPI_Comm comm, MPI_Comm *out);

/* Map a file dim name to the caller's name, and back. */
const char *sg_io_map_to_user(const struct sg_nc_t_ *f, const char *file_name);
const char *sg_io_map_to_file(const struct sg_nc_t_ *f, const char *user_name);

/* A call both libraries have with the same arguments, made through the
 * one that holds file f: ncmpi_<call>(...) for PnetCDF, nc_<call>(...) for
 * netCDF-4 and serial; -1 when that library is not built in. Its code, 0 on
 * success. As collective as the call itself. */
#if SG_HAVE_PNETCDF && SG_HAVE_NETCDF
#define SG_IO_CALL(f, call, ...)                                     \
  ((f)->backend == SG_NC_BACKEND_PNETCDF ? ncmpi_##call(__VA_ARGS__) \
                                         : nc_##call(__VA_ARGS__))
#elif SG_HAVE_PNETCDF
#define SG_IO_CALL(f, call, ...) \
  ((f)->backend == SG_NC_BACKEND_PNETCDF ? ncmpi_##call(__VA_ARGS__) : -1)
#elif SG_HAVE_NETCDF
#define SG_IO_CALL(f, call, ...) \
  ((f)->backend != SG_NC_BACKEND_PNETCDF ? nc_##call(__VA_ARGS__) : -1)
#else
#define SG_IO_CALL(f, call, ...) ((void)(f), sg_io_no_library(__VA_ARGS__))
int sg_io_no_library(int ncid, ...); /* -1 */
#endif

/* The length (and, unless name is NULL, the name) of dim dimid of f, like
 * SG_IO_CALL(f, inq_dim, ...) with the two libraries' length types; *len is
 * 0 when the call fails. Local. */
int sg_io_inq_dim(const struct sg_nc_t_ *f, int dimid, char *name,
                  int64_t *len);

/* nc_type of a shardgrid dtype, and back (0 if none). */
int sg_io_nc_type(sg_dtype dt);
sg_dtype sg_io_dtype_of_nc(int nc_type, int *ok);

/* This rank's own MPI-IO handle of the file (f->dfh, on MPI_COMM_SELF),
 * opened with amode at the first use, closed by sg_nc_close. Local. */
sg_status sg_io_own_handle(struct sg_nc_t_ *f, int amode);

/* A file created with per-rank handles (f->shadow) becomes an ordinary
 * collectively opened file: every rank closes its handle (rank 0's holds
 * the header) and the ranks reopen the file together. Collective; no-op
 * when f->shadow is 0. */
sg_status sg_io_shadow_promote(struct sg_nc_t_ *f);

/* A local failure of a write (or of the sync/close that flushes writes)
 * of file f: the message gets the file's name (the final path of an
 * atomic file) and, when the failure was a full disk or quota (no_space,
 * errno ENOSPC/EDQUOT, or no free blocks left on the file's file system),
 * "no space left on device". Returns lst. Local. */
sg_status sg_io_write_error(struct sg_nc_t_ *f, sg_status lst, int no_space,
                            const char *what);
/* Remember an agreed failure of a collective call on f (sg_nc_close of an
 * atomic file then removes it). Returns st. Local. */
sg_status sg_io_mark_failed(struct sg_nc_t_ *f, sg_status st);

/* ---- nc_check.c: the length a classic file must have ---------------------- */

/* Parse the header of a classic (CDF-1/2/5) file: *need gets the bytes its
 * variables need (the end of the last fixed variable or of the last record of a
 * record variable; -1 when the file is not
 * classic or its header cannot be followed, which the library then
 * reports; SG_ERR_CORRUPT naming the file when a count in the header
 * asks for more bytes than the file has: no library is given such a
 * header), *have the file's size, var (cap bytes) the variable that ends
 * last; ends (may be NULL; malloc'd) the end of every variable by varid
 * (0: no data; INT64_MAX: more than any file holds), *nends their number.
 * Not collective. */
sg_status sg_io_classic_extent(const char *path, int64_t *need, int64_t *have,
                               char *var, size_t cap, int64_t **ends,
                               int *nends);
/* The same on the first len bytes of a file held in memory (the fuzz
 * target's entry point; no *have: the caller knows the length). */
sg_status sg_io_classic_extent_mem(const void *bytes, size_t len, int64_t *need,
                                   char *var, size_t cap, int64_t **ends,
                                   int *nends);
/* SG_ERR_CORRUPT naming the file and the variable when variable varid of a
 * read-only classic file ends beyond the end of the file (f->var_end, from
 * sg_io_classic_extent at open). Not collective. */
sg_status sg_io_check_var_extent(const struct sg_nc_t_ *f, int varid);

#if SG_HAVE_NETCDF_PAR
/* netCDF-4 access mode of a variable (NC_COLLECTIVE or NC_INDEPENDENT):
 * independent when asked, except where the library needs collective
 * access. Local. */
int sg_io_var_access(const struct sg_nc_t_ *f, int varid);
#endif

/* ---- nc_rw.c: shards, shared by the writes and the reads (nc_read.c) ----- */

/* rc = fn_<type>(...) for the C type of dtype dt (float, double, int, long
 * long; bf16 moves as its bits, short): the typed netCDF and PnetCDF
 * get/put calls. */
#define SG_NC_TYPED_CALL(rc, dt, fn, ...)                        \
  do {                                                           \
    switch (dt) {                                                \
    case SG_DTYPE_F32: (rc) = fn##_float(__VA_ARGS__); break;    \
    case SG_DTYPE_F64: (rc) = fn##_double(__VA_ARGS__); break;   \
    case SG_DTYPE_I32: (rc) = fn##_int(__VA_ARGS__); break;      \
    case SG_DTYPE_I64: (rc) = fn##_longlong(__VA_ARGS__); break; \
    default: (rc) = fn##_short(__VA_ARGS__); break;              \
    }                                                            \
  } while (0)

/* Variable info by id. Local. */
sg_status sg_io_info_by_id(struct sg_nc_t_ *f, int varid, sg_nc_var_info *info);
/* The variable's name (or "#varid") into buf. Local. */
const char *sg_io_var_label(struct sg_nc_t_ *f, int varid, char *buf,
                            size_t cap);
/* Check a shard against a variable (local). For writes the record dim may
 * have any length. */
sg_status sg_io_check_shard(struct sg_nc_t_ *f, const sg_nc_var_info *info,
                            const sg_nc_shard *s, int for_write);
/* Is the box (start, len) of a fixed-size variable one contiguous run of
 * the file? *first: the run's first element. */
int sg_io_run_contiguous(const sg_nc_var_info *info, const int64_t *start,
                         const int64_t *len, int64_t *first);
/* Does a variable of netCDF type t store dtype dt as is (up to byte
 * order)? */
int sg_io_same_type(int t, sg_dtype dt);
#if SG_HAVE_PNETCDF
/* Bytes per write round of a direct write (and read): swapped in a buffer
 * of this size, in the cache. */
#define SG_IO_DIRECT_CHUNK ((int64_t)8 << 20)

int sg_io_host_little_endian(void);
/* In-place byte swap of n elements of es bytes (4 or 8). */
void sg_io_swap_in_place(void *buf, int64_t n, size_t es);
/* Wait for nreq PnetCDF requests; the first failure goes to *lst unless
 * it holds one already. Collective. */
void sg_io_pnc_wait_all(struct sg_nc_t_ *f, int nreq, int *reqs, int *sts,
                        const char *what, sg_status *lst);
#endif
/* Current number of records, agreed over the ranks (max). */
sg_status sg_io_record_count(struct sg_nc_t_ *f, int64_t *len);
/* The full shard of a record variable for one frame. */
sg_status sg_io_frame_shard(struct sg_nc_t_ *f, int varid, int64_t frame,
                            const sg_nc_shard *s, int for_write,
                            sg_nc_shard *full, int64_t nrec);

/* Enter/leave define mode around an attribute change on a writable file.
 * Collective. */
sg_status sg_io_ensure_define(struct sg_nc_t_ *f, int *entered);
sg_status sg_io_leave_define(struct sg_nc_t_ *f, int entered);

#endif /* SG_IO_IMPL_H */
