/* shardgrid — writing and reading sharded fields (hyperslabs). */
#include "io_impl.h"

#include "sg_device.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- shard descriptions --------------------------------------------------- */

sg_status sg_nc_shard_split(int ndims, const int64_t *global_shape,
                            sg_dtype dtype, int dim, int parts, int index,
                            sg_nc_shard *s) {
  sg_status st = SG_OK;
  if (!s || ndims < 0 || ndims > SG_NC_MAX_DIMS || (ndims && !global_shape))
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_nc_shard_split: ndims %d (0..%d)", ndims,
             SG_NC_MAX_DIMS);
  if (ndims > 0 && (dim < 0 || dim >= ndims || parts < 1 || index < 0 ||
                    index >= parts))
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_nc_shard_split: dim %d of %d, part %d of %d", dim, ndims,
             index, parts);
  memset(s, 0, sizeof *s);
  s->ndims = ndims;
  s->dtype = dtype;
  for (int d = 0; d < ndims; ++d) {
    if (global_shape[d] < 0)
      SG_RAISE(SG_ERR_INVALID_ARG, "negative global shape in dim %d", d);
    s->global_shape[d] = global_shape[d];
    s->start[d] = 0;
    s->count[d] = global_shape[d];
  }
  if (ndims > 0) {
    int64_t n = global_shape[dim], q = n / parts, r = n % parts;
    s->start[dim] = index * q + (index < r ? index : r);
    s->count[dim] = q + (index < r ? 1 : 0);
  }
fail:
  return st;
}

int64_t sg_nc_shard_numel(const sg_nc_shard *s) {
  if (!s) return 0;
  int64_t n = 1;
  for (int d = 0; d < s->ndims; ++d) n *= s->count[d];
  return n;
}

/* Variable info by id (local). */
static sg_status info_by_id(struct sg_nc_t_ *f, int varid,
                            sg_nc_var_info *info) {
  sg_status st = SG_OK;
  char name[SG_IO_NAME_BUF] = "";
  if (SG_IO_CALL(f, inq_varname, f->ncid, varid, name))
    SG_RAISE(SG_ERR_INVALID_ARG, "no variable with id %d in %s", varid,
             f->path);
  SG_TRY(sg_nc_inq_var(f, name, info));
fail:
  return st;
}

static const char *var_label(struct sg_nc_t_ *f, int varid, char *buf,
                             size_t cap) {
  char n[SG_IO_NAME_BUF];
  snprintf(buf, cap, "#%d", varid);
  if (!SG_IO_CALL(f, inq_varname, f->ncid, varid, n)) snprintf(buf, cap, "%s", n);
  return buf;
}

/* Check a shard against a variable (local). For writes the record dim may
 * have any length. */
static sg_status check_shard(struct sg_nc_t_ *f, const sg_nc_var_info *info,
                             const sg_nc_shard *s, int for_write) {
  sg_status st = SG_OK;
  char lbl[SG_IO_NAME_BUF + 8];
  var_label(f, info->varid, lbl, sizeof lbl);
  if (!s) SG_RAISE(SG_ERR_INVALID_ARG, "variable %s: shard is NULL", lbl);
  if (!sg_dtype_valid(s->dtype))
    SG_RAISE(SG_ERR_INVALID_ARG, "variable %s: invalid shard dtype", lbl);
  if (s->ndims != info->ndims)
    SG_RAISE(SG_ERR_SHAPE,
             "variable %s in %s has %d dims, the shard has %d", lbl, f->path,
             info->ndims, s->ndims);
  for (int d = 0; d < s->ndims; ++d) {
    int rec = d == 0 && info->unlimited0 && for_write;
    if (!rec && s->global_shape[d] != info->shape[d])
      SG_RAISE(SG_ERR_SHAPE,
               "variable %s in %s: dim %d (%s) has length %lld, the shard's "
               "global shape says %lld", lbl, f->path, d, info->dim_names[d],
               (long long)info->shape[d], (long long)s->global_shape[d]);
    if (s->start[d] < 0 || s->count[d] < 0 ||
        (!rec && s->start[d] + s->count[d] > info->shape[d]))
      SG_RAISE(SG_ERR_SHAPE,
               "variable %s: dim %d slab [%lld, %lld) outside [0, %lld)", lbl,
               d, (long long)s->start[d],
               (long long)(s->start[d] + s->count[d]),
               (long long)info->shape[d]);
  }
fail:
  return st;
}

/* Is the box (start, len) of a fixed-size (not record) variable one
 * contiguous run of the file? Yes when the dims after the outermost one
 * longer than 1 are whole; *first: the run's first element. */
static int run_contiguous(const sg_nc_var_info *info, const int64_t *start,
                          const int64_t *len, int64_t *first) {
  const int nd = info->ndims;
  if (info->unlimited0) return 0;
  int k = 0;
  while (k < nd - 1 && len[k] == 1) ++k;
  for (int d = k + 1; d < nd; ++d)
    if (start[d] != 0 || len[d] != info->shape[d]) return 0;
  int64_t lin = 0;
  for (int d = 0; d < nd; ++d) lin = lin * info->shape[d] + start[d];
  *first = lin;
  return 1;
}

/* Does a variable of netCDF type t store dtype dt as is (up to byte
 * order)? */
static int same_type(int t, sg_dtype dt) {
  return (t == 5 && dt == SG_DTYPE_F32) || (t == 6 && dt == SG_DTYPE_F64) ||
         (t == 4 && dt == SG_DTYPE_I32) || (t == 10 && dt == SG_DTYPE_I64);
}

#if SG_HAVE_PNETCDF
static int host_little_endian(void);
static void swap_in_place(void *buf, int64_t n, size_t es);
#endif

/* rc = fn_<type>(...) for the C type of dtype dt (float, double, int, long
 * long; bf16 moves as its bits, short): the typed netCDF and PnetCDF
 * get/put calls. */
#define SG_NC_TYPED_CALL(rc, dt, fn, ...)                                     \
  do {                                                                        \
    switch (dt) {                                                             \
    case SG_DTYPE_F32: (rc) = fn##_float(__VA_ARGS__); break;                 \
    case SG_DTYPE_F64: (rc) = fn##_double(__VA_ARGS__); break;                \
    case SG_DTYPE_I32: (rc) = fn##_int(__VA_ARGS__); break;                   \
    case SG_DTYPE_I64: (rc) = fn##_longlong(__VA_ARGS__); break;              \
    default: (rc) = fn##_short(__VA_ARGS__); break;                           \
    }                                                                         \
  } while (0)

#if SG_HAVE_PNETCDF
/* Wait for nreq PnetCDF requests (statuses into sts). Collective: every
 * rank calls it, failed or not. The wait's failure, else the first
 * request's (of call what), goes to *lst unless that holds one already. */
static void pnc_wait_all(struct sg_nc_t_ *f, int nreq, int *reqs, int *sts,
                         const char *what, sg_status *lst) {
  int rc = ncmpi_wait_all(f->ncid, nreq, nreq ? reqs : NULL,
                          nreq ? sts : NULL);
  if (rc && *lst == SG_OK)
    *lst = sg_error_pnetcdf(rc, "ncmpi_wait_all", __FILE__, __LINE__);
  for (int i = 0; i < nreq && *lst == SG_OK; ++i)
    if (sts[i]) *lst = sg_error_pnetcdf(sts[i], what, __FILE__, __LINE__);
}
#endif

/* ---- writing --------------------------------------------------------------- */

typedef struct wjob {
  int varid;
  int nd;
  int64_t numel;
  sg_dtype dt; /* of buf */
  const void *buf;
  void *tmp;
#if SG_HAVE_PNETCDF
  MPI_Offset pstart[SG_NC_MAX_DIMS], pcount[SG_NC_MAX_DIMS];
#endif
  size_t nstart[SG_NC_MAX_DIMS], ncount[SG_NC_MAX_DIMS];
  int direct;    /* this job can go straight through MPI-IO */
  int64_t run0;  /* its first element in the variable (direct) */
} wjob;

#if SG_HAVE_PNETCDF
/* Bytes per write round of a direct write (and read): swapped in a buffer
 * of this size, in the cache. */
#define SG_IO_DIRECT_CHUNK ((int64_t)8 << 20)

/* This rank's own MPI-IO handle of the file (MPI_COMM_SELF: opening it
 * is not collective, and neither are its reads and writes), opened at the
 * first direct read or write and closed by sg_nc_close. Local. */
sg_status sg_io_own_handle(struct sg_nc_t_ *f, int amode) {
  if (f->dfh_open) return SG_OK;
  if (MPI_File_open(MPI_COMM_SELF, f->path, amode, f->info, &f->dfh) !=
      MPI_SUCCESS) {
    f->dfh = MPI_FILE_NULL;
    return sg_error_set(SG_ERR_IO, __FILE__, __LINE__,
                        "MPI_File_open of %s for %s failed", f->path,
                        amode == MPI_MODE_RDONLY ? "reading" : "writing");
  }
  f->dfh_open = 1;
  return SG_OK;
}

/* Write every job straight through MPI-IO (each is one contiguous run of a
 * fixed-size variable stored in its own type): 8 MiB at a time copied and
 * swapped to big-endian in a small buffer, written at the variable's
 * offset + the run's, through this rank's own handle. Not collective: the
 * failures are local, agreed by the caller. */
static sg_status direct_write(struct sg_nc_t_ *f, int n, wjob *jobs) {
  sg_status lst = SG_OK;
  int rc = MPI_SUCCESS;
  int any = 0;
  for (int i = 0; i < n; ++i) any |= jobs[i].numel > 0;
  if (!any) return SG_OK;
  if ((lst = sg_io_own_handle(f, MPI_MODE_WRONLY)) != SG_OK) return lst;
  char *bounce = NULL;
  const int swap = host_little_endian();
  for (int i = 0; i < n && lst == SG_OK; ++i) {
    wjob *j = &jobs[i];
    if (j->numel == 0) continue;
    const size_t es = sg_dtype_size(j->dt);
    const int64_t per = SG_IO_DIRECT_CHUNK / (int64_t)es;
    MPI_Offset off = 0;
    int prc = ncmpi_inq_varoffset(f->ncid, j->varid, &off);
    if (prc) {
      lst = sg_error_pnetcdf(prc, "ncmpi_inq_varoffset", __FILE__, __LINE__);
      break;
    }
    if (swap && !bounce &&
        (lst = sg_malloc(sg_device_host(), (size_t)SG_IO_DIRECT_CHUNK,
                         (void **)&bounce)) != SG_OK)
      break;
    for (int64_t at = 0; at < j->numel && lst == SG_OK; at += per) {
      const int64_t cnt = j->numel - at < per ? j->numel - at : per;
      const char *src = (const char *)j->buf + (size_t)at * es;
      if (swap) {
        memcpy(bounce, src, (size_t)cnt * es);
        swap_in_place(bounce, cnt, es);
        src = bounce;
      }
      MPI_Status status;
      rc = MPI_File_write_at(f->dfh, off + (MPI_Offset)((j->run0 + at) * (int64_t)es),
                             src, (int)((size_t)cnt * es), MPI_BYTE, &status);
      int got = 0, cls = MPI_SUCCESS;
      if (rc == MPI_SUCCESS) MPI_Get_count(&status, MPI_BYTE, &got);
      else MPI_Error_class(rc, &cls);
      if (rc != MPI_SUCCESS || got != (int)((size_t)cnt * es)) {
        lst = sg_error_set(SG_ERR_IO, __FILE__, __LINE__,
                           "MPI_File_write_at failed (%d of %lld bytes "
                           "written)", got, (long long)((size_t)cnt * es));
        lst = sg_io_write_error(f, lst, cls == MPI_ERR_NO_SPACE ||
                                            cls == MPI_ERR_QUOTA, NULL);
      }
    }
  }
  sg_free(sg_device_host(), (void **)&bounce);
  return lst;
}
#endif

/* pre: a local failure found by the caller, agreed with the checks here. */
static sg_status write_many(sg_nc_t f, sg_status pre, int n, const int *varids,
                            const sg_nc_shard *shards,
                            const void *const *data) {
  sg_status st = SG_OK, lst = pre;
  wjob *jobs = NULL;
  if (!f) return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                              "write: file is NULL");
  if (lst != SG_OK)
    ;
  else if (n < 0 || (n > 0 && (!varids || !shards || !data)))
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "write: bad arguments");
  else if (!f->writable)
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "write: %s is open read-only", f->path);
  else if (f->define_mode)
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "write: %s is in define mode (call sg_nc_enddef)",
                       f->path);
  if (lst == SG_OK && n > 0 && !(jobs = calloc((size_t)n, sizeof *jobs)))
    lst = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
  for (int i = 0; lst == SG_OK && i < n; ++i) {
    sg_nc_var_info info;
    wjob *j = &jobs[i];
    const sg_nc_shard *s = &shards[i];
    lst = info_by_id(f, varids[i], &info);
    if (lst == SG_OK) lst = check_shard(f, &info, s, 1);
    if (lst != SG_OK) break;
    j->varid = varids[i];
    j->nd = s->ndims;
    j->numel = sg_nc_shard_numel(s);
    j->dt = s->dtype;
    j->buf = data[i];
    if (j->numel > 0 && !j->buf) {
      lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                         "write: data is NULL for %lld elements",
                         (long long)j->numel);
      break;
    }
    if (j->dt == SG_DTYPE_BF16 && info.nc_type != 3 && j->numel > 0) {
      /* bf16 into a float variable: widen first */
      lst = sg_malloc(sg_device_host(), (size_t)j->numel * sizeof(float),
                      &j->tmp);
      if (lst != SG_OK) break;
      lst = sg_dtype_convert(j->buf, SG_DTYPE_BF16, j->tmp, SG_DTYPE_F32,
                             j->numel);
      j->buf = j->tmp;
      j->dt = SG_DTYPE_F32;
    }
    for (int d = 0; d < j->nd; ++d) {
      int64_t a = j->numel ? s->start[d] : 0, c = j->numel ? s->count[d] : 0;
#if SG_HAVE_PNETCDF
      j->pstart[d] = (MPI_Offset)a;
      j->pcount[d] = (MPI_Offset)c;
#endif
      j->nstart[d] = (size_t)a;
      j->ncount[d] = (size_t)c;
    }
    j->direct = j->numel == 0 ||
                (same_type(info.nc_type, j->dt) &&
                 (int64_t)sg_dtype_size(j->dt) * j->numel <= INT_MAX &&
                 run_contiguous(&info, s->start, s->count, &j->run0));
  }
  /* direct writes only when every job on every rank can take them */
  int nodirect = !f->direct_write || f->backend != SG_NC_BACKEND_PNETCDF;
  for (int i = 0; lst == SG_OK && i < n; ++i) nodirect |= !jobs[i].direct;
  SG_TRY(sg_io_agree_max(f->comm, lst, &nodirect, 1));
  /* writes through PnetCDF's collective path need the shared handle */
  if (nodirect) SG_TRY(sg_io_shadow_promote(f));
  int rc = 0;
#if SG_HAVE_PNETCDF
  if (f->backend == SG_NC_BACKEND_PNETCDF && !nodirect) {
    lst = direct_write(f, n, jobs);
  } else if (f->backend == SG_NC_BACKEND_PNETCDF) {
    f->pnc_dirty = 1;
    int *reqs = malloc((size_t)(n ? n : 1) * 2 * sizeof(int));
    int nreq = 0;
    if (!reqs)
      lst = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
    for (int i = 0; reqs && i < n && lst == SG_OK; ++i) {
      wjob *j = &jobs[i];
      if (j->numel == 0) continue;
      int req = NC_REQ_NULL;
      SG_NC_TYPED_CALL(rc, j->dt, ncmpi_iput_vara, f->ncid, j->varid,
                       j->pstart, j->pcount, j->buf, &req);
      if (rc)
        lst = sg_error_pnetcdf(rc, "ncmpi_iput_vara", __FILE__, __LINE__);
      else
        reqs[nreq++] = req;
    }
    /* every rank takes part in the collective wait, failed or not */
    sg_status before = lst;
    pnc_wait_all(f, nreq, reqs, reqs ? reqs + n : NULL,
                 "ncmpi_iput_vara (request)", &lst);
    if (before == SG_OK && lst != SG_OK)
      lst = sg_io_write_error(f, lst, 0, NULL);
    free(reqs);
  }
#endif
#if SG_HAVE_NETCDF_PAR
  if (f->backend == SG_NC_BACKEND_NETCDF4) {
    static const double dummy[1] = {0};
    for (int i = 0; i < n; ++i) {
      wjob *j = &jobs[i];
      const void *b = j->numel ? j->buf : dummy;
      SG_NC_TYPED_CALL(rc, j->dt, nc_put_vara, f->ncid, j->varid, j->nstart,
                       j->ncount, b);
      if (rc && lst == SG_OK)
        lst = sg_io_write_error(
            f, sg_error_netcdf(rc, "nc_put_vara", __FILE__, __LINE__), 0,
            NULL);
    }
  }
#endif
  if (f->backend == SG_NC_BACKEND_SERIAL && lst == SG_OK)
    lst = sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                       "the serial backend does not write");
  (void)rc;
  st = sg_io_agree(f->comm, lst);
fail:
  sg_io_mark_failed(f, st);
  for (int i = 0; jobs && i < n; ++i) sg_free(sg_device_host(), &jobs[i].tmp);
  free(jobs);
  return st;
}

sg_status sg_nc_write_many(sg_nc_t f, int n, const int *varids,
                           const sg_nc_shard *shards,
                           const void *const *data) {
  return write_many(f, SG_OK, n, varids, shards, data);
}

sg_status sg_nc_write(sg_nc_t f, int varid, const sg_nc_shard *shard,
                      const void *data) {
  return write_many(f, SG_OK, 1, &varid, shard, &data);
}

/* Current number of records, agreed over the ranks (max). */
static sg_status record_count(struct sg_nc_t_ *f, int64_t *len) {
  sg_status st = SG_OK;
  int unlim = -1;
  int64_t l = 0;
  SG_IO_CALL(f, inq_unlimdim, f->ncid, &unlim);
  if (unlim >= 0) sg_io_inq_dim(f, unlim, NULL, &l);
  /* a read-only file's header is the same on every rank */
  if (!f->local_handle) SG_TRY(sg_io_allreduce_i64_max(f->comm, &l, 1));
  *len = l;
fail:
  return st;
}

/* The full shard of a record variable for one frame. */
static sg_status frame_shard(struct sg_nc_t_ *f, int varid, int64_t frame,
                             const sg_nc_shard *s, int for_write,
                             sg_nc_shard *full, int64_t nrec) {
  sg_status st = SG_OK;
  sg_nc_var_info info;
  char lbl[SG_IO_NAME_BUF + 8];
  SG_TRY(info_by_id(f, varid, &info));
  var_label(f, varid, lbl, sizeof lbl);
  if (!info.unlimited0)
    SG_RAISE(SG_ERR_SHAPE, "variable %s in %s has no record (unlimited) dim "
             "first", lbl, f->path);
  if (!s || s->ndims + 1 != info.ndims || s->ndims + 1 > SG_NC_MAX_DIMS)
    SG_RAISE(SG_ERR_SHAPE, "variable %s in %s has %d dims: a frame shard needs "
             "%d, got %d", lbl, f->path, info.ndims, info.ndims - 1,
             s ? s->ndims : -1);
  if (frame < 0 || (!for_write && frame >= nrec))
    SG_RAISE(SG_ERR_SHAPE, "variable %s: frame %lld outside [0, %lld)", lbl,
             (long long)frame, (long long)nrec);
  memset(full, 0, sizeof *full);
  full->ndims = s->ndims + 1;
  full->dtype = s->dtype;
  full->global_shape[0] = nrec > frame ? nrec : frame + 1;
  full->start[0] = frame;
  int64_t n = 1;
  for (int d = 0; d < s->ndims; ++d) {
    full->global_shape[d + 1] = s->global_shape[d];
    full->start[d + 1] = s->start[d];
    full->count[d + 1] = s->count[d];
    n *= s->count[d];
  }
  /* a record coordinate (no other dims): rank 0 writes the value */
  full->count[0] = (s->ndims == 0 && for_write && f->rank != 0) ? 0 : 1;
  (void)n;
fail:
  return st;
}

sg_status sg_nc_write_frame(sg_nc_t f, int varid, int64_t frame,
                            const sg_nc_shard *shard, const void *data,
                            int64_t *frame_out) {
  sg_status st = SG_OK;
  sg_nc_shard full;
  int64_t nrec = 0;
  if (!f) return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                              "write_frame: file is NULL");
  memset(&full, 0, sizeof full);
  if (frame < 0) { /* append: the number of records, agreed */
    SG_TRY(record_count(f, &nrec));
    frame = nrec;
  }
  sg_status lst = f->define_mode
                      ? sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                                     "write_frame: %s is in define mode",
                                     f->path)
                      : frame_shard(f, varid, frame, shard, 1, &full, nrec);
  const void *d = data;
  SG_TRY(write_many(f, lst, 1, &varid, &full, &d));
  if (frame_out) *frame_out = frame;
fail:
  return st;
}

/* ---- reading ---------------------------------------------------------------- */

sg_nc_read_opts sg_nc_read_opts_default(void) {
  sg_nc_read_opts o;
  memset(&o, 0, sizeof o);
  o.masked_value = NAN;
  o.outside_value = 0.0;
  return o;
}

typedef struct rseg {
  int64_t out_off, len, file_start;
  int rev;
} rseg;

typedef struct rbox {
  int64_t out_off[SG_NC_MAX_DIMS], len[SG_NC_MAX_DIMS];
  int64_t fstart[SG_NC_MAX_DIMS];
  int rev[SG_NC_MAX_DIMS];
  int64_t numel;
  void *buf;
} rbox;

static inline double raw_f(const void *b, sg_dtype t, int64_t i) {
  switch (t) {
  case SG_DTYPE_F32: return (double)((const float *)b)[i];
  case SG_DTYPE_F64: return ((const double *)b)[i];
  case SG_DTYPE_I32: return (double)((const int32_t *)b)[i];
  case SG_DTYPE_I64: return (double)((const int64_t *)b)[i];
  default: return (double)sg_bf16_to_f32(((const sg_bf16 *)b)[i]);
  }
}

static inline int64_t raw_i(const void *b, sg_dtype t, int64_t i) {
  switch (t) {
  case SG_DTYPE_F32: return (int64_t)((const float *)b)[i];
  case SG_DTYPE_F64: return (int64_t)((const double *)b)[i];
  case SG_DTYPE_I32: return ((const int32_t *)b)[i];
  case SG_DTYPE_I64: return ((const int64_t *)b)[i];
  default: return (int64_t)((const int16_t *)b)[i];
  }
}

static inline void store_f(void *o, sg_dtype t, int64_t i, double v) {
  switch (t) {
  case SG_DTYPE_F32: ((float *)o)[i] = (float)v; break;
  case SG_DTYPE_F64: ((double *)o)[i] = v; break;
  default: ((sg_bf16 *)o)[i] = sg_bf16_from_f32((float)v); break;
  }
}

static inline void store_i(void *o, sg_dtype t, int64_t i, int64_t v) {
  if (t == SG_DTYPE_I32)
    ((int32_t *)o)[i] = (int32_t)v;
  else
    ((int64_t *)o)[i] = v;
}

typedef struct xform {
  int nonfinite; /* NaN/Inf are masked too */
  int nmask;
  double maskv[9];
  int unpack;
  double scale, offset;
  double masked_value;
} xform;

static inline int is_masked(const xform *x, double v) {
  if (x->nonfinite && !isfinite(v)) return 1;
  for (int k = 0; k < x->nmask; ++k)
    if (v == x->maskv[k] || (isnan(x->maskv[k]) && isnan(v))) return 1;
  return 0;
}

/* Convert a box read in type rt into its place in out (shape oshape). */
static void scatter_box(const rbox *b, int nd, sg_dtype rt, const xform *x,
                        const int64_t *oshape, void *out, sg_dtype odt,
                        uint8_t *mask) {
  int64_t ostride[SG_NC_MAX_DIMS + 1];
  ostride[nd > 0 ? nd - 1 : 0] = 1;
  for (int d = nd - 2; d >= 0; --d) ostride[d] = ostride[d + 1] * oshape[d + 1];
  int64_t inner = nd > 0 ? b->len[nd - 1] : 1;
  int64_t rows = inner ? b->numel / inner : 0;
  int is_float = sg_dtype_is_float(odt);
#pragma omp parallel for if (b->numel > 262144) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, base = 0;
    for (int d = nd - 2; d >= 0; --d) {
      int64_t j = rem % b->len[d];
      rem /= b->len[d];
      int64_t o = b->out_off[d] + (b->rev[d] ? b->len[d] - 1 - j : j);
      base += o * ostride[d];
    }
    int64_t lo = nd > 0 ? b->out_off[nd - 1] : 0;
    int rv = nd > 0 ? b->rev[nd - 1] : 0;
    for (int64_t k = 0; k < inner; ++k) {
      int64_t src = r * inner + k;
      int64_t dst = base + lo + (rv ? inner - 1 - k : k);
      if (is_float) {
        double v = raw_f(b->buf, rt, src);
        int m = is_masked(x, v);
        if (m)
          v = x->masked_value;
        else if (x->unpack)
          v = v * x->scale + x->offset;
        store_f(out, odt, dst, v);
        if (mask) mask[dst] = (uint8_t)!m;
      } else {
        int64_t v = raw_i(b->buf, rt, src);
        int m = is_masked(x, (double)v);
        store_i(out, odt, dst, m ? (int64_t)x->masked_value : v);
        if (mask) mask[dst] = (uint8_t)!m;
      }
    }
  }
}

/* ---- direct reads (PnetCDF backend) ---------------------------------------- */

#if SG_HAVE_PNETCDF
static int host_little_endian(void) {
  const uint16_t one = 1;
  return *(const uint8_t *)&one == 1;
}

/* In-place byte swap of n elements of es bytes (4 or 8). Single-threaded
 * on purpose: it runs on one 8 MiB round at a time, in the cache, and an
 * OpenMP team per round cost more than the swap on an oversubscribed node
 * (measured: 58 MiB/s reads with 2 threads per rank at load 20). */
static void swap_in_place(void *buf, int64_t n, size_t es) {
  if (es == 4) {
    uint32_t *u = buf;
    for (int64_t i = 0; i < n; ++i) u[i] = __builtin_bswap32(u[i]);
  } else if (es == 8) {
    uint64_t *u = buf;
    for (int64_t i = 0; i < n; ++i) u[i] = __builtin_bswap64(u[i]);
  }
}

/* Can this rank's read of variable info (nread boxes, read type rt) go
 * straight through MPI-IO? Local. */
static int direct_ok(const struct sg_nc_t_ *f, const sg_nc_var_info *info,
                     int nread, const rbox *boxes, const void *out,
                     sg_dtype rt) {
  if (f->backend != SG_NC_BACKEND_PNETCDF || !f->direct_read || nread > 1)
    return 0;
  if (!same_type(info->nc_type, rt)) return 0;
  for (int d = 0; d < info->ndims; ++d)
    if (info->shape[d] > INT_MAX) return 0;
  if (nread == 1 && (boxes[0].buf != out || boxes[0].numel > INT_MAX))
    return 0;
  return 1;
}

/* A direct read's rounds are SG_IO_DIRECT_CHUNK bytes: each round's bytes
 * are swapped right after they arrive, while they are still in the cache
 * (a separate swap pass over a 256 MiB buffer costs as much as a third of
 * the read). */

static int box_contiguous(const sg_nc_var_info *info, const rbox *b,
                          int64_t *first) {
  return run_contiguous(info, b->fstart, b->len, first);
}

/* Read this rank's box (nread 0 or 1) of a fixed-layout classic-format
 * variable through this rank's own MPI-IO handle: reads of 8 MiB rounds at
 * explicit offsets when the box is one contiguous run of the file, else
 * through a file view on the box's bytes (offset and record size from
 * PnetCDF's header); each round is followed by its big-endian -> host swap
 * in place. Not collective (the file is read-only and every rank has its
 * own handles): failures are local, agreed by the caller. */
static sg_status direct_read(struct sg_nc_t_ *f, int varid,
                             const sg_nc_var_info *info, int nread,
                             const rbox *b, sg_dtype rt) {
  sg_status st = SG_OK, lst = SG_OK;
  const int nd = info->ndims;
  const size_t es = sg_dtype_size(rt);
  MPI_Datatype elem = MPI_DATATYPE_NULL, inner = MPI_DATATYPE_NULL,
               ftype = MPI_DATATYPE_NULL;
  MPI_Offset disp = 0;
  int count = 0, rc = MPI_SUCCESS;
  if (nread == 0 || b->numel == 0) return SG_OK;
  if ((lst = sg_io_own_handle(f, MPI_MODE_RDONLY)) != SG_OK) return lst;
  rc = MPI_Type_contiguous((int)es, MPI_BYTE, &elem);
  if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&elem);
  if (rc == MPI_SUCCESS && nread == 1) {
    MPI_Offset off = 0, recsize = 0;
    int prc = ncmpi_inq_varoffset(f->ncid, varid, &off);
    if (!prc && info->unlimited0) prc = ncmpi_inq_recsize(f->ncid, &recsize);
    if (prc) {
      lst = sg_error_pnetcdf(prc, "ncmpi_inq_varoffset", __FILE__, __LINE__);
    } else {
      int d0 = info->unlimited0 ? 1 : 0, sz[SG_NC_MAX_DIMS],
          sub[SG_NC_MAX_DIMS], at[SG_NC_MAX_DIMS];
      for (int d = d0; d < nd; ++d) {
        sz[d - d0] = (int)info->shape[d];
        sub[d - d0] = (int)b->len[d];
        at[d - d0] = (int)b->fstart[d];
      }
      if (nd - d0 > 0)
        rc = MPI_Type_create_subarray(nd - d0, sz, sub, at, MPI_ORDER_C, elem,
                                      &inner);
      else
        rc = MPI_Type_dup(elem, &inner);
      disp = off;
      if (rc == MPI_SUCCESS && info->unlimited0) {
        rc = MPI_Type_create_hvector((int)b->len[0], 1, (MPI_Aint)recsize,
                                     inner, &ftype);
        disp = off + (MPI_Offset)b->fstart[0] * recsize;
      } else if (rc == MPI_SUCCESS) {
        rc = MPI_Type_dup(inner, &ftype);
      }
      if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&ftype);
      count = (int)b->numel;
    }
  } else if (rc == MPI_SUCCESS) {
    rc = MPI_Type_dup(elem, &ftype);
    if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&ftype);
  }
  if (rc != MPI_SUCCESS && lst == SG_OK)
    lst = sg_error_set(SG_ERR_MPI, __FILE__, __LINE__,
                       "building the file view of a direct read failed");
  const int64_t per = SG_IO_DIRECT_CHUNK / (int64_t)es;
  int64_t run0 = 0; /* first element of the run, in the variable */
  const int indep = box_contiguous(info, b, &run0);
  if (lst == SG_OK) {
    if (indep) /* offsets in bytes from the start of the file */
      rc = MPI_File_set_view(f->dfh, 0, MPI_BYTE, MPI_BYTE, "native", f->info);
    else
      rc = MPI_File_set_view(f->dfh, disp, MPI_BYTE, ftype, "native", f->info);
    if (rc != MPI_SUCCESS)
      lst = sg_error_set(SG_ERR_IO, __FILE__, __LINE__,
                         "MPI_File_set_view on %s failed", f->path);
  }
  const int swap = host_little_endian();
  for (int64_t at = 0; at < count && lst == SG_OK; at += per) {
    const int cnt = (int)(count - at < per ? count - at : per);
    char *dst = (char *)b->buf + (size_t)at * es;
    MPI_Status status;
    if (indep)
      rc = MPI_File_read_at(f->dfh, disp + (MPI_Offset)((run0 + at) * (int64_t)es),
                            dst, cnt, elem, &status);
    else
      rc = MPI_File_read(f->dfh, dst, cnt, elem, &status);
    if (rc != MPI_SUCCESS) {
      lst = sg_error_set(SG_ERR_IO, __FILE__, __LINE__, "%s on %s failed",
                         indep ? "MPI_File_read_at" : "MPI_File_read",
                         f->path);
    } else {
      int got = 0;
      MPI_Get_count(&status, elem, &got);
      if (got != cnt)
        lst = sg_error_set(SG_ERR_CORRUPT, __FILE__, __LINE__,
                           "%s: short read (%d of %d elements): truncated "
                           "file?", f->path, got, cnt);
      else if (swap)
        swap_in_place(dst, cnt, es);
    }
  }
  st = lst; /* agreed by the caller with the rest of the read */
  if (ftype != MPI_DATATYPE_NULL) MPI_Type_free(&ftype);
  if (inner != MPI_DATATYPE_NULL) MPI_Type_free(&inner);
  if (elem != MPI_DATATYPE_NULL) MPI_Type_free(&elem);
  return st;
}
#endif

/* Segments of the logical range [a, b) of a dim of length n. */
static int dim_segments(int64_t a, int64_t b, int64_t n, int periodic,
                        int flip, rseg *seg, int *outside) {
  int ns = 0;
  *outside = 0;
  if (periodic) {
    int64_t x = a;
    while (x < b) {
      int64_t k = x >= 0 ? x / n : -((-x + n - 1) / n);
      int64_t end = (k + 1) * n < b ? (k + 1) * n : b;
      int64_t fx = x - k * n;
      seg[ns].out_off = x - a;
      seg[ns].len = end - x;
      seg[ns].file_start = fx;
      seg[ns].rev = 0;
      ++ns;
      x = end;
    }
  } else {
    int64_t lo = a > 0 ? a : 0, hi = b < n ? b : n;
    if (a < 0 || b > n) *outside = 1;
    if (hi > lo) {
      seg[ns].out_off = lo - a;
      seg[ns].len = hi - lo;
      seg[ns].file_start = lo;
      seg[ns].rev = 0;
      ++ns;
    }
  }
  if (flip)
    for (int i = 0; i < ns; ++i) {
      int64_t x0 = seg[i].file_start, x1 = x0 + seg[i].len;
      seg[i].file_start = n - x1;
      seg[i].rev = 1;
    }
  return ns;
}

/* Read a whole 1-D coordinate's first and last values (collective unless
 * serial). */
static sg_status coord_ends(struct sg_nc_t_ *f, int cvid, int64_t n,
                            double *first, double *last) {
  sg_status st = SG_OK;
  int rc = 0;
  double v[2] = {0, 0};
#if SG_HAVE_PNETCDF
  if (f->backend == SG_NC_BACKEND_PNETCDF) {
    MPI_Offset s0 = 0, s1 = (MPI_Offset)(n - 1), c = 1;
    rc = ncmpi_get_vara_double_all(f->ncid, cvid, &s0, &c, &v[0]);
    int rc2 = ncmpi_get_vara_double_all(f->ncid, cvid, &s1, &c, &v[1]);
    if (!rc) rc = rc2;
  }
#endif
#if SG_HAVE_NETCDF
  if (f->backend != SG_NC_BACKEND_PNETCDF) {
    size_t s0 = 0, s1 = (size_t)(n - 1), c = 1;
    rc = nc_get_vara_double(f->ncid, cvid, &s0, &c, &v[0]);
    int rc2 = nc_get_vara_double(f->ncid, cvid, &s1, &c, &v[1]);
    if (!rc) rc = rc2;
  }
#endif
  if (rc) SG_RAISE(SG_ERR_IO, "cannot read coordinate ends (code %d)", rc);
  *first = v[0];
  *last = v[1];
fail:
  return st;
}

/* The type a variable is read in. */
static sg_dtype read_type(const sg_nc_var_info *info, sg_dtype out) {
  switch (info->nc_type) {
  case 5: return SG_DTYPE_F32;
  case 6: return SG_DTYPE_F64;
  case 4: return SG_DTYPE_I32;
  case 10: return SG_DTYPE_I64;
  default:
    if (info->dtype == SG_DTYPE_BF16) return SG_DTYPE_BF16;
    return sg_dtype_is_float(out) ? SG_DTYPE_F64 : SG_DTYPE_I64;
  }
}

sg_status sg_nc_read(sg_nc_t f, int varid, const sg_nc_shard *s,
                     const sg_nc_read_opts *opts, void *out, uint8_t *mask) {
  sg_status st = SG_OK, lst = SG_OK;
  sg_nc_read_opts o = opts ? *opts : sg_nc_read_opts_default();
  sg_nc_var_info info;
  rbox *boxes = NULL;
  int nb = 0, nd = 0, periodic[SG_NC_MAX_DIMS] = {0}, flip_dim = -1;
  int lat_dim = -1, lat_cvid = -1;
  int64_t oshape[SG_NC_MAX_DIMS], onumel = 1;
  xform x;
  memset(&x, 0, sizeof x);
  memset(&info, 0, sizeof info);
  if (!f) return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                              "read: file is NULL");
  char lbl[SG_IO_NAME_BUF + 8];
  /* reading back a file being created with per-rank handles: the others'
   * handles see only their header copies */
  if (f->shadow && !f->define_mode) SG_TRY(sg_io_shadow_promote(f));
  var_label(f, varid, lbl, sizeof lbl);
  if (f->define_mode)
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "read: %s is in define mode", f->path);
  if (lst == SG_OK) lst = info_by_id(f, varid, &info);
  if (lst == SG_OK) lst = check_shard(f, &info, s, 0);
  if (lst == SG_OK) lst = sg_io_check_var_extent(f, varid);
  if (lst == SG_OK) {
    nd = s->ndims;
    for (int d = 0; d < nd; ++d) {
      if (o.halo_lo[d] < 0 || o.halo_hi[d] < 0) {
        lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                           "read %s: negative halo in dim %d", lbl, d);
        break;
      }
      periodic[d] = o.periodic[d] ||
                    (o.periodic_lon && strcmp(info.dim_names[d], "lon") == 0);
      if (strcmp(info.dim_names[d], "lat") == 0) lat_dim = d;
      if (periodic[d] && (o.halo_lo[d] > info.shape[d] ||
                          o.halo_hi[d] > info.shape[d])) {
        lst = sg_error_set(SG_ERR_HALO, __FILE__, __LINE__,
                           "read %s: periodic halo (%lld, %lld) wider than "
                           "dim %s (%lld)", lbl, (long long)o.halo_lo[d],
                           (long long)o.halo_hi[d], info.dim_names[d],
                           (long long)info.shape[d]);
        break;
      }
      oshape[d] = s->count[d] + o.halo_lo[d] + o.halo_hi[d];
      onumel *= oshape[d];
    }
    if (sg_nc_shard_numel(s) == 0) onumel = 0;
  }
  if (lst == SG_OK && onumel > 0 && !out)
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "read %s: out is NULL", lbl);
  /* attributes that change values */
  if (lst == SG_OK) {
    int64_t na = 0;
    if (!o.no_mask && sg_nc_has_att(f, varid, "_FillValue")) {
      lst = sg_nc_get_att_f64(f, varid, "_FillValue", x.maskv, 1, &na);
      x.nmask = na > 0 ? 1 : 0;
    }
    if (lst == SG_OK && !o.no_mask && sg_nc_has_att(f, varid, "missing_value")) {
      double mv[8];
      lst = sg_nc_get_att_f64(f, varid, "missing_value", mv, 8, &na);
      for (int64_t k = 0; k < na && k < 8; ++k) x.maskv[x.nmask++] = mv[k];
    }
    x.scale = 1.0;
    x.offset = 0.0;
    if (lst == SG_OK && !o.no_unpack) {
      if (sg_nc_has_att(f, varid, "scale_factor")) {
        lst = sg_nc_get_att_f64(f, varid, "scale_factor", &x.scale, 1, &na);
        x.unpack = 1;
      }
      if (lst == SG_OK && sg_nc_has_att(f, varid, "add_offset")) {
        lst = sg_nc_get_att_f64(f, varid, "add_offset", &x.offset, 1, &na);
        x.unpack = 1;
      }
      if (lst == SG_OK && x.unpack && !sg_dtype_is_float(s->dtype))
        lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                           "read %s: packed (scale_factor/add_offset) needs a "
                           "float output, not %s", lbl,
                           sg_dtype_name(s->dtype));
    }
    x.masked_value = o.masked_value;
    x.nonfinite = !o.no_mask && o.mask_nonfinite;
  }
  if (lst == SG_OK && o.flip_lat && lat_dim >= 0 &&
      SG_IO_CALL(f, inq_varid, f->ncid, sg_io_map_to_file(f, "lat"),
                 &lat_cvid))
    lat_cvid = -1;

  /* descending latitude? (flip_lat is the same on every rank) */
  if (o.flip_lat && f->local_handle) {
    if (lst == SG_OK && lat_cvid >= 0 && info.shape[lat_dim] > 1) {
      double first = 0, last = 0;
      lst = coord_ends(f, lat_cvid, info.shape[lat_dim], &first, &last);
      if (lst == SG_OK && first > last) flip_dim = lat_dim;
    }
  } else if (o.flip_lat) {
    SG_TRY(sg_io_agree(f->comm, lst));
    if (lat_cvid >= 0 && info.shape[lat_dim] > 1) {
      double first = 0, last = 0;
      lst = coord_ends(f, lat_cvid, info.shape[lat_dim], &first, &last);
      SG_TRY(sg_io_agree(f->comm, lst));
      if (first > last) flip_dim = lat_dim;
    }
  }

  /* the boxes to read */
  sg_dtype rt = read_type(&info, s->dtype);
  int any_outside = 0;
  if (lst == SG_OK && onumel > 0) {
    rseg segs[SG_NC_MAX_DIMS][3];
    int nseg[SG_NC_MAX_DIMS];
    nb = 1;
    for (int d = 0; d < nd; ++d) {
      int outside = 0;
      int64_t a = s->start[d] - o.halo_lo[d];
      int64_t b = s->start[d] + s->count[d] + o.halo_hi[d];
      nseg[d] = dim_segments(a, b, info.shape[d], periodic[d], d == flip_dim,
                             segs[d], &outside);
      any_outside |= outside;
      nb *= nseg[d];
    }
    if (nb > 0 && !(boxes = calloc((size_t)nb, sizeof *boxes)))
      lst = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
    for (int i = 0; lst == SG_OK && i < nb; ++i) {
      rbox *b = &boxes[i];
      int rem = i;
      b->numel = 1;
      for (int d = nd - 1; d >= 0; --d) {
        const rseg *g = &segs[d][rem % nseg[d]];
        rem /= nseg[d];
        b->out_off[d] = g->out_off;
        b->len[d] = g->len;
        b->fstart[d] = g->file_start;
        b->rev[d] = g->rev;
        b->numel *= g->len;
      }
    }
    /* read straight into out when nothing needs rearranging */
    int direct = lst == SG_OK && nb == 1 && !any_outside && !boxes[0].rev[0] &&
                 boxes[0].numel == onumel && rt == s->dtype && !x.unpack &&
                 flip_dim < 0;
    for (int i = 0; lst == SG_OK && i < nb; ++i) {
      if (direct) {
        boxes[i].buf = out;
        continue;
      }
      lst = sg_malloc(sg_device_host(),
                      (size_t)boxes[i].numel * sg_dtype_size(rt),
                      &boxes[i].buf);
    }
    if (lst == SG_OK && any_outside) {
      for (int64_t i = 0; i < onumel; ++i) {
        if (sg_dtype_is_float(s->dtype))
          store_f(out, s->dtype, i, o.outside_value);
        else
          store_i(out, s->dtype, i, (int64_t)o.outside_value);
        if (mask) mask[i] = 0;
      }
    }
  }
  int nread = lst == SG_OK ? nb : 0;
  /* overlapping boxes (see below) and the most boxes of any rank, agreed
   * with the failures so far in one allreduce */
  int flags[3] = {nread, 0, 1};
#if SG_HAVE_PNETCDF
  flags[2] = lst != SG_OK || !direct_ok(f, &info, nread, boxes, out, rt);
#endif
  for (int i = 0; i < nread && !flags[1]; ++i)
    for (int k = i + 1; k < nread && !flags[1]; ++k) {
      int ov = 1;
      for (int d = 0; d < nd && ov; ++d)
        ov = boxes[i].fstart[d] < boxes[k].fstart[d] + boxes[k].len[d] &&
             boxes[k].fstart[d] < boxes[i].fstart[d] + boxes[i].len[d];
      flags[1] = ov;
    }
  /* With a collective library handle the ranks must take the same path
   * and the same number of rounds, agreed here with the failures so far;
   * with per-rank handles (read-only files) every rank goes its own way
   * and the one agreement is at the end. */
  if (!f->local_handle) SG_TRY(sg_io_agree_max(f->comm, lst, flags, 3));

  int rc = 0;
#if SG_HAVE_PNETCDF
  if (f->backend == SG_NC_BACKEND_PNETCDF && !flags[2]) {
    /* every rank reads at most one box of a plain variable */
    lst = direct_read(f, varid, &info, nread, boxes, rt);
  } else if (f->backend == SG_NC_BACKEND_PNETCDF) {
    /* PnetCDF 1.12 returns wrong data for read requests that overlap in the
     * file within one wait_all (a periodic halo wrapping onto the rank's
     * own slab): then every box gets its own collective round. */
    int rounds = flags[1] ? flags[0] : 1;
    int *reqs = malloc((size_t)(nread ? nread : 1) * 2 * sizeof(int));
    if (!reqs && lst == SG_OK)
      lst = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
    for (int round = 0; round < rounds; ++round) {
      int nreq = 0;
      int i0 = flags[1] ? round : 0, i1 = flags[1] ? round + 1 : nread;
      for (int i = i0; reqs && i < i1 && i < nread && lst == SG_OK; ++i) {
        rbox *b = &boxes[i];
        MPI_Offset ps[SG_NC_MAX_DIMS], pc[SG_NC_MAX_DIMS];
        for (int d = 0; d < nd; ++d) {
          ps[d] = (MPI_Offset)b->fstart[d];
          pc[d] = (MPI_Offset)b->len[d];
        }
        int req = NC_REQ_NULL;
        SG_NC_TYPED_CALL(rc, rt, ncmpi_iget_vara, f->ncid, varid, ps, pc,
                         b->buf, &req);
        if (rc)
          lst = sg_error_pnetcdf(rc, "ncmpi_iget_vara", __FILE__, __LINE__);
        else
          reqs[nreq++] = req;
      }
      pnc_wait_all(f, nreq, reqs, reqs ? reqs + (nread ? nread : 1) : NULL,
                   "ncmpi_iget_vara (request)", &lst);
    }
    free(reqs);
  }
#endif
#if SG_HAVE_NETCDF
  if (f->backend != SG_NC_BACKEND_PNETCDF) {
    int nmax = f->backend == SG_NC_BACKEND_NETCDF4 && !f->local_handle
                   ? flags[0] : nread;
    for (int i = 0; i < nmax; ++i) {
      size_t ns[SG_NC_MAX_DIMS] = {0}, nc[SG_NC_MAX_DIMS] = {0};
      static double dummy[1];
      void *buf = dummy;
      if (i < nread) {
        for (int d = 0; d < nd; ++d) {
          ns[d] = (size_t)boxes[i].fstart[d];
          nc[d] = (size_t)boxes[i].len[d];
        }
        buf = boxes[i].buf;
      }
      SG_NC_TYPED_CALL(rc, rt, nc_get_vara, f->ncid, varid, ns, nc, buf);
      if (rc && lst == SG_OK)
        lst = sg_error_netcdf(rc, "nc_get_vara", __FILE__, __LINE__);
    }
  }
#endif
  (void)rc;
  /* values: masking, unpacking, conversion, placement */
  for (int i = 0; lst == SG_OK && i < nread; ++i) {
    rbox *b = &boxes[i];
    if (b->buf == out) {
      if (x.nmask == 0 && !x.nonfinite && !mask) continue;
      /* in place: same type, same order */
      if (sg_dtype_is_float(s->dtype)) {
#pragma omp parallel for if (onumel > 262144) schedule(static)
        for (int64_t k = 0; k < onumel; ++k) {
          int m = (x.nmask || x.nonfinite) && is_masked(&x, raw_f(out, rt, k));
          if (m) store_f(out, s->dtype, k, x.masked_value);
          if (mask) mask[k] = (uint8_t)!m;
        }
      } else {
        for (int64_t k = 0; k < onumel; ++k) {
          int m = x.nmask && is_masked(&x, (double)raw_i(out, rt, k));
          if (m) store_i(out, s->dtype, k, (int64_t)x.masked_value);
          if (mask) mask[k] = (uint8_t)!m;
        }
      }
    } else {
      scatter_box(b, nd, rt, &x, oshape, out, s->dtype, mask);
    }
  }
  if (lst != SG_OK) {
    char msg[1200];
    snprintf(msg, sizeof msg, "%.700s (reading %.100s from %.300s)",
             sg_last_error(), lbl, f->path);
    sg_error_set_raw(msg);
  }
  st = sg_io_agree(f->comm, lst);
fail:
  for (int i = 0; boxes && i < nb; ++i)
    if (boxes[i].buf != out) sg_free(sg_device_host(), &boxes[i].buf);
  free(boxes);
  return st;
}

sg_status sg_nc_read_frame(sg_nc_t f, int varid, int64_t frame,
                           const sg_nc_shard *s, const sg_nc_read_opts *opts,
                           void *out, uint8_t *mask) {
  sg_status st = SG_OK;
  sg_nc_shard full;
  int64_t nrec = 0;
  if (!f) return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                              "read_frame: file is NULL");
  if (f->shadow && !f->define_mode) SG_TRY(sg_io_shadow_promote(f));
  SG_TRY(record_count(f, &nrec));
  sg_status lst = frame_shard(f, varid, frame, s, 0, &full, nrec);
  if (!f->local_handle) SG_TRY(sg_io_agree(f->comm, lst));
  else if (lst != SG_OK) {
    /* the other ranks' reads end in one agreement: take part in it */
    return sg_io_agree(f->comm, lst);
  }
  sg_nc_read_opts o = opts ? *opts : sg_nc_read_opts_default();
  sg_nc_read_opts o2 = o;
  for (int d = 0; d + 1 < SG_NC_MAX_DIMS; ++d) {
    o2.halo_lo[d + 1] = o.halo_lo[d];
    o2.halo_hi[d + 1] = o.halo_hi[d];
    o2.periodic[d + 1] = o.periodic[d];
  }
  o2.halo_lo[0] = o2.halo_hi[0] = 0;
  o2.periodic[0] = 0;
  SG_TRY(sg_nc_read(f, varid, &full, &o2, out, mask));
fail:
  return st;
}
