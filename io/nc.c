/* shardgrid — NetCDF files: backends, names and maps, hints, open/create,
 * close. Define mode, attributes and inquiry are in nc_def.c; reading and
 * writing shards in nc_rw.c. */
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
  case 1:
  case 2:
  case 3:
  case 4:
  case 7:
  case 8: return SG_DTYPE_I32;
  case 9:
  case 10:
  case 11: return SG_DTYPE_I64;
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
static sg_status open_error(int rc, int pnc, const char *what, const char *path,
                            int line, int sys) {
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
    return sg_error_set(SG_ERR_IO, __FILE__, line, "%s %s: no such file", what,
                        path);
  if (pnc && rc == NC_EEXIST)
    return sg_error_set(SG_ERR_IO, __FILE__, line,
                        "%s %s: file exists (set overwrite to replace it)",
                        what, path);
#endif
#if SG_HAVE_NETCDF
  if (!pnc && rc == ENOENT)
    return sg_error_set(SG_ERR_IO, __FILE__, line, "%s %s: no such file", what,
                        path);
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
      SG_RAISE(SG_ERR_CONFIG, "I/O hints: expected key=value in '%.*s'", (int)n,
               p);
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
int sg_io_var_access(const struct sg_nc_t_ *f, int varid) {
  if (!f->independent) return NC_COLLECTIVE;
  if (!f->writable) return NC_INDEPENDENT;
  int nd = 0, unlim = -1, dimids[SG_NC_MAX_DIMS], deflate = 0;
  if (nc_inq_varndims(f->ncid, varid, &nd) || nd > SG_NC_MAX_DIMS ||
      nc_inq_vardimid(f->ncid, varid, dimids))
    return NC_COLLECTIVE;
  nc_inq_unlimdim(f->ncid, &unlim);
  for (int d = 0; d < nd; ++d)
    if (dimids[d] == unlim) return NC_COLLECTIVE;
  if (nc_inq_var_deflate(f->ncid, varid, NULL, &deflate, NULL) == 0 && deflate)
    return NC_COLLECTIVE;
  return NC_INDEPENDENT;
}
#endif

sg_status sg_nc_create(MPI_Comm comm, const char *path,
                       const sg_nc_create_opts *opts, sg_nc_t *file) {
  sg_status st = SG_OK;
  struct sg_nc_t_ *f = NULL;
  sg_nc_create_opts o = opts ? *opts : sg_nc_create_opts_default();
  if (!file)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_nc_create: file is NULL");
  *file = NULL;
  sg_status lst = file_alloc(comm, path, &f);
  if (o.backend == SG_NC_BACKEND_AUTO)
    o.backend = SG_HAVE_PNETCDF ? SG_NC_BACKEND_PNETCDF : SG_NC_BACKEND_NETCDF4;
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
                       "replace it)",
                       f->final_path);
  else if (o.backend == SG_NC_BACKEND_SERIAL)
    lst = sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                       "the serial netCDF backend reads only; create %s with "
                       "pnetcdf or netcdf4",
                       f->path);
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
    int shadow = f->size > 1 && f->direct_write &&
                 !(env && strcmp(env, "0") == 0);
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
    if (f->ncid >= 0 && f->backend == SG_NC_BACKEND_NETCDF4) nc_abort(f->ncid);
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
  if (!file)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
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
    lst = sg_error_set(SG_ERR_IO, __FILE__, __LINE__,
                       "cannot open %s: no such file", f->path);
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
      b = SG_HAVE_PNETCDF      ? SG_NC_BACKEND_PNETCDF
          : SG_HAVE_NETCDF_PAR ? SG_NC_BACKEND_NETCDF4
                               : SG_NC_BACKEND_SERIAL;
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
                           ? " for writing (serial is read-only)"
                           : "");
  else if (b == SG_NC_BACKEND_PNETCDF && kind == 2)
    lst = sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                       "%s is netCDF-4/HDF5: PnetCDF cannot read it (use "
                       "netcdf4 or serial)",
                       f->path);
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
      SG_TRY(sg_io_agree(comm,
                         sg_error_set(SG_ERR_IO, __FILE__, __LINE__,
                                      "cannot open %s: the ranks see different "
                                      "files",
                                      f->path)));
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
    rc = ncmpi_open(lcomm, f->path, o.writable ? NC_WRITE : NC_NOWRITE, f->info,
                    &f->ncid);
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
      f->format = fmt == NC_FORMAT_CDF5 ? SG_NC_FORMAT_CDF5 : SG_NC_FORMAT_CDF2;
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
    if (b == SG_NC_BACKEND_SERIAL) rc = nc_open(f->path, NC_NOWRITE, &f->ncid);
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
          rc = nc_var_par_access(f->ncid, v, sg_io_var_access(f, v));
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
                      "cannot open %s: the ranks see different files", f->path);
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
      lst = sg_error_set(SG_ERR_IO, __FILE__, __LINE__, "rename %s -> %s: %s",
                         f->path, f->final_path, strerror(errno));
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
  if (!f)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__, "file is NULL");
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
