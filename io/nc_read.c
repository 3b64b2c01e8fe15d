/* shardgrid — reading sharded fields (hyperslabs, halos, periodic wrap,
 * unpacking and masking). Shard checks and writing are in nc_rw.c. */
#include "io_impl.h"

#include "sg_device.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


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

/* Can this rank's read of variable info (nread boxes, read type rt) go
 * straight through MPI-IO? Local. */
static int direct_ok(const struct sg_nc_t_ *f, const sg_nc_var_info *info,
                     int nread, const rbox *boxes, const void *out,
                     sg_dtype rt) {
  if (f->backend != SG_NC_BACKEND_PNETCDF || !f->direct_read || nread > 1)
    return 0;
  if (!sg_io_same_type(info->nc_type, rt)) return 0;
  for (int d = 0; d < info->ndims; ++d)
    if (info->shape[d] > INT_MAX) return 0;
  if (nread == 1 && (boxes[0].buf != out || boxes[0].numel > INT_MAX)) return 0;
  return 1;
}

/* A direct read's rounds are SG_IO_DIRECT_CHUNK bytes: each round's bytes
 * are swapped right after they arrive, while they are still in the cache
 * (a separate swap pass over a 256 MiB buffer costs as much as a third of
 * the read). */

static int box_contiguous(const sg_nc_var_info *info, const rbox *b,
                          int64_t *first) {
  return sg_io_run_contiguous(info, b->fstart, b->len, first);
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
  const int swap = sg_io_host_little_endian();
  for (int64_t at = 0; at < count && lst == SG_OK; at += per) {
    const int cnt = (int)(count - at < per ? count - at : per);
    char *dst = (char *)b->buf + (size_t)at * es;
    MPI_Status status;
    if (indep)
      rc = MPI_File_read_at(f->dfh,
                            disp + (MPI_Offset)((run0 + at) * (int64_t)es), dst,
                            cnt, elem, &status);
    else
      rc = MPI_File_read(f->dfh, dst, cnt, elem, &status);
    if (rc != MPI_SUCCESS) {
      lst = sg_error_set(SG_ERR_IO, __FILE__, __LINE__, "%s on %s failed",
                         indep ? "MPI_File_read_at" : "MPI_File_read", f->path);
    } else {
      int got = 0;
      MPI_Get_count(&status, elem, &got);
      if (got != cnt)
        lst = sg_error_set(SG_ERR_CORRUPT, __FILE__, __LINE__,
                           "%s: short read (%d of %d elements): truncated "
                           "file?",
                           f->path, got, cnt);
      else if (swap)
        sg_io_swap_in_place(dst, cnt, es);
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
static int dim_segments(int64_t a, int64_t b, int64_t n, int periodic, int flip,
                        rseg *seg, int *outside) {
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
  if (!f)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "read: file is NULL");
  char lbl[SG_IO_NAME_BUF + 8];
  /* reading back a file being created with per-rank handles: the others'
   * handles see only their header copies */
  if (f->shadow && !f->define_mode) SG_TRY(sg_io_shadow_promote(f));
  sg_io_var_label(f, varid, lbl, sizeof lbl);
  if (f->define_mode)
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "read: %s is in define mode", f->path);
  if (lst == SG_OK) lst = sg_io_info_by_id(f, varid, &info);
  if (lst == SG_OK) lst = sg_io_check_shard(f, &info, s, 0);
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
      if (periodic[d] &&
          (o.halo_lo[d] > info.shape[d] || o.halo_hi[d] > info.shape[d])) {
        lst = sg_error_set(SG_ERR_HALO, __FILE__, __LINE__,
                           "read %s: periodic halo (%lld, %lld) wider than "
                           "dim %s (%lld)",
                           lbl, (long long)o.halo_lo[d],
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
    if (lst == SG_OK && !o.no_mask &&
        sg_nc_has_att(f, varid, "missing_value")) {
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
                           "float output, not %s",
                           lbl, sg_dtype_name(s->dtype));
    }
    x.masked_value = o.masked_value;
    x.nonfinite = !o.no_mask && o.mask_nonfinite;
  }
  if (lst == SG_OK && o.flip_lat && lat_dim >= 0 &&
      SG_IO_CALL(f, inq_varid, f->ncid, sg_io_map_to_file(f, "lat"), &lat_cvid))
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
      sg_io_pnc_wait_all(f, nreq, reqs,
                         reqs ? reqs + (nread ? nread : 1) : NULL,
                         "ncmpi_iget_vara (request)", &lst);
    }
    free(reqs);
  }
#endif
#if SG_HAVE_NETCDF
  if (f->backend != SG_NC_BACKEND_PNETCDF) {
    int nmax = f->backend == SG_NC_BACKEND_NETCDF4 && !f->local_handle
                   ? flags[0]
                   : nread;
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
  if (!f)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "read_frame: file is NULL");
  if (f->shadow && !f->define_mode) SG_TRY(sg_io_shadow_promote(f));
  SG_TRY(sg_io_record_count(f, &nrec));
  sg_status lst = sg_io_frame_shard(f, varid, frame, s, 0, &full, nrec);
  if (!f->local_handle)
    SG_TRY(sg_io_agree(f->comm, lst));
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

sg_status sg_nc_read_lat(sg_nc_t f, int64_t nlat, double *lat, int *found) {
  sg_status st = SG_OK;
  sg_nc_var_info li;
  *found = 0;
  if (!f || !lat || nlat < 1)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "read_lat: no file, buffer or latitudes");
  const char *name = sg_io_map_to_file(f, "lat");
  if (sg_nc_inq_var(f, name, &li) != SG_OK) {
    sg_clear_error();
    return SG_OK; /* no coordinate: the same verdict on every rank */
  }
  if (li.ndims != 1 || li.shape[0] != nlat)
    SG_RAISE(SG_ERR_SHAPE,
             "the latitude coordinate %s is not 1-D of length %lld (the lat "
             "dim's)",
             name, (long long)nlat);
  sg_nc_shard sh;
  SG_TRY(sg_nc_shard_split(1, &nlat, SG_DTYPE_F64, 0, 1, 0, &sh));
  sg_nc_read_opts ro = sg_nc_read_opts_default();
  ro.no_mask = 1;
  SG_TRY(sg_nc_read(f, li.varid, &sh, &ro, lat, NULL));
  *found = 1;
fail:
  return st;
}
