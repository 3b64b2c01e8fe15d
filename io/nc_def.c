/* shardgrid — NetCDF files: define mode, attributes, inquiry (opening and
 * closing are in nc.c). */
#include "io_impl.h"

#include "sg_comm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- define mode ---------------------------------------------------------- */

/* Define-mode calls are local in both libraries (PnetCDF checks that the
 * ranks agree at enddef): an error is returned on the rank that sees it
 * and kept, and sg_nc_enddef/sg_nc_close agree on it. With identical
 * arguments on every rank (the contract) every rank sees the same error
 * anyway, without a message per call. */
static sg_status def_result(struct sg_nc_t_ *f, sg_status lst) {
  if (lst != SG_OK && f->def_err == SG_OK) {
    f->def_err = lst;
    snprintf(f->def_msg, sizeof f->def_msg, "%s", sg_last_error());
  }
  return lst;
}

static sg_status need_define(struct sg_nc_t_ *f, const char *what) {
  sg_status st = SG_OK;
  if (!f) SG_RAISE(SG_ERR_INVALID_ARG, "%s: file is NULL", what);
  if (!f->writable)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: %s is open read-only", what, f->path);
  if (!f->define_mode)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: %s is not in define mode (sg_nc_redef)",
             what, f->path);
fail:
  return st;
}

sg_status sg_nc_def_dim(sg_nc_t f, const char *name, int64_t len, int *dimid) {
  sg_status st = SG_OK;
  sg_status lst = need_define(f, "sg_nc_def_dim");
  if (lst == SG_OK && (!name || len < 0))
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "sg_nc_def_dim: bad name or length %lld",
                       (long long)len);
  if (!f) return lst;
  int rc = 0, id = -1;
  if (lst == SG_OK) {
#if SG_HAVE_PNETCDF
    if (f->backend == SG_NC_BACKEND_PNETCDF &&
        (rc = ncmpi_def_dim(f->ncid, name, (MPI_Offset)len, &id)))
      lst = sg_error_set(SG_ERR_PNETCDF, __FILE__, __LINE__,
                         "defining dim %s: %s", name, ncmpi_strerror(rc));
#endif
#if SG_HAVE_NETCDF_PAR
    if (f->backend == SG_NC_BACKEND_NETCDF4 &&
        (rc = nc_def_dim(f->ncid, name, (size_t)len, &id)))
      lst = sg_error_set(SG_ERR_NETCDF, __FILE__, __LINE__,
                         "defining dim %s: %s", name, nc_strerror(rc));
#endif
  }
  (void)rc;
  SG_TRY(def_result(f, lst));
  if (dimid) *dimid = id;
fail:
  return st;
}

/* Local (non-collective) lookup of a dim id by file name. */
static int lookup_dim(struct sg_nc_t_ *f, const char *name, int *id) {
  return SG_IO_CALL(f, inq_dimid, f->ncid, name, id);
}

sg_status sg_nc_def_var(sg_nc_t f, const char *name, sg_dtype dtype, int ndims,
                        const char *const *dim_names,
                        const sg_nc_var_opts *opts, int *varid) {
  sg_status st = SG_OK;
  sg_status lst = need_define(f, "sg_nc_def_var");
  if (!f) return lst;
  int dimids[SG_NC_MAX_DIMS];
  int id = -1, rc = 0;
  if (lst == SG_OK && (!name || ndims < 0 || ndims > SG_NC_MAX_DIMS ||
                       (ndims && !dim_names) || !sg_dtype_valid(dtype)))
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "sg_nc_def_var %s: bad name, ndims %d (max %d) or dtype",
                       name ? name : "(null)", ndims, SG_NC_MAX_DIMS);
  if (lst == SG_OK && dtype == SG_DTYPE_I64 && f->format == SG_NC_FORMAT_CDF2)
    lst = sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                       "variable %s: i64 needs CDF-5 or netCDF-4, not CDF-2",
                       name);
  for (int d = 0; lst == SG_OK && d < ndims; ++d) {
    const char *dn = dim_names[d] ? sg_io_map_to_file(f, dim_names[d]) : "";
    if (lookup_dim(f, dn, &dimids[d]))
      lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                         "variable %s: dim %s is not defined in %s", name,
                         dim_names[d] ? dim_names[d] : "(null)", f->path);
  }
  if (lst == SG_OK) {
#if SG_HAVE_PNETCDF
    if (f->backend == SG_NC_BACKEND_PNETCDF &&
        (rc = ncmpi_def_var(f->ncid, name, sg_io_nc_type(dtype), ndims, dimids,
                            &id)))
      lst = sg_error_set(SG_ERR_PNETCDF, __FILE__, __LINE__,
                         "defining variable %s: %s", name, ncmpi_strerror(rc));
#endif
#if SG_HAVE_NETCDF_PAR
    if (f->backend == SG_NC_BACKEND_NETCDF4 &&
        (rc = nc_def_var(f->ncid, name, sg_io_nc_type(dtype), ndims, dimids,
                         &id)))
      lst = sg_error_set(SG_ERR_NETCDF, __FILE__, __LINE__,
                         "defining variable %s: %s", name, nc_strerror(rc));
#endif
  }
  SG_TRY(def_result(f, lst));
#if SG_HAVE_NETCDF_PAR
  if (f->backend == SG_NC_BACKEND_NETCDF4) {
    int unlim = -1;
    nc_inq_unlimdim(f->ncid, &unlim);
    const int64_t *cnt = opts ? (opts->chunk ? opts->chunk : opts->slab_count)
                              : NULL;
    int want_chunk = cnt != NULL || (opts && opts->deflate > 0);
    int64_t ch[SG_NC_MAX_DIMS];
    for (int d = 0; d < ndims; ++d) {
      size_t len = 0;
      nc_inq_dimlen(f->ncid, dimids[d], &len);
      ch[d] = cnt ? (cnt[d] > 0 ? cnt[d] : 1) : (len ? (int64_t)len : 1);
      if (dimids[d] == unlim) ch[d] = 1;
    }
    if (want_chunk && opts && !opts->chunk && ndims > 0)
      SG_TRY(sg_io_allreduce_i64_max(f->comm, ch, ndims));
    if (want_chunk && ndims > 0) {
      size_t cs[SG_NC_MAX_DIMS];
      for (int d = 0; d < ndims; ++d) cs[d] = (size_t)ch[d];
      if ((rc = nc_def_var_chunking(f->ncid, id, NC_CHUNKED, cs)))
        lst = sg_error_netcdf(rc, "nc_def_var_chunking", __FILE__, __LINE__);
    }
    if (lst == SG_OK && opts && opts->deflate > 0) {
      if (opts->deflate > 9)
        lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                           "deflate level %d (0..9)", opts->deflate);
      else if ((rc = nc_def_var_deflate(f->ncid, id, opts->shuffle ? 1 : 0, 1,
                                        opts->deflate)))
        lst = sg_error_netcdf(rc, "nc_def_var_deflate", __FILE__, __LINE__);
    }
    if (lst == SG_OK &&
        (rc = nc_var_par_access(f->ncid, id, sg_io_var_access(f, id))))
      lst = sg_error_netcdf(rc, "nc_var_par_access", __FILE__, __LINE__);
    SG_TRY(def_result(f, lst));
  }
#else
  (void)opts;
#endif
  (void)rc;
  if (dtype == SG_DTYPE_BF16)
    SG_TRY(sg_nc_put_att_text(f, id, "sg_dtype", "bf16"));
  if (varid) *varid = id;
fail:
  return st;
}

sg_status sg_nc_def_coord(sg_nc_t f, const char *name, int64_t len,
                          const char *units, const char *standard_name,
                          const char *axis, const double *values, int *varid) {
  sg_status st = SG_OK;
  int id = -1;
  SG_TRY(sg_nc_def_dim(f, name, len, NULL));
  const char *dn[1] = {name};
  SG_TRY(sg_nc_def_var(f, name, SG_DTYPE_F64, 1, dn, NULL, &id));
  if (units) SG_TRY(sg_nc_put_att_text(f, id, "units", units));
  if (standard_name)
    SG_TRY(sg_nc_put_att_text(f, id, "standard_name", standard_name));
  if (axis) SG_TRY(sg_nc_put_att_text(f, id, "axis", axis));
  if (values && len > 0) {
    sg_nc_pending_coord *p = realloc(f->pending,
                                     (size_t)(f->npending + 1) * sizeof *p);
    sg_status lst = SG_OK;
    double *copy = malloc((size_t)len * sizeof(double));
    if (p) f->pending = p;
    if (!p || !copy) {
      free(copy);
      lst = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
    } else {
      memcpy(copy, values, (size_t)len * sizeof(double));
      f->pending[f->npending].varid = id;
      f->pending[f->npending].len = len;
      f->pending[f->npending].values = copy;
      ++f->npending;
    }
    SG_TRY(def_result(f, lst));
  }
  if (varid) *varid = id;
fail:
  return st;
}

/* ---- attributes ------------------------------------------------------------ */

sg_status sg_io_ensure_define(struct sg_nc_t_ *f, int *entered) {
  *entered = 0;
  if (f && f->writable && !f->define_mode) {
    sg_status st = sg_nc_redef(f);
    if (st == SG_OK) *entered = 1;
    return st;
  }
  return SG_OK;
}

sg_status sg_io_leave_define(struct sg_nc_t_ *f, int entered) {
  return entered ? sg_nc_enddef(f) : SG_OK;
}

static sg_status put_att_raw(struct sg_nc_t_ *f, int varid, const char *name,
                             int is_text, sg_dtype dtype, int64_t n,
                             const void *values) {
  sg_status st = SG_OK;
  int entered = 0;
  if (!f)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "attribute %s: file is NULL", name ? name : "(null)");
  SG_TRY(sg_io_ensure_define(f, &entered));
  sg_status lst = need_define(f, "attribute");
  if (lst == SG_OK && (!name || n < 0 || (n > 0 && !values)))
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "attribute: bad name or values");
  if (lst == SG_OK && !is_text &&
      (!sg_dtype_valid(dtype) || dtype == SG_DTYPE_BF16))
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "attribute %s: dtype %s not supported", name,
                       sg_dtype_name(dtype));
  if (lst == SG_OK && !is_text && dtype == SG_DTYPE_I64 &&
      f->format == SG_NC_FORMAT_CDF2)
    lst = sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                       "attribute %s: i64 needs CDF-5 or netCDF-4", name);
  int rc = 0;
  if (lst == SG_OK) {
    int t = sg_io_nc_type(dtype);
#if SG_HAVE_PNETCDF
    if (f->backend == SG_NC_BACKEND_PNETCDF) {
      if (is_text)
        rc = ncmpi_put_att_text(f->ncid, varid, name, (MPI_Offset)n, values);
      else if (dtype == SG_DTYPE_F32)
        rc = ncmpi_put_att_float(f->ncid, varid, name, t, n, values);
      else if (dtype == SG_DTYPE_F64)
        rc = ncmpi_put_att_double(f->ncid, varid, name, t, n, values);
      else if (dtype == SG_DTYPE_I32)
        rc = ncmpi_put_att_int(f->ncid, varid, name, t, n, values);
      else
        rc = ncmpi_put_att_longlong(f->ncid, varid, name, t, n, values);
      if (rc)
        lst = sg_error_set(SG_ERR_PNETCDF, __FILE__, __LINE__,
                           "attribute %s: %s", name, ncmpi_strerror(rc));
    }
#endif
#if SG_HAVE_NETCDF_PAR
    if (f->backend == SG_NC_BACKEND_NETCDF4) {
      if (is_text)
        rc = nc_put_att_text(f->ncid, varid, name, (size_t)n, values);
      else if (dtype == SG_DTYPE_F32)
        rc = nc_put_att_float(f->ncid, varid, name, t, (size_t)n, values);
      else if (dtype == SG_DTYPE_F64)
        rc = nc_put_att_double(f->ncid, varid, name, t, (size_t)n, values);
      else if (dtype == SG_DTYPE_I32)
        rc = nc_put_att_int(f->ncid, varid, name, t, (size_t)n, values);
      else
        rc = nc_put_att_longlong(f->ncid, varid, name, t, (size_t)n, values);
      if (rc)
        lst = sg_error_set(SG_ERR_NETCDF, __FILE__, __LINE__,
                           "attribute %s: %s", name, nc_strerror(rc));
    }
#endif
    (void)t;
  }
  (void)rc;
  st = def_result(f, lst);
  {
    sg_status st2 = sg_io_leave_define(f, entered);
    if (st == SG_OK) st = st2;
  }
fail:
  return st;
}

sg_status sg_nc_put_att_text(sg_nc_t f, int varid, const char *name,
                             const char *text) {
  return put_att_raw(f, varid, name, 1, SG_DTYPE_F64,
                     text ? (int64_t)strlen(text) : 0, text);
}

sg_status sg_nc_put_att(sg_nc_t f, int varid, const char *name, sg_dtype dtype,
                        int64_t n, const void *values) {
  return put_att_raw(f, varid, name, 0, dtype, n, values);
}

/* The type of a variable, locally. */
static int var_type(struct sg_nc_t_ *f, int varid, int *t) {
  return SG_IO_CALL(f, inq_vartype, f->ncid, varid, t);
}

sg_status sg_nc_put_cf(sg_nc_t f, int varid, const sg_nc_cf *cf) {
  sg_status st = SG_OK;
  int entered = 0;
  if (!f || !cf)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_nc_put_cf: NULL argument");
  SG_TRY(sg_io_ensure_define(f, &entered));
  if (cf->units) SG_TRY(sg_nc_put_att_text(f, varid, "units", cf->units));
  if (cf->long_name)
    SG_TRY(sg_nc_put_att_text(f, varid, "long_name", cf->long_name));
  if (cf->standard_name)
    SG_TRY(sg_nc_put_att_text(f, varid, "standard_name", cf->standard_name));
  if (cf->has_fill) {
    int t = 0;
    sg_status lst = SG_OK;
    if (var_type(f, varid, &t))
      lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                         "sg_nc_put_cf: no variable %d", varid);
    SG_TRY(def_result(f, lst));
    int ok = 0;
    sg_dtype dt = sg_io_dtype_of_nc(t, &ok);
    if (t == 5) {
      float v = (float)cf->fill_value;
      SG_TRY(sg_nc_put_att(f, varid, "_FillValue", SG_DTYPE_F32, 1, &v));
    } else if (t == 6) {
      SG_TRY(sg_nc_put_att(f, varid, "_FillValue", SG_DTYPE_F64, 1,
                           &cf->fill_value));
    } else if (t == 4) {
      int32_t v = (int32_t)cf->fill_value;
      SG_TRY(sg_nc_put_att(f, varid, "_FillValue", SG_DTYPE_I32, 1, &v));
    } else if (t == 10) {
      int64_t v = (int64_t)cf->fill_value;
      SG_TRY(sg_nc_put_att(f, varid, "_FillValue", SG_DTYPE_I64, 1, &v));
    } else {
      (void)dt;
      SG_TRY(
          def_result(f, sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                                     "_FillValue for nc type %d", t)));
    }
  }
  SG_TRY(sg_io_leave_define(f, entered));
  entered = 0;
fail:
  if (entered) sg_io_leave_define(f, entered);
  return st;
}

sg_status sg_nc_put_global_cf(sg_nc_t f, const char *title, const char *history,
                              const char *conventions) {
  sg_status st = SG_OK;
  int entered = 0;
  if (!f)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_nc_put_global_cf: file is NULL");
  SG_TRY(sg_io_ensure_define(f, &entered));
  SG_TRY(sg_nc_put_att_text(f, SG_NC_GLOBAL, "Conventions",
                            conventions ? conventions : "CF-1.8"));
  if (title) SG_TRY(sg_nc_put_att_text(f, SG_NC_GLOBAL, "title", title));
  if (history) SG_TRY(sg_nc_put_att_text(f, SG_NC_GLOBAL, "history", history));
  SG_TRY(sg_io_leave_define(f, entered));
  entered = 0;
fail:
  if (entered) sg_io_leave_define(f, entered);
  return st;
}

sg_status sg_nc_enddef(sg_nc_t f) {
  sg_status st = SG_OK;
  sg_status lst = need_define(f, "sg_nc_enddef");
  if (!f) return lst;
  if (lst == SG_OK && f->def_err != SG_OK) {
    lst = f->def_err;
    sg_error_set_raw(f->def_msg);
  }
  f->def_err = SG_OK;
  SG_TRY(sg_io_agree(f->comm, lst));
  int rc = 0;
#if SG_HAVE_PNETCDF
  if (f->backend == SG_NC_BACKEND_PNETCDF) {
    /* The first enddef lays the file out with free header space; later
     * ones keep the layout as long as the header still fits. */
    if (f->header_reserve > 0 && !f->ever_enddef)
      rc = ncmpi__enddef(f->ncid, (MPI_Offset)f->header_reserve, 512, 0, 4);
    else
      rc = ncmpi_enddef(f->ncid);
    if (rc) lst = sg_error_pnetcdf(rc, "ncmpi_enddef", __FILE__, __LINE__);
  }
#endif
#if SG_HAVE_NETCDF_PAR
  if (f->backend == SG_NC_BACKEND_NETCDF4 && (rc = nc_enddef(f->ncid)))
    lst = sg_error_netcdf(rc, "nc_enddef", __FILE__, __LINE__);
#endif
  (void)rc;
  /* enddef writes the header: name the file, and a full disk */
  if (lst != SG_OK) lst = sg_io_write_error(f, lst, 0, "writing the header of");
#if SG_HAVE_PNETCDF
  /* per-rank create: the shadows' layout must be the file's (it is, for
   * the same define calls and hints, unless a layer aligns by the file
   * system); otherwise the file is reopened collectively */
  int lay[2] = {0, 0};
  if (f->shadow && lst == SG_OK) {
    uint32_t h = 2166136261u;
    int nv = 0;
    MPI_Offset hx = 0;
    ncmpi_inq_nvars(f->ncid, &nv);
    ncmpi_inq_header_extent(f->ncid, &hx);
    for (int v = -1; v < nv; ++v) {
      MPI_Offset off = hx;
      if (v >= 0) ncmpi_inq_varoffset(f->ncid, v, &off);
      for (int k = 0; k < 8; ++k)
        h = (h ^ (uint32_t)((off >> (8 * k)) & 255)) * 16777619u;
    }
    lay[0] = (int)(h & 0x3fffffff);
    lay[1] = -lay[0];
  }
  SG_TRY(sg_io_agree_max(f->comm, lst, lay, 2));
  f->define_mode = 0;
  f->ever_enddef = 1;
  if (f->shadow && lay[0] != -lay[1]) SG_TRY(sg_io_shadow_promote(f));
#else
  SG_TRY(sg_io_agree(f->comm, lst));
  f->define_mode = 0;
  f->ever_enddef = 1;
#endif
  /* coordinate values: rank 0 writes, the others take part with nothing */
  if (f->npending > 0) {
    int *ids = malloc((size_t)f->npending * sizeof(int));
    sg_nc_shard *ss = malloc((size_t)f->npending * sizeof(sg_nc_shard));
    const void **vals = malloc((size_t)f->npending * sizeof(void *));
    int n = (ids && ss && vals) ? f->npending : 0;
    for (int i = 0; i < n; ++i) {
      sg_nc_shard_split(1, &f->pending[i].len, SG_DTYPE_F64, 0, 1, 0, &ss[i]);
      if (f->rank != 0) ss[i].count[0] = 0;
      ids[i] = f->pending[i].varid;
      vals[i] = f->pending[i].values;
    }
    /* an allocation failure here writes nothing and is agreed below */
    st = sg_nc_write_many(f, n, ids, ss, vals);
    free(ids);
    free(ss);
    free(vals);
    if (st == SG_OK && n != f->npending)
      st = sg_io_agree(f->comm, sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__,
                                             "out of memory"));
    else if (st == SG_OK)
      st = sg_io_agree(f->comm, SG_OK);
  }
fail:
  if (f) {
    for (int i = 0; i < f->npending; ++i) free(f->pending[i].values);
    free(f->pending);
    f->pending = NULL;
    f->npending = 0;
  }
  return sg_io_mark_failed(f, st);
}

sg_status sg_nc_redef(sg_nc_t f) {
  sg_status st = SG_OK;
  sg_status lst = SG_OK;
  if (!f)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_nc_redef: file is NULL");
  if (!f->writable)
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "%s is open read-only", f->path);
  else if (f->define_mode)
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "%s is already in define mode", f->path);
  SG_TRY(sg_io_agree(f->comm, lst));
  int rc = 0;
#if SG_HAVE_PNETCDF
  if (f->backend == SG_NC_BACKEND_PNETCDF && (rc = ncmpi_redef(f->ncid)))
    lst = sg_error_pnetcdf(rc, "ncmpi_redef", __FILE__, __LINE__);
#endif
#if SG_HAVE_NETCDF_PAR
  if (f->backend == SG_NC_BACKEND_NETCDF4 && (rc = nc_redef(f->ncid)))
    lst = sg_error_netcdf(rc, "nc_redef", __FILE__, __LINE__);
#endif
  (void)rc;
  SG_TRY(sg_io_agree(f->comm, lst));
  f->define_mode = 1;
fail:
  return st;
}

/* ---- inquiry ---------------------------------------------------------------- */

#if !SG_HAVE_PNETCDF && !SG_HAVE_NETCDF
int sg_io_no_library(int ncid, ...) {
  (void)ncid;
  return -1;
}
#endif

int sg_io_inq_dim(const struct sg_nc_t_ *f, int dimid, char *name,
                  int64_t *len) {
  int rc = -1;
#if SG_HAVE_PNETCDF
  if (f->backend == SG_NC_BACKEND_PNETCDF) {
    MPI_Offset l = 0;
    rc = ncmpi_inq_dim(f->ncid, dimid, name, &l);
    *len = (int64_t)l;
  }
#endif
#if SG_HAVE_NETCDF
  if (f->backend != SG_NC_BACKEND_PNETCDF) {
    size_t l = 0;
    rc = nc_inq_dim(f->ncid, dimid, name, &l);
    *len = (int64_t)l;
  }
#endif
  return rc;
}

sg_status sg_nc_inq_var(sg_nc_t f, const char *name, sg_nc_var_info *info) {
  sg_status st = SG_OK;
  if (!f || !name || !info)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_nc_inq_var: NULL argument");
  memset(info, 0, sizeof *info);
  int id = -1, nd = 0, t = 0, unlim = -1;
  int dimids[SG_NC_MAX_DIMS];
  int rc = SG_IO_CALL(f, inq_varid, f->ncid, name, &id);
  if (!rc) rc = SG_IO_CALL(f, inq_varndims, f->ncid, id, &nd);
  if (!rc && nd <= SG_NC_MAX_DIMS) {
    rc = SG_IO_CALL(f, inq_var, f->ncid, id, NULL, &t, NULL, dimids, NULL);
    SG_IO_CALL(f, inq_unlimdim, f->ncid, &unlim);
    for (int d = 0; !rc && d < nd; ++d) {
      char dn[SG_IO_NAME_BUF] = "";
      rc = sg_io_inq_dim(f, dimids[d], dn, &info->shape[d]);
      snprintf(info->dim_names[d], SG_NC_NAME_MAX, "%s",
               sg_io_map_to_user(f, dn));
    }
  }
  if (id < 0 || rc == -1)
    SG_RAISE(SG_ERR_INVALID_ARG, "no variable '%s' in %s", name, f->path);
  if (nd > SG_NC_MAX_DIMS)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "variable %s in %s has %d dims (max %d)",
             name, f->path, nd, SG_NC_MAX_DIMS);
  if (rc)
    SG_RAISE(SG_ERR_IO, "cannot inquire variable %s in %s (code %d)", name,
             f->path, rc);
  int ok = 0;
  info->varid = id;
  info->ndims = nd;
  info->nc_type = t;
  info->dtype = sg_io_dtype_of_nc(t, &ok);
  info->unlimited0 = nd > 0 && dimids[0] == unlim;
  if (!ok)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "variable %s in %s has nc type %d", name,
             f->path, t);
  if (t == 3 && sg_nc_has_att(f, id, "sg_dtype")) {
    char buf[16];
    if (sg_nc_get_att_text(f, id, "sg_dtype", buf, sizeof buf) == SG_OK &&
        strcmp(buf, "bf16") == 0)
      info->dtype = SG_DTYPE_BF16;
  }
fail:
  return st;
}

sg_status sg_nc_inq_dim(sg_nc_t f, const char *name, int64_t *len) {
  sg_status st = SG_OK;
  if (!f || !name || !len)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_nc_inq_dim: NULL argument");
  int id = -1;
  if (lookup_dim(f, sg_io_map_to_file(f, name), &id))
    SG_RAISE(SG_ERR_INVALID_ARG, "no dim '%s' in %s", name, f->path);
  sg_io_inq_dim(f, id, NULL, len);
fail:
  return st;
}

static int att_inq(struct sg_nc_t_ *f, int varid, const char *name, int *t,
                   int64_t *len) {
  int rc = -1;
#if SG_HAVE_PNETCDF
  if (f->backend == SG_NC_BACKEND_PNETCDF) {
    MPI_Offset l = 0;
    rc = ncmpi_inq_att(f->ncid, varid, name, t, &l);
    *len = (int64_t)l;
  }
#endif
#if SG_HAVE_NETCDF
  if (f->backend != SG_NC_BACKEND_PNETCDF) {
    size_t l = 0;
    rc = nc_inq_att(f->ncid, varid, name, t, &l);
    *len = (int64_t)l;
  }
#endif
  return rc;
}

int sg_nc_has_att(sg_nc_t f, int varid, const char *name) {
  int t = 0;
  int64_t len = 0;
  return f && name && att_inq(f, varid, name, &t, &len) == 0;
}

sg_status sg_nc_inq_att(sg_nc_t f, int varid, const char *name, int64_t *len) {
  sg_status st = SG_OK;
  int t = 0;
  if (!f || !name || !len)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_nc_inq_att: NULL argument");
  if (att_inq(f, varid, name, &t, len))
    SG_RAISE(SG_ERR_INVALID_ARG, "no attribute %s in %s", name, f->path);
fail:
  return st;
}

sg_status sg_nc_get_att_text(sg_nc_t f, int varid, const char *name, char *buf,
                             size_t cap) {
  sg_status st = SG_OK;
  char *tmp = NULL;
  int t = 0, rc = -1;
  int64_t len = 0;
  if (!f || !name || !buf || cap == 0)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_nc_get_att_text: bad argument");
  if (att_inq(f, varid, name, &t, &len))
    SG_RAISE(SG_ERR_INVALID_ARG, "no attribute %s in %s", name, f->path);
  if (t != 2) SG_RAISE(SG_ERR_INVALID_ARG, "attribute %s is not text", name);
  tmp = malloc((size_t)len + 1);
  if (!tmp) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  rc = SG_IO_CALL(f, get_att_text, f->ncid, varid, name, tmp);
  if (rc) SG_RAISE(SG_ERR_IO, "cannot read attribute %s (code %d)", name, rc);
  tmp[len] = '\0';
  snprintf(buf, cap, "%s", tmp);
fail:
  free(tmp);
  return st;
}

static sg_status get_att_num(struct sg_nc_t_ *f, int varid, const char *name,
                             int as_int, void *values, int64_t cap,
                             int64_t *n) {
  sg_status st = SG_OK;
  void *tmp = NULL;
  int t = 0, rc = -1;
  int64_t len = 0;
  if (!f || !name || (cap > 0 && !values))
    SG_RAISE(SG_ERR_INVALID_ARG, "get attribute: bad argument");
  if (att_inq(f, varid, name, &t, &len))
    SG_RAISE(SG_ERR_INVALID_ARG, "no attribute %s in %s", name, f->path);
  if (t == 2) SG_RAISE(SG_ERR_INVALID_ARG, "attribute %s is text", name);
  tmp = malloc((size_t)(len ? len : 1) * 8);
  if (!tmp) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  rc = as_int ? SG_IO_CALL(f, get_att_longlong, f->ncid, varid, name, tmp)
              : SG_IO_CALL(f, get_att_double, f->ncid, varid, name, tmp);
  if (rc && rc != -60 /* NC_ERANGE: values converted with clipping */)
    SG_RAISE(SG_ERR_IO, "cannot read attribute %s (code %d)", name, rc);
  memcpy(values, tmp, (size_t)(len < cap ? len : cap) * 8);
  if (n) *n = len;
fail:
  free(tmp);
  return st;
}

sg_status sg_nc_get_att_f64(sg_nc_t f, int varid, const char *name,
                            double *values, int64_t cap, int64_t *n) {
  return get_att_num(f, varid, name, 0, values, cap, n);
}

sg_status sg_nc_get_att_i64(sg_nc_t f, int varid, const char *name,
                            int64_t *values, int64_t cap, int64_t *n) {
  return get_att_num(f, varid, name, 1, values, cap, n);
}
