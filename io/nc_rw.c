/* shardgrid — writing and reading sharded fields (hyperslabs): shard
 * descriptions and checks, byte order, frames, and writing. Reading is in
 * nc_read.c. */
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
  if (ndims > 0 &&
      (dim < 0 || dim >= ndims || parts < 1 || index < 0 || index >= parts))
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
sg_status sg_io_info_by_id(struct sg_nc_t_ *f, int varid,
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

const char *sg_io_var_label(struct sg_nc_t_ *f, int varid, char *buf,
                            size_t cap) {
  char n[SG_IO_NAME_BUF];
  snprintf(buf, cap, "#%d", varid);
  if (!SG_IO_CALL(f, inq_varname, f->ncid, varid, n))
    snprintf(buf, cap, "%s", n);
  return buf;
}

/* Check a shard against a variable (local). For writes the record dim may
 * have any length. */
sg_status sg_io_check_shard(struct sg_nc_t_ *f, const sg_nc_var_info *info,
                            const sg_nc_shard *s, int for_write) {
  sg_status st = SG_OK;
  char lbl[SG_IO_NAME_BUF + 8];
  sg_io_var_label(f, info->varid, lbl, sizeof lbl);
  if (!s) SG_RAISE(SG_ERR_INVALID_ARG, "variable %s: shard is NULL", lbl);
  if (!sg_dtype_valid(s->dtype))
    SG_RAISE(SG_ERR_INVALID_ARG, "variable %s: invalid shard dtype", lbl);
  if (s->ndims != info->ndims)
    SG_RAISE(SG_ERR_SHAPE, "variable %s in %s has %d dims, the shard has %d",
             lbl, f->path, info->ndims, s->ndims);
  for (int d = 0; d < s->ndims; ++d) {
    int rec = d == 0 && info->unlimited0 && for_write;
    if (!rec && s->global_shape[d] != info->shape[d])
      SG_RAISE(SG_ERR_SHAPE,
               "variable %s in %s: dim %d (%s) has length %lld, the shard's "
               "global shape says %lld",
               lbl, f->path, d, info->dim_names[d], (long long)info->shape[d],
               (long long)s->global_shape[d]);
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
int sg_io_run_contiguous(const sg_nc_var_info *info, const int64_t *start,
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
int sg_io_same_type(int t, sg_dtype dt) {
  return (t == 5 && dt == SG_DTYPE_F32) || (t == 6 && dt == SG_DTYPE_F64) ||
         (t == 4 && dt == SG_DTYPE_I32) || (t == 10 && dt == SG_DTYPE_I64);
}

#if SG_HAVE_PNETCDF
int sg_io_host_little_endian(void) {
  const uint16_t one = 1;
  return *(const uint8_t *)&one == 1;
}

/* In-place byte swap of n elements of es bytes (4 or 8). Single-threaded
 * on purpose: it runs on one 8 MiB round at a time, in the cache, and an
 * OpenMP team per round cost more than the swap on an oversubscribed node
 * (measured: 58 MiB/s reads with 2 threads per rank at load 20). */
void sg_io_swap_in_place(void *buf, int64_t n, size_t es) {
  if (es == 4) {
    uint32_t *u = buf;
    for (int64_t i = 0; i < n; ++i) u[i] = __builtin_bswap32(u[i]);
  } else if (es == 8) {
    uint64_t *u = buf;
    for (int64_t i = 0; i < n; ++i) u[i] = __builtin_bswap64(u[i]);
  }
}
#endif

#if SG_HAVE_PNETCDF
/* Wait for nreq PnetCDF requests (statuses into sts). Collective: every
 * rank calls it, failed or not. The wait's failure, else the first
 * request's (of call what), goes to *lst unless that holds one already. */
void sg_io_pnc_wait_all(struct sg_nc_t_ *f, int nreq, int *reqs, int *sts,
                        const char *what, sg_status *lst) {
  int rc = ncmpi_wait_all(f->ncid, nreq, nreq ? reqs : NULL, nreq ? sts : NULL);
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
  int direct;   /* this job can go straight through MPI-IO */
  int64_t run0; /* its first element in the variable (direct) */
} wjob;

#if SG_HAVE_PNETCDF
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
  const int swap = sg_io_host_little_endian();
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
        sg_io_swap_in_place(bounce, cnt, es);
        src = bounce;
      }
      MPI_Status status;
      rc = MPI_File_write_at(f->dfh,
                             off + (MPI_Offset)((j->run0 + at) * (int64_t)es),
                             src, (int)((size_t)cnt * es), MPI_BYTE, &status);
      int got = 0, cls = MPI_SUCCESS;
      if (rc == MPI_SUCCESS)
        MPI_Get_count(&status, MPI_BYTE, &got);
      else
        MPI_Error_class(rc, &cls);
      if (rc != MPI_SUCCESS || got != (int)((size_t)cnt * es)) {
        lst = sg_error_set(SG_ERR_IO, __FILE__, __LINE__,
                           "MPI_File_write_at failed (%d of %lld bytes "
                           "written)",
                           got, (long long)((size_t)cnt * es));
        lst = sg_io_write_error(f, lst,
                                cls == MPI_ERR_NO_SPACE || cls == MPI_ERR_QUOTA,
                                NULL);
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
  if (!f)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
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
    lst = sg_io_info_by_id(f, varids[i], &info);
    if (lst == SG_OK) lst = sg_io_check_shard(f, &info, s, 1);
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
                (sg_io_same_type(info.nc_type, j->dt) &&
                 (int64_t)sg_dtype_size(j->dt) * j->numel <= INT_MAX &&
                 sg_io_run_contiguous(&info, s->start, s->count, &j->run0));
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
      SG_NC_TYPED_CALL(rc, j->dt, ncmpi_iput_vara, f->ncid, j->varid, j->pstart,
                       j->pcount, j->buf, &req);
      if (rc)
        lst = sg_error_pnetcdf(rc, "ncmpi_iput_vara", __FILE__, __LINE__);
      else
        reqs[nreq++] = req;
    }
    /* every rank takes part in the collective wait, failed or not */
    sg_status before = lst;
    sg_io_pnc_wait_all(f, nreq, reqs, reqs ? reqs + n : NULL,
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
            f, sg_error_netcdf(rc, "nc_put_vara", __FILE__, __LINE__), 0, NULL);
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
                           const sg_nc_shard *shards, const void *const *data) {
  return write_many(f, SG_OK, n, varids, shards, data);
}

sg_status sg_nc_write(sg_nc_t f, int varid, const sg_nc_shard *shard,
                      const void *data) {
  return write_many(f, SG_OK, 1, &varid, shard, &data);
}

/* Current number of records, agreed over the ranks (max). */
sg_status sg_io_record_count(struct sg_nc_t_ *f, int64_t *len) {
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
sg_status sg_io_frame_shard(struct sg_nc_t_ *f, int varid, int64_t frame,
                            const sg_nc_shard *s, int for_write,
                            sg_nc_shard *full, int64_t nrec) {
  sg_status st = SG_OK;
  sg_nc_var_info info;
  char lbl[SG_IO_NAME_BUF + 8];
  SG_TRY(sg_io_info_by_id(f, varid, &info));
  sg_io_var_label(f, varid, lbl, sizeof lbl);
  if (!info.unlimited0)
    SG_RAISE(SG_ERR_SHAPE,
             "variable %s in %s has no record (unlimited) dim "
             "first",
             lbl, f->path);
  if (!s || s->ndims + 1 != info.ndims || s->ndims + 1 > SG_NC_MAX_DIMS)
    SG_RAISE(SG_ERR_SHAPE,
             "variable %s in %s has %d dims: a frame shard needs "
             "%d, got %d",
             lbl, f->path, info.ndims, info.ndims - 1, s ? s->ndims : -1);
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
  if (!f)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "write_frame: file is NULL");
  memset(&full, 0, sizeof full);
  if (frame < 0) { /* append: the number of records, agreed */
    SG_TRY(sg_io_record_count(f, &nrec));
    frame = nrec;
  }
  sg_status lst = f->define_mode
                      ? sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                                     "write_frame: %s is in define mode",
                                     f->path)
                      : sg_io_frame_shard(f, varid, frame, shard, 1, &full,
                                          nrec);
  const void *d = data;
  SG_TRY(write_many(f, lst, 1, &varid, &full, &d));
  if (frame_out) *frame_out = frame;
fail:
  return st;
}
