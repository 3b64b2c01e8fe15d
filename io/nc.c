/* shardgrid — NetCDF files: backends, open/create, define mode, attributes,
 * inquiry. Reading and writing shards is in nc_rw.c. */
#include "io_impl.h"

#include "sg_comm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- names, types, maps --------------------------------------------------- */

static const char *const backend_names[SG_NC_BACKEND_COUNT] = {
    "auto", "pnetcdf", "netcdf4", "serial"};

const char *sg_nc_backend_name(sg_nc_backend b) {
  return (b >= 0 && b < SG_NC_BACKEND_COUNT) ? backend_names[b] : "invalid";
}

sg_status sg_nc_backend_parse(const char *name, sg_nc_backend *b) {
  sg_status st = SG_OK;
  for (int i = 0; name && i < SG_NC_BACKEND_COUNT; ++i)
    if (strcmp(name, backend_names[i]) == 0) {
      *b = (sg_nc_backend)i;
      return SG_OK;
    }
  SG_RAISE(SG_ERR_INVALID_ARG,
           "unknown I/O backend '%s' (auto, pnetcdf, netcdf4, serial)",
           name ? name : "(null)");
fail:
  return st;
}

int sg_nc_backend_available(sg_nc_backend b, int for_writing) {
  switch (b) {
  case SG_NC_BACKEND_AUTO:
    return SG_HAVE_PNETCDF || SG_HAVE_NETCDF_PAR ||
           (!for_writing && SG_HAVE_NETCDF);
  case SG_NC_BACKEND_PNETCDF: return SG_HAVE_PNETCDF;
  case SG_NC_BACKEND_NETCDF4: return SG_HAVE_NETCDF_PAR;
  case SG_NC_BACKEND_SERIAL: return !for_writing && SG_HAVE_NETCDF;
  default: return 0;
  }
}

sg_nc_create_opts sg_nc_create_opts_default(void) {
  sg_nc_create_opts o;
  memset(&o, 0, sizeof o);
  o.backend = SG_NC_BACKEND_AUTO;
  o.format = SG_NC_FORMAT_AUTO;
  o.header_reserve = 64 * 1024;
  return o;
}

sg_nc_open_opts sg_nc_open_opts_default(void) {
  sg_nc_open_opts o;
  memset(&o, 0, sizeof o);
  return o;
}

int sg_io_nc_type(sg_dtype dt) {
  switch (dt) {
  case SG_DTYPE_F32: return 5;  /* NC_FLOAT */
  case SG_DTYPE_F64: return 6;  /* NC_DOUBLE */
  case SG_DTYPE_I32: return 4;  /* NC_INT */
  case SG_DTYPE_I64: return 10; /* NC_INT64 */
  case SG_DTYPE_BF16: return 3; /* NC_SHORT, bits */
  default: return 0;
  }
}

sg_dtype sg_io_dtype_of_nc(int t, int *ok) {
  *ok = 1;
  switch (t) {
  case 5: return SG_DTYPE_F32;
  case 6: return SG_DTYPE_F64;
  case 1: case 2: case 3: case 4: case 7: case 8: return SG_DTYPE_I32;
  case 9: case 10: case 11: return SG_DTYPE_I64;
  default: *ok = 0; return SG_DTYPE_F64;
  }
}

const char *sg_io_map_to_user(const struct sg_nc_t_ *f, const char *name) {
  for (int i = 0; i < f->nmap; ++i)
    if (strcmp(f->map_from[i], name) == 0) return f->map_to[i];
  return name;
}

const char *sg_io_map_to_file(const struct sg_nc_t_ *f, const char *name) {
  for (int i = 0; i < f->nmap; ++i)
    if (strcmp(f->map_to[i], name) == 0) return f->map_from[i];
  return name;
}

static sg_status parse_map(struct sg_nc_t_ *f, const char *text) {
  sg_status st = SG_OK;
  const char *p = text;
  while (p && *p) {
    while (*p == ' ' || *p == ',') ++p;
    if (!*p) break;
    const char *eq = strchr(p, '=');
    const char *end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    if (!eq || eq > end || eq == p || eq + 1 == end)
      SG_RAISE(SG_ERR_CONFIG, "dim_map: expected FROM=to in '%.*s'",
               (int)(end - p), p);
    if (f->nmap >= SG_NC_MAP_MAX)
      SG_RAISE(SG_ERR_CONFIG, "dim_map: more than %d entries", SG_NC_MAP_MAX);
    size_t la = (size_t)(eq - p), lb = (size_t)(end - eq - 1);
    while (la && p[la - 1] == ' ') --la;
    while (lb && eq[lb] == ' ') --lb;
    if (la >= SG_NC_NAME_MAX || lb >= SG_NC_NAME_MAX)
      SG_RAISE(SG_ERR_CONFIG, "dim_map: name too long");
    memcpy(f->map_from[f->nmap], p, la);
    f->map_from[f->nmap][la] = '\0';
    const char *q = eq + 1;
    while (*q == ' ') ++q, --lb;
    memcpy(f->map_to[f->nmap], q, lb);
    f->map_to[f->nmap][lb] = '\0';
    ++f->nmap;
    p = end;
  }
fail:
  return st;
}

#if SG_HAVE_PNETCDF || SG_HAVE_NETCDF
/* Turn a library error code on open/create into a clear status. */
/* The error of a failed open or create. sys: the errno the library's call
 * left (0: none or not known), named first when it is a file system's
 * refusal: the libraries' codes hide it (PnetCDF reports a read-only file
 * system as "Write to read only", a full disk as an unknown error). */
static sg_status open_error(int rc, int pnc, const char *what,
                            const char *path, int line, int sys) {
  (void)pnc;
  if (sys == EROFS || sys == EACCES || sys == ENOSPC || sys == EDQUOT) {
    const char *lib = "";
#if SG_HAVE_PNETCDF
    if (pnc) lib = ncmpi_strerror(rc);
#endif
#if SG_HAVE_NETCDF
    if (!pnc) lib = nc_strerror(rc);
#endif
    return sg_error_set(SG_ERR_IO, __FILE__, line, "%s %s: %s (%s, code %d)",
                        what, path, strerror(sys), lib, rc);
  }
#if SG_HAVE_PNETCDF
  if (pnc && rc == NC_ENOENT)
    return sg_error_set(SG_ERR_IO, __FILE__, line, "%s %s: no such file",
                        what, path);
  if (pnc && rc == NC_EEXIST)
    return sg_error_set(SG_ERR_IO, __FILE__, line,
                        "%s %s: file exists (set overwrite to replace it)",
                        what, path);
#endif
#if SG_HAVE_NETCDF
  if (!pnc && rc == ENOENT)
    return sg_error_set(SG_ERR_IO, __FILE__, line, "%s %s: no such file",
                        what, path);
  if (!pnc && (rc == EEXIST || rc == NC_EEXIST))
    return sg_error_set(SG_ERR_IO, __FILE__, line,
                        "%s %s: file exists (set overwrite to replace it)",
                        what, path);
#endif
  const char *text = "";
#if SG_HAVE_PNETCDF
  if (pnc) text = ncmpi_strerror(rc);
#endif
#if SG_HAVE_NETCDF
  if (!pnc) text = nc_strerror(rc);
#endif
  return sg_error_set(pnc ? SG_ERR_PNETCDF : SG_ERR_NETCDF, __FILE__, line,
                      "%s %s: %s (code %d)", what, path, text, rc);
}
#endif

static sg_status file_alloc(MPI_Comm comm, const char *path,
                            struct sg_nc_t_ **out) {
  sg_status st = SG_OK;
  struct sg_nc_t_ *f = calloc(1, sizeof *f);
  if (!f) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  f->comm = MPI_COMM_NULL;
  f->ncid = -1;
  f->info = MPI_INFO_NULL;
  f->dfh = MPI_FILE_NULL;
  if (!path || strlen(path) >= sizeof f->path)
    SG_RAISE(SG_ERR_INVALID_ARG, "file path missing or too long");
  snprintf(f->path, sizeof f->path, "%s", path);
  SG_TRY(sg_io_comm_dup(comm, &f->comm));
  MPI_Comm_rank(f->comm, &f->rank);
  MPI_Comm_size(f->comm, &f->size);
  *out = f;
  return SG_OK;
fail:
  if (f) {
    if (f->comm != MPI_COMM_NULL) MPI_Comm_free(&f->comm);
    free(f);
  }
  return st;
}

static void file_free(struct sg_nc_t_ *f) {
  if (!f) return;
  free(f->var_end);
  for (int i = 0; i < f->npending; ++i) free(f->pending[i].values);
  free(f->pending);
  if (f->info != MPI_INFO_NULL) MPI_Info_free(&f->info);
  if (f->comm != MPI_COMM_NULL) MPI_Comm_free(&f->comm);
  free(f);
}

/* ---- hints ------------------------------------------------------------------ */

sg_status sg_io_hints_info(const char *hints, MPI_Info *info) {
  sg_status st = SG_OK;
  MPI_Info in = MPI_INFO_NULL;
  *info = MPI_INFO_NULL;
  const char *p = hints;
  while (p && *p) {
    while (*p == ' ' || *p == ',' || *p == ';') ++p;
    if (!*p) break;
    size_t n = strcspn(p, ",;");
    const char *eq = memchr(p, '=', n);
    char key[MPI_MAX_INFO_KEY + 1], val[256];
    if (!eq || eq == p || (size_t)(eq - p) > MPI_MAX_INFO_KEY ||
        n - (size_t)(eq - p) - 1 >= sizeof val || eq + 1 == p + n)
      SG_RAISE(SG_ERR_CONFIG, "I/O hints: expected key=value in '%.*s'",
               (int)n, p);
    size_t lk = (size_t)(eq - p), lv = n - lk - 1;
    while (lk && p[lk - 1] == ' ') --lk;
    const char *v = eq + 1;
    while (lv && *v == ' ') ++v, --lv;
    while (lv && v[lv - 1] == ' ') --lv;
    memcpy(key, p, lk);
    key[lk] = '\0';
    memcpy(val, v, lv);
    val[lv] = '\0';
    if (in == MPI_INFO_NULL) SG_MPI(MPI_Info_create(&in));
    SG_MPI(MPI_Info_set(in, key, val));
    p += n;
  }
  *info = in;
  return SG_OK;
fail:
  if (in != MPI_INFO_NULL) MPI_Info_free(&in);
  return st;
}

/* ---- create / open / close ------------------------------------------------ */

#if SG_HAVE_NETCDF_PAR
/* netCDF-4 access mode of a variable: independent when asked, except where
 * the library needs collective access (writes to a record variable, which
 * may extend the unlimited dim, and to a filtered (deflated) one). */
static int var_access(const struct sg_nc_t_ *f, int varid) {
  if (!f->independent) return NC_COLLECTIVE;
  if (!f->writable) return NC_INDEPENDENT;
  int nd = 0, unlim = -1, dimids[SG_NC_MAX_DIMS], deflate = 0;
  if (nc_inq_varndims(f->ncid, varid, &nd) || nd > SG_NC_MAX_DIMS ||
      nc_inq_vardimid(f->ncid, varid, dimids))
    return NC_COLLECTIVE;
  nc_inq_unlimdim(f->ncid, &unlim);
  for (int d = 0; d < nd; ++d)
    if (dimids[d] == unlim) return NC_COLLECTIVE;
  if (nc_inq_var_deflate(f->ncid, varid, NULL, &deflate, NULL) == 0 &&
      deflate)
    return NC_COLLECTIVE;
  return NC_INDEPENDENT;
}
#endif

sg_status sg_nc_create(MPI_Comm comm, const char *path,
                       const sg_nc_create_opts *opts, sg_nc_t *file) {
  sg_status st = SG_OK;
  struct sg_nc_t_ *f = NULL;
  sg_nc_create_opts o = opts ? *opts : sg_nc_create_opts_default();
  if (!file) return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                                 "sg_nc_create: file is NULL");
  *file = NULL;
  sg_status lst = file_alloc(comm, path, &f);
  if (o.backend == SG_NC_BACKEND_AUTO)
    o.backend = SG_HAVE_PNETCDF ? SG_NC_BACKEND_PNETCDF
                                : SG_NC_BACKEND_NETCDF4;
  if (lst == SG_OK && o.atomic) {
    /* written under a temporary name, renamed at a good close */
    if (strlen(path) + sizeof ".partial" > sizeof f->path)
      lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                         "file path too long");
    else {
      f->atomic = 1;
      snprintf(f->final_path, sizeof f->final_path, "%s", path);
      snprintf(f->path, sizeof f->path, "%s.partial", path);
    }
  }
  if (lst != SG_OK)
    ;
  else if (f->atomic && !o.overwrite && f->rank == 0 &&
           access(f->final_path, F_OK) == 0)
    lst = sg_error_set(SG_ERR_IO, __FILE__, __LINE__,
                       "cannot create %s: file exists (set overwrite to "
                       "replace it)", f->final_path);
  else if (o.backend == SG_NC_BACKEND_SERIAL)
    lst = sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                       "the serial netCDF backend reads only; create %s with "
                       "pnetcdf or netcdf4", f->path);
  else if (!sg_nc_backend_available(o.backend, 1))
    lst = sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                       "I/O backend %s is not built into this shardgrid",
                       sg_nc_backend_name(o.backend));
  else if (o.backend == SG_NC_BACKEND_PNETCDF &&
           o.format == SG_NC_FORMAT_NETCDF4)
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "PnetCDF writes CDF-2/CDF-5, not netCDF-4");
  else if (o.backend == SG_NC_BACKEND_NETCDF4 &&
           (o.format == SG_NC_FORMAT_CDF2 || o.format == SG_NC_FORMAT_CDF5))
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "use the pnetcdf backend for CDF-2/CDF-5 files");
  else if (o.header_reserve < 0)
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "header_reserve must be >= 0");
  if (lst == SG_OK) lst = sg_io_hints_info(o.hints, &f->info);
  SG_TRY(sg_io_agree(comm, lst));
  f->independent = o.independent != 0;
  f->direct_write = !o.no_direct_write;
  f->backend = o.backend;
  f->writable = 1;
  f->define_mode = 1;
  f->header_reserve = o.header_reserve;
  int rc = 0;
#if SG_HAVE_PNETCDF
  if (f->backend == SG_NC_BACKEND_PNETCDF) {
    f->format = o.format == SG_NC_FORMAT_CDF2 ? SG_NC_FORMAT_CDF2
                                              : SG_NC_FORMAT_CDF5;
    int cmode = (o.overwrite || f->atomic ? NC_CLOBBER : NC_NOCLOBBER) |
                (f->format == SG_NC_FORMAT_CDF2 ? NC_64BIT_OFFSET
                                                : NC_64BIT_DATA);
    /* Per-rank create (more than one rank, direct writes allowed): rank 0
     * creates the file alone (MPI_COMM_SELF) and every other rank a
     * private shadow file in $TMPDIR that receives the same define calls,
     * so its header, and the variables' offsets, equal the file's. Define
     * mode, enddef, the direct writes, sync and close then contain no
     * library collective (ncmpi_create's collective MPI_File_open alone
     * cost 0.2-0.4 s at 4 ranks on 2 cores). The first write or read that
     * needs PnetCDF's collective data path reopens the file collectively
     * (sg_io_shadow_promote). SG_IO_SHADOW=0: collective create. */
    const char *env = getenv("SG_IO_SHADOW");
    int shadow = f->size > 1 && f->direct_write && !(env && strcmp(env, "0") == 0);
    int bad[1] = {0};
    if (shadow && f->rank != 0) {
      static int serial = 0;
      const char *tmp = getenv("TMPDIR");
      snprintf(f->shadow_path, sizeof f->shadow_path,
               "%s/sg-nc-shadow-%ld-%d-%d.nc", tmp && *tmp ? tmp : "/tmp",
               (long)getpid(), f->rank, serial++);
      int smode = NC_CLOBBER | (cmode & (NC_64BIT_OFFSET | NC_64BIT_DATA));
      if (ncmpi_create(MPI_COMM_SELF, f->shadow_path, smode, f->info,
                       &f->ncid)) {
        f->ncid = -1;
        bad[0] = 1;
      }
    }
    if (shadow) { /* every shadow made, or the collective create */
      SG_TRY(sg_io_agree_max(f->comm, SG_OK, bad, 1));
      if (bad[0]) {
        if (f->ncid >= 0) ncmpi_abort(f->ncid);
        f->ncid = -1;
        shadow = 0;
      }
    }
    f->shadow = shadow;
    if (shadow && f->rank != 0)
      rc = 0;
    else {
      errno = 0;
      rc = ncmpi_create(shadow ? MPI_COMM_SELF : f->comm, f->path, cmode,
                        f->info, &f->ncid);
    }
    lst = rc ? open_error(rc, 1, "cannot create", f->path, __LINE__, errno)
             : SG_OK;
  }
#endif
#if SG_HAVE_NETCDF_PAR
  if (f->backend == SG_NC_BACKEND_NETCDF4) {
    f->format = SG_NC_FORMAT_NETCDF4;
    int cmode = (o.overwrite || f->atomic ? NC_CLOBBER : NC_NOCLOBBER) |
                NC_NETCDF4;
    errno = 0;
    rc = nc_create_par(f->path, cmode, f->comm, f->info, &f->ncid);
    lst = rc ? open_error(rc, 0, "cannot create", f->path, __LINE__, errno)
             : SG_OK;
    if (!rc) {
      int old = 0;
      rc = nc_set_fill(f->ncid, NC_NOFILL, &old);
      if (rc) lst = sg_error_netcdf(rc, "nc_set_fill", __FILE__, __LINE__);
    }
  }
#endif
  (void)rc;
  if (lst != SG_OK) f->ncid = -1;
  st = sg_io_agree(f->comm, lst);
  if (st != SG_OK) {
    /* a rank that did create the handle closes it; the file itself is
     * either new (and then ours to remove) or was never touched */
#if SG_HAVE_PNETCDF
    if (f->ncid >= 0 && f->backend == SG_NC_BACKEND_PNETCDF)
      ncmpi_abort(f->ncid);
#endif
#if SG_HAVE_NETCDF_PAR
    if (f->ncid >= 0 && f->backend == SG_NC_BACKEND_NETCDF4)
      nc_abort(f->ncid);
#endif
    goto fail;
  }
  f->created = 1;
  *file = f;
  return SG_OK;
fail:
  file_free(f);
  return st;
}

/* Which format a file has, from its first bytes: 0 missing, 1 classic,
 * 2 HDF5, 3 unknown, 4 unreadable. Not collective. */
static int sniff_format(const char *path) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return errno == ENOENT ? 0 : 4;
  unsigned char b[8] = {0};
  size_t n = fread(b, 1, sizeof b, fp);
  fclose(fp);
  if (n >= 4 && b[0] == 'C' && b[1] == 'D' && b[2] == 'F' &&
      (b[3] == 1 || b[3] == 2 || b[3] == 5))
    return 1;
  if (n >= 8 && memcmp(b, "\x89HDF\r\n\x1a\n", 8) == 0) return 2;
  return 3;
}

sg_status sg_nc_open(MPI_Comm comm, const char *path,
                     const sg_nc_open_opts *opts, sg_nc_t *file) {
  sg_status st = SG_OK;
  struct sg_nc_t_ *f = NULL;
  sg_nc_open_opts o = opts ? *opts : sg_nc_open_opts_default();
  if (!file) return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                                 "sg_nc_open: file is NULL");
  *file = NULL;
  sg_status lst = file_alloc(comm, path, &f);
  if (lst == SG_OK) lst = parse_map(f, o.dim_map);
  if (lst == SG_OK) lst = sg_io_hints_info(o.hints, &f->info);
  /* every rank looks at the file itself (a few bytes); the kinds are
   * compared in the agreement below */
  int kind = f ? sniff_format(f->path) : 4;
  if (lst != SG_OK)
    ;
  else if (kind == 0)
    lst = sg_error_set(SG_ERR_IO, __FILE__, __LINE__, "cannot open %s: no such file",
                       f->path);
  else if (kind == 4)
    lst = sg_error_set(SG_ERR_IO, __FILE__, __LINE__,
                       "cannot open %s: not readable", f->path);
  else if (kind == 3)
    lst = sg_error_set(SG_ERR_CORRUPT, __FILE__, __LINE__,
                       "cannot open %s: not a NetCDF file (or truncated)",
                       f->path);
  sg_nc_backend b = o.backend;
  if (b == SG_NC_BACKEND_AUTO) {
    if (kind == 1)
      b = SG_HAVE_PNETCDF ? SG_NC_BACKEND_PNETCDF
          : SG_HAVE_NETCDF_PAR ? SG_NC_BACKEND_NETCDF4 : SG_NC_BACKEND_SERIAL;
    else
      b = SG_HAVE_NETCDF_PAR ? SG_NC_BACKEND_NETCDF4 : SG_NC_BACKEND_SERIAL;
  }
  if (lst != SG_OK)
    ;
  else if (!sg_nc_backend_available(b, o.writable))
    lst = sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                       "I/O backend %s is not built into this shardgrid%s",
                       sg_nc_backend_name(b),
                       b == SG_NC_BACKEND_SERIAL && o.writable
                           ? " for writing (serial is read-only)" : "");
  else if (b == SG_NC_BACKEND_PNETCDF && kind == 2)
    lst = sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                       "%s is netCDF-4/HDF5: PnetCDF cannot read it (use "
                       "netcdf4 or serial)", f->path);
  /* A read-only file is opened by every rank on its own (MPI_COMM_SELF):
   * the libraries' opens, header reads and data reads then contain no
   * collective, and the only synchronisation of sg_nc_open/sg_nc_read is
   * the io layer's agreement (which yields the core while it waits, where
   * the libraries' collectives busy-poll: 0.1-0.3 s per open at 4 ranks on
   * 2 cores). A writable file is opened collectively, after agreeing. */
  const int local = !o.writable; /* the same on every rank */
  int kinds[2] = {kind, -kind};
  if (!local) {
    SG_TRY(sg_io_agree_max(comm, lst, kinds, 2));
    if (kinds[0] != -kinds[1])
      SG_TRY(sg_io_agree(comm, sg_error_set(
                                   SG_ERR_IO, __FILE__, __LINE__,
                                   "cannot open %s: the ranks see different "
                                   "files", f->path)));
  }
  if (lst == SG_OK) {
    f->backend = b;
    f->writable = o.writable;
    f->define_mode = 0;
    f->independent = o.independent != 0;
    f->direct_read = !o.writable && !o.no_direct_read;
    f->local_handle = local;
  }
  /* a classic file shorter than its header says (a writer that stopped
   * early) reads as zeros where its data is missing: the end of every
   * variable is taken from the header here and checked at every read (a
   * variable never written at the end of a PnetCDF file is short too,
   * and stays readable as long as it is not read) */
  if (lst == SG_OK && kind == 1 && !o.writable) {
    int64_t need = 0;
    lst = sg_io_classic_extent(f->path, &need, &f->file_size, NULL, 0,
                               &f->var_end, &f->nvar_end);
  }
  MPI_Comm lcomm = lst != SG_OK ? MPI_COMM_NULL
                   : local      ? MPI_COMM_SELF
                                : f->comm;
  int rc = 0;
#if SG_HAVE_PNETCDF
  if (lst == SG_OK && b == SG_NC_BACKEND_PNETCDF) {
    rc = ncmpi_open(lcomm, f->path, o.writable ? NC_WRITE : NC_NOWRITE,
                    f->info, &f->ncid);
    if (rc) {
      lst = (rc == NC_ENOTNC || rc == NC_EBADDIM || rc == NC_EVARSIZE ||
             rc == NC_ENOTBUILT || rc == NC_EMAXNAME)
                ? sg_error_set(SG_ERR_CORRUPT, __FILE__, __LINE__,
                               "cannot open %s: bad header: %s", f->path,
                               ncmpi_strerror(rc))
                : open_error(rc, 1, "cannot open", f->path, __LINE__, 0);
    } else {
      int fmt = 0;
      ncmpi_inq_format(f->ncid, &fmt);
      f->format = fmt == NC_FORMAT_CDF5 ? SG_NC_FORMAT_CDF5
                                        : SG_NC_FORMAT_CDF2;
    }
  }
#endif
#if SG_HAVE_NETCDF
  if (lst == SG_OK &&
      (b == SG_NC_BACKEND_NETCDF4 || b == SG_NC_BACKEND_SERIAL)) {
#if SG_HAVE_NETCDF_PAR
    if (b == SG_NC_BACKEND_NETCDF4)
      rc = nc_open_par(f->path, o.writable ? NC_WRITE : NC_NOWRITE, lcomm,
                       f->info, &f->ncid);
#endif
    if (b == SG_NC_BACKEND_SERIAL)
      rc = nc_open(f->path, NC_NOWRITE, &f->ncid);
    if (rc) {
      lst = (rc == NC_ENOTNC || rc == NC_EHDFERR || rc == NC_EBADDIM ||
             rc == NC_EVARSIZE || rc == NC_EINVAL)
                ? sg_error_set(SG_ERR_CORRUPT, __FILE__, __LINE__,
                               "cannot open %s: bad or truncated file: %s",
                               f->path, nc_strerror(rc))
                : open_error(rc, 0, "cannot open", f->path, __LINE__, 0);
    } else {
      int fmt = 0;
      nc_inq_format(f->ncid, &fmt);
      f->format = fmt == NC_FORMAT_NETCDF4 || fmt == NC_FORMAT_NETCDF4_CLASSIC
                      ? SG_NC_FORMAT_NETCDF4
                  : fmt == NC_FORMAT_CDF5 ? SG_NC_FORMAT_CDF5
                                          : SG_NC_FORMAT_CDF2;
#if SG_HAVE_NETCDF_PAR
      if (b == SG_NC_BACKEND_NETCDF4) {
        int nvars = 0;
        nc_inq_nvars(f->ncid, &nvars);
        for (int v = 0; v < nvars && !rc; ++v)
          rc = nc_var_par_access(f->ncid, v, var_access(f, v));
        if (rc)
          lst = sg_error_netcdf(rc, "nc_var_par_access", __FILE__, __LINE__);
      }
#endif
    }
  }
#endif
  (void)rc;
  (void)lcomm;
  /* one agreement for a read-only open: failures, and the same file kind
   * on every rank */
  kinds[0] = kind;
  kinds[1] = -kind;
  st = sg_io_agree_max(comm, lst, kinds, 2);
  if (st == SG_OK && kinds[0] != -kinds[1])
    st = sg_error_set(SG_ERR_IO, __FILE__, __LINE__,
                      "cannot open %s: the ranks see different files",
                      f->path);
  if (st != SG_OK) {
    if (lst == SG_OK && f->ncid >= 0) { /* others failed: close ours */
#if SG_HAVE_PNETCDF
      if (b == SG_NC_BACKEND_PNETCDF) ncmpi_close(f->ncid);
#endif
#if SG_HAVE_NETCDF
      if (b != SG_NC_BACKEND_PNETCDF) nc_close(f->ncid);
#endif
    }
    goto fail;
  }
  *file = f;
  return SG_OK;
fail:
  file_free(f);
  return st;
}

/* After the close of a file made by sg_nc_create (st: the agreed close):
 * an atomic file that had no failure is renamed to its final path; one
 * that failed, or any created file being discarded, is removed. Every
 * rank returns the same status. Collective. */
static sg_status finish_created(struct sg_nc_t_ *f, sg_status st) {
  sg_status lst = SG_OK;
  const char *name = f->atomic ? f->final_path : f->path;
  if (st == SG_OK && !f->failed && !f->discard) {
    if (f->rank == 0 && rename(f->path, f->final_path) != 0)
      lst = sg_error_set(SG_ERR_IO, __FILE__, __LINE__,
                         "rename %s -> %s: %s", f->path, f->final_path,
                         strerror(errno));
    return sg_io_mark_failed(f, sg_io_agree(f->comm, lst));
  }
  if (f->rank == 0) remove(f->path);
  if (f->discard && !f->failed) return sg_io_agree(f->comm, st);
  sg_status first = f->failed ? f->fail_status : st;
  char msg[6000];
  snprintf(msg, sizeof msg, "%.1200s; the incomplete %s was removed",
           f->failed ? f->fail_msg : sg_last_error(), name);
  sg_error_set_raw(msg);
  /* after the removal: no rank sees the file any more */
  sg_status b = sg_io_barrier(f->comm);
  return b != SG_OK ? b : first;
}

sg_status sg_nc_close(sg_nc_t *file) {
  sg_status st = SG_OK;
  if (!file || !*file) return SG_OK;
  struct sg_nc_t_ *f = *file;
  sg_status lst = SG_OK;
  if (f->define_mode && f->writable) lst = sg_nc_enddef(f);
  int rc = 0;
  if (f->dfh_open) { /* this rank's own handle of the direct reads/writes */
    rc = MPI_File_close(&f->dfh);
    if (rc != MPI_SUCCESS && lst == SG_OK)
      lst = sg_error_set(SG_ERR_MPI, __FILE__, __LINE__,
                         "MPI_File_close of %s failed", f->path);
    f->dfh_open = 0;
  }
#if SG_HAVE_PNETCDF
  if (f->backend == SG_NC_BACKEND_PNETCDF) {
    rc = ncmpi_close(f->ncid);
    if (rc && lst == SG_OK)
      lst = sg_error_pnetcdf(rc, "ncmpi_close", __FILE__, __LINE__);
    if (f->shadow && f->rank != 0) remove(f->shadow_path);
  }
#endif
#if SG_HAVE_NETCDF
  if (f->backend != SG_NC_BACKEND_PNETCDF) {
    rc = nc_close(f->ncid);
    if (rc && lst == SG_OK)
      lst = sg_error_netcdf(rc, "nc_close", __FILE__, __LINE__);
  }
#endif
  (void)rc;
  if (lst != SG_OK && f->writable)
    lst = sg_io_write_error(f, lst, 0, "closing");
  st = sg_io_mark_failed(f, sg_io_agree(f->comm, lst));
  if (f->atomic || (f->created && f->discard)) st = finish_created(f, st);
  file_free(f);
  *file = NULL;
  return st;
}

sg_status sg_nc_discard(sg_nc_t *file) {
  if (!file || !*file) return SG_OK;
  (*file)->discard = 1;
  return sg_nc_close(file);
}

sg_status sg_io_shadow_promote(struct sg_nc_t_ *f) {
  sg_status st = SG_OK;
  if (!f->shadow) return SG_OK;
#if SG_HAVE_PNETCDF
  sg_status lst = SG_OK;
  int rc = ncmpi_close(f->ncid); /* rank 0: the file's header is complete */
  if (rc) lst = sg_error_pnetcdf(rc, "ncmpi_close", __FILE__, __LINE__);
  if (f->rank != 0) remove(f->shadow_path);
  f->ncid = -1;
  f->shadow = 0;
  SG_TRY(sg_io_agree(f->comm, lst));
  rc = ncmpi_open(f->comm, f->path, NC_WRITE, f->info, &f->ncid);
  if (rc) {
    f->ncid = -1;
    lst = sg_error_pnetcdf(rc, "ncmpi_open (collective reopen)", __FILE__,
                           __LINE__);
  }
  SG_TRY(sg_io_agree(f->comm, lst));
fail:
#endif
  return st;
}

sg_status sg_nc_sync(sg_nc_t f) {
  sg_status lst = SG_OK;
  int rc = 0;
  if (!f) return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                              "file is NULL");
#if SG_HAVE_PNETCDF
  /* PnetCDF file whose data all went through the direct writes (and whose
   * header PnetCDF wrote at enddef, straight to the file: it buffers
   * nothing): every rank flushes the file through its own handle (fsync
   * flushes every dirty page of the file on that node, the header and the
   * other ranks' bytes included) and the ranks agree. No library
   * collective (ncmpi_sync is a barrier and a collective MPI_File_sync).
   * After writes through PnetCDF (record variables, converted types,
   * non-contiguous slabs) ncmpi_sync, as PnetCDF may keep the record
   * count to write. */
  if (f->backend == SG_NC_BACKEND_PNETCDF && f->writable && !f->pnc_dirty &&
      f->direct_write && !f->define_mode) {
    if ((lst = sg_io_own_handle(f, MPI_MODE_WRONLY)) == SG_OK &&
        MPI_File_sync(f->dfh) != MPI_SUCCESS)
      lst = sg_error_set(SG_ERR_IO, __FILE__, __LINE__,
                         "MPI_File_sync of %s failed", f->path);
    if (lst != SG_OK) lst = sg_io_write_error(f, lst, 0, "flushing");
    return sg_io_mark_failed(f, sg_io_agree(f->comm, lst));
  }
#endif
  if (f->dfh_open && f->writable && MPI_File_sync(f->dfh) != MPI_SUCCESS)
    lst = sg_error_set(SG_ERR_IO, __FILE__, __LINE__,
                       "MPI_File_sync of the direct writes to %s failed",
                       f->path);
#if SG_HAVE_PNETCDF
  if (f->backend == SG_NC_BACKEND_PNETCDF && (rc = ncmpi_sync(f->ncid)) &&
      lst == SG_OK)
    lst = sg_error_pnetcdf(rc, "ncmpi_sync", __FILE__, __LINE__);
  f->pnc_dirty = 0;
#endif
#if SG_HAVE_NETCDF
  if (f->backend == SG_NC_BACKEND_NETCDF4 && (rc = nc_sync(f->ncid)))
    lst = sg_error_netcdf(rc, "nc_sync", __FILE__, __LINE__);
#endif
  (void)rc;
  if (lst != SG_OK) lst = sg_io_write_error(f, lst, 0, "flushing");
  return sg_io_mark_failed(f, sg_io_agree(f->comm, lst));
}

sg_nc_backend sg_nc_backend_of(sg_nc_t f) {
  return f ? f->backend : SG_NC_BACKEND_AUTO;
}
sg_nc_format sg_nc_format_of(sg_nc_t f) {
  return f ? f->format : SG_NC_FORMAT_AUTO;
}
MPI_Comm sg_nc_comm(sg_nc_t f) { return f ? f->comm : MPI_COMM_NULL; }

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

sg_status sg_nc_def_dim(sg_nc_t f, const char *name, int64_t len,
                        int *dimid) {
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

sg_status sg_nc_def_var(sg_nc_t f, const char *name, sg_dtype dtype,
                        int ndims, const char *const *dim_names,
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
        (rc = nc_var_par_access(f->ncid, id, var_access(f, id))))
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
                          const char *axis, const double *values,
                          int *varid) {
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
    sg_nc_pending_coord *p =
        realloc(f->pending, (size_t)(f->npending + 1) * sizeof *p);
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
  if (!f) return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                              "attribute %s: file is NULL",
                              name ? name : "(null)");
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

sg_status sg_nc_put_att(sg_nc_t f, int varid, const char *name,
                        sg_dtype dtype, int64_t n, const void *values) {
  return put_att_raw(f, varid, name, 0, dtype, n, values);
}

/* The type of a variable, locally. */
static int var_type(struct sg_nc_t_ *f, int varid, int *t) {
  return SG_IO_CALL(f, inq_vartype, f->ncid, varid, t);
}

sg_status sg_nc_put_cf(sg_nc_t f, int varid, const sg_nc_cf *cf) {
  sg_status st = SG_OK;
  int entered = 0;
  if (!f || !cf) return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
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
      SG_TRY(def_result(f, sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__,
                                               __LINE__,
                                               "_FillValue for nc type %d", t)));
    }
  }
  SG_TRY(sg_io_leave_define(f, entered));
  entered = 0;
fail:
  if (entered) sg_io_leave_define(f, entered);
  return st;
}

sg_status sg_nc_put_global_cf(sg_nc_t f, const char *title,
                              const char *history, const char *conventions) {
  sg_status st = SG_OK;
  int entered = 0;
  if (!f) return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
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
      for (int k = 0; k < 8; ++k) h = (h ^ (uint32_t)((off >> (8 * k)) & 255)) * 16777619u;
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
  if (!f) return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
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
  if (rc) SG_RAISE(SG_ERR_IO, "cannot inquire variable %s in %s (code %d)",
                   name, f->path, rc);
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

sg_status sg_nc_inq_att(sg_nc_t f, int varid, const char *name,
                        int64_t *len) {
  sg_status st = SG_OK;
  int t = 0;
  if (!f || !name || !len)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_nc_inq_att: NULL argument");
  if (att_inq(f, varid, name, &t, len))
    SG_RAISE(SG_ERR_INVALID_ARG, "no attribute %s in %s", name, f->path);
fail:
  return st;
}

sg_status sg_nc_get_att_text(sg_nc_t f, int varid, const char *name,
                             char *buf, size_t cap) {
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
