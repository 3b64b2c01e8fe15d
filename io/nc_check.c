/* shardgrid — is a classic-format NetCDF file as long as its header says?
 *
 * A classic (CDF-1, CDF-2, CDF-5) file whose writer stopped early (a full
 * disk, a killed job, a copy cut short) keeps a complete header but lacks
 * the end of its data. Neither PnetCDF nor netCDF-C notice: a read beyond
 * the end of the file returns zeros. The header states where every
 * variable begins and its shape, so the length the file must have is known
 * before any data is read; this file parses the header (big-endian, as in
 * the format specification) and computes it. It trusts nothing it reads:
 * every count is bounded, every read checked. */
#include "io_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

typedef struct hreader {
  FILE *fp;
  int64_t size; /* of the file */
  int ver;      /* 1, 2 or 5 */
  int bad;      /* a read failed or the structure is broken: stop here */
  /* a count asks for more header bytes than the file has left: no valid
   * file has such a header (the libraries would allocate what it says:
   * gigabytes for a flipped bit in a 1 KB file) */
  int impossible;
  /* the structure is followed to its end (every later count is bounded)
   * but the shapes give no extents (a dim id out of range, an unknown
   * type): the library decides */
  int noextent;
  char why[200];
} hreader;

/* Sizes saturate at INT64_MAX: past 2^62 bytes no file holds the data, and
 * a header that says so is still read to its end. */
static int64_t sat_add(int64_t a, int64_t b) {
  return a > INT64_MAX - b ? INT64_MAX : a + b;
}
static int64_t sat_mul(int64_t a, int64_t b) {
  return a != 0 && b > INT64_MAX / a ? INT64_MAX : a * b;
}
static int64_t sat_u64(uint64_t v) {
  return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
}
static int64_t pad4(int64_t n) {
  return n > INT64_MAX - 3 ? INT64_MAX : (n + 3) & ~(int64_t)3;
}

/* The next n bytes of the header must be in the file. */
static void need_bytes(hreader *h, int64_t n, const char *what) {
  if (h->bad) return;
  off_t pos = ftello(h->fp);
  if (pos < 0) {
    h->bad = 1;
    return;
  }
  int64_t left = h->size - (int64_t)pos;
  if (n < 0 || n > left) {
    h->bad = h->impossible = 1;
    snprintf(h->why, sizeof h->why,
             "%s at byte %lld needs %lld bytes, the file has %lld left", what,
             (long long)pos, (long long)n, (long long)(left > 0 ? left : 0));
  }
}

static uint64_t rd_be(hreader *h, int bytes) {
  unsigned char b[8];
  need_bytes(h, bytes, "a header field"); /* a file cut inside its header */
  if (h->bad || fread(b, 1, (size_t)bytes, h->fp) != (size_t)bytes) {
    h->bad = 1;
    return 0;
  }
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | b[i];
  return v;
}

/* NON_NEG: 32-bit (CDF-1, CDF-2) or 64-bit (CDF-5), any value (saturated) */
static int64_t rd_nonneg(hreader *h) {
  return sat_u64(rd_be(h, h->ver == 5 ? 8 : 4));
}

static void skip(hreader *h, int64_t n) {
  if (!h->bad && (n < 0 || fseeko(h->fp, (off_t)n, SEEK_CUR) != 0)) h->bad = 1;
}

/* A count whose entries of `each` (<= 8) bytes must be in the file (any
 * value, 2^64 - 1 included), then below `limit` (what this parser
 * follows). */
static int64_t rd_count_in_file(hreader *h, int each, int64_t limit,
                                const char *what) {
  int64_t n = rd_nonneg(h);
  need_bytes(h, pad4(sat_mul(n, each)), what);
  if (!h->bad && n >= limit) h->bad = 1;
  return h->bad ? 0 : n;
}

/* Bytes of one value of a classic nc_type; 0 if unknown. */
static int type_size(uint64_t t) {
  switch (t) {
  case 1:
  case 2:
  case 7: return 1; /* byte, char, ubyte */
  case 3:
  case 8: return 2; /* short, ushort */
  case 4:
  case 5:
  case 9: return 4; /* int, float, uint */
  case 6:
  case 10:
  case 11: return 8; /* double, int64, uint64 */
  default: return 0;
  }
}

static void rd_name(hreader *h, char *buf, size_t cap) {
  int64_t n = rd_count_in_file(h, 1, 65536, "a name");
  buf[0] = '\0';
  if (h->bad) return;
  size_t keep = (size_t)n < cap - 1 ? (size_t)n : cap - 1;
  if (fread(buf, 1, keep, h->fp) != keep) {
    h->bad = 1;
    return;
  }
  buf[keep] = '\0';
  skip(h, pad4(n) - (int64_t)keep);
}

/* A list's tag and length; an ABSENT list is (0, 0). */
static int64_t rd_list(hreader *h, uint64_t tag, int64_t limit,
                       const char *what) {
  uint64_t t = rd_be(h, 4);
  /* every entry has >= 8 bytes */
  int64_t n = rd_count_in_file(h, 8, limit, what);
  if (h->bad) return 0;
  if (t == 0 && n == 0) return 0;
  if (t != tag) h->bad = 1;
  return h->bad ? 0 : n;
}

static void skip_atts(hreader *h) {
  char name[SG_IO_NAME_BUF];
  int64_t n = rd_list(h, 0x0C, (int64_t)1 << 24, "a list of attributes");
  for (int64_t i = 0; i < n && !h->bad; ++i) {
    rd_name(h, name, sizeof name);
    int es = type_size(rd_be(h, 4));
    if (es == 0) h->bad = 1; /* the values' length is unknown */
    int64_t len = rd_count_in_file(h, es, (int64_t)1 << 40,
                                   "the values of an attribute");
    skip(h, pad4(len * es));
  }
}

typedef struct recvar {
  int64_t begin, bytes; /* bytes of one record */
  int64_t varid;
  char name[SG_IO_NAME_BUF];
} recvar;

/* One variable's entry after its name: *rec if its first dim is the
 * record dim, its bytes (of one record; saturated) and where it begins. */
static void rd_var(hreader *h, const int64_t *dimlen, int64_t ndims, int *rec,
                   int64_t *bytes, int64_t *begin) {
  int64_t nd = rd_count_in_file(h, h->ver == 5 ? 8 : 4, 1025,
                                "the dim ids of a variable");
  int64_t n = 1;
  *rec = 0;
  for (int64_t k = 0; k < nd && !h->bad; ++k) {
    int64_t id = rd_nonneg(h);
    if (id >= ndims)
      h->noextent = 1;
    else if (dimlen[id] != 0)
      n = sat_mul(n, dimlen[id]);
    else if (k != 0)
      h->noextent = 1; /* only the first may be the record dim */
    else
      *rec = 1;
  }
  skip_atts(h);
  int es = type_size(rd_be(h, 4));
  if (es == 0) h->noextent = 1;
  (void)rd_nonneg(h); /* vsize: computed instead */
  *begin = sat_u64(rd_be(h, h->ver == 1 ? 4 : 8));
  *bytes = sat_mul(n, es);
}

/* The end of the last record of every record variable, as both libraries
 * lay records out: the records' vsizes (padded to 4 bytes), one record
 * variable alone unpadded. */
static void record_ends(const recvar *rv, int64_t nrv, int64_t numrecs,
                        int64_t *vend, int64_t *end, char *worst, size_t cap) {
  int64_t recsize = 0;
  for (int64_t i = 0; i < nrv; ++i)
    recsize = sat_add(recsize, nrv == 1 ? rv[i].bytes : pad4(rv[i].bytes));
  for (int64_t i = 0; i < nrv; ++i) {
    if (rv[i].bytes == 0) continue;
    int64_t e = sat_add(sat_add(rv[i].begin, sat_mul(numrecs - 1, recsize)),
                        rv[i].bytes);
    vend[rv[i].varid] = e;
    if (e > *end) {
      *end = e;
      snprintf(worst, cap, "%s", rv[i].name);
    }
  }
}

/* The header parser proper, on an open stream positioned at the start. */
static sg_status classic_extent_fp(FILE *fp, int64_t size, int64_t *need,
                                   char *var, size_t cap, int64_t **ends,
                                   int *nends) {
  sg_status st = SG_OK;
  int64_t *vend = NULL;
  hreader h = {fp, size, 0, 0, 0, 0, ""};
  int64_t *dimlen = NULL;
  recvar *rv = NULL;
  int64_t nrv = 0, caprv = 0, end = 0;
  char name[SG_IO_NAME_BUF], worst[SG_IO_NAME_BUF] = "";
  unsigned char magic[4];
  if (fread(magic, 1, 4, h.fp) != 4 || memcmp(magic, "CDF", 3) != 0 ||
      (magic[3] != 1 && magic[3] != 2 && magic[3] != 5))
    goto done; /* not classic: nothing to say */
  h.ver = magic[3];
  /* any record count: one that no file can hold saturates the record
   * variables' ends; the rest of the header is still bounded (a huge
   * count here once let an attribute of 2 GB through) */
  uint64_t numrecs = rd_be(&h, h.ver == 5 ? 8 : 4);
  const int streaming = numrecs == (h.ver == 5 ? UINT64_MAX : 0xFFFFFFFFu);
  int64_t ndims = rd_list(&h, 0x0A, (int64_t)1 << 20, "a list of dims");
  if (!h.bad && ndims > 0 && !(dimlen = malloc((size_t)ndims * sizeof *dimlen)))
    SG_RAISE(SG_ERR_ALLOC, "out of memory");
  for (int64_t d = 0; d < ndims && !h.bad; ++d) {
    rd_name(&h, name, sizeof name);
    dimlen[d] = rd_nonneg(&h);
  }
  skip_atts(&h); /* global attributes */
  int64_t nvars = rd_list(&h, 0x0B, (int64_t)1 << 24, "a list of variables");
  if (!h.bad && nvars > 0 && !(vend = calloc((size_t)nvars, sizeof *vend)))
    SG_RAISE(SG_ERR_ALLOC, "out of memory");
  for (int64_t v = 0; v < nvars && !h.bad; ++v) {
    int rec = 0;
    int64_t bytes = 0, begin = 0;
    rd_name(&h, name, sizeof name);
    rd_var(&h, dimlen, ndims, &rec, &bytes, &begin);
    if (h.bad || h.noextent) continue; /* the rest is still bounded */
    if (rec) {
      if (nrv == caprv) {
        caprv = caprv ? 2 * caprv : 16;
        recvar *t = realloc(rv, (size_t)caprv * sizeof *rv);
        if (!t) SG_RAISE(SG_ERR_ALLOC, "out of memory");
        rv = t;
      }
      rv[nrv].begin = begin;
      rv[nrv].bytes = bytes;
      rv[nrv].varid = v;
      snprintf(rv[nrv].name, sizeof rv[nrv].name, "%s", name);
      ++nrv;
    } else if (bytes > 0) {
      vend[v] = sat_add(begin, bytes);
      if (vend[v] > end) {
        end = vend[v];
        snprintf(worst, sizeof worst, "%s", name);
      }
    }
  }
  if (h.impossible)
    SG_RAISE(SG_ERR_CORRUPT, "corrupt NetCDF header: %s", h.why);
  if (h.bad || h.noextent) goto done; /* the library decides */
  if (nrv > 0 && numrecs > 0 && !streaming)
    record_ends(rv, nrv, sat_u64(numrecs), vend, &end, worst, sizeof worst);
  *need = end;
  if (var && cap) snprintf(var, cap, "%s", worst);
  if (ends && nends) {
    *ends = vend;
    *nends = (int)nvars;
    vend = NULL;
  }
done:
fail:
  free(vend);
  free(dimlen);
  free(rv);
  return st;
}

static void extent_reset(int64_t *need, int64_t *have, char *var, size_t cap,
                         int64_t **ends, int *nends) {
  *need = -1;
  if (have) *have = -1;
  if (ends) *ends = NULL;
  if (nends) *nends = 0;
  if (var && cap) var[0] = '\0';
}

sg_status sg_io_classic_extent(const char *path, int64_t *need, int64_t *have,
                               char *var, size_t cap, int64_t **ends,
                               int *nends) {
  sg_status st = SG_OK;
  FILE *fp = NULL;
  struct stat sb;
  extent_reset(need, have, var, cap, ends, nends);
  if (stat(path, &sb) != 0)
    SG_RAISE(SG_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
  *have = (int64_t)sb.st_size;
  if (!(fp = fopen(path, "rb")))
    SG_RAISE(SG_ERR_IO, "cannot open %s: %s", path, strerror(errno));
  st = classic_extent_fp(fp, *have, need, var, cap, ends, nends);
  if (st == SG_ERR_CORRUPT) {
    char where[600];
    snprintf(where, sizeof where, "%.500s: ", path);
    sg_error_prepend(where);
  }
fail:
  if (fp) fclose(fp);
  return st;
}

sg_status sg_io_classic_extent_mem(const void *bytes, size_t len, int64_t *need,
                                   char *var, size_t cap, int64_t **ends,
                                   int *nends) {
  sg_status st = SG_OK;
  FILE *fp = NULL;
  extent_reset(need, NULL, var, cap, ends, nends);
  if (len < 4 || !bytes) goto fail; /* not even a magic number */
  /* fmemopen does not write to a buffer opened "rb" */
  if (!(fp = fmemopen((void *)(uintptr_t)bytes, len, "rb")))
    SG_RAISE(SG_ERR_ALLOC, "sg_io_classic_extent_mem: fmemopen: %s",
             strerror(errno));
  SG_TRY(classic_extent_fp(fp, (int64_t)len, need, var, cap, ends, nends));
fail:
  if (fp) fclose(fp);
  return st;
}

/* ---- failed writes ---------------------------------------------------------- */

/* Is the file system holding path full (no block left for a user)? */
static int fs_full(const char *path) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == dir)
    dir[1] = '\0';
  else
    *slash = '\0';
  struct statvfs sv;
  return statvfs(dir, &sv) == 0 && sv.f_bavail == 0;
}

sg_status sg_io_write_error(struct sg_nc_t_ *f, sg_status lst, int no_space,
                            const char *what) {
  if (lst == SG_OK || !f) return lst;
  const int e = errno;
  const char *name = f->atomic ? f->final_path : f->path;
  no_space = no_space || e == ENOSPC || e == EDQUOT || fs_full(f->path);
  char msg[6000];
  if (no_space)
    snprintf(msg, sizeof msg, "%s %s: no space left on device (%.800s)",
             what ? what : "writing", name, sg_last_error());
  else
    snprintf(msg, sizeof msg, "%.800s (%s %s)", sg_last_error(),
             what ? what : "writing", name);
  sg_error_set_raw(msg);
  return lst;
}

sg_status sg_io_mark_failed(struct sg_nc_t_ *f, sg_status st) {
  if (st != SG_OK && f && !f->failed) {
    f->failed = 1;
    f->fail_status = st;
    snprintf(f->fail_msg, sizeof f->fail_msg, "%.1100s", sg_last_error());
  }
  return st;
}

sg_status sg_io_check_var_extent(const struct sg_nc_t_ *f, int varid) {
  if (!f->var_end || varid < 0 || varid >= f->nvar_end ||
      f->var_end[varid] <= f->file_size)
    return SG_OK;
  char name[SG_IO_NAME_BUF] = "?";
  SG_IO_CALL(f, inq_varname, f->ncid, varid, name);
  return sg_error_set(SG_ERR_CORRUPT, __FILE__, __LINE__,
                      "%s is truncated: it has %lld bytes but variable '%s' "
                      "ends at byte %lld, says its header: a write that "
                      "failed or was cut short (full disk, killed job, "
                      "partial copy)?",
                      f->path, (long long)f->file_size, name,
                      (long long)f->var_end[varid]);
}
